// CudaQwen35Weights: the device and shape checks, the memory estimate, and the
// checkpoint tensors uploaded to the device in the kernels' layout (dense, or
// MLX q4/q8 packed), one projection or layer at a time.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35_runtime.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/weight_upload.h"
#include "backend/cuda/workspace_dims.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/moe_experts.h"

namespace nextn::cuda {

// ---------------------------------------------------------------------------
// loading

namespace {

bool same_quant(const WeightRef& a, const WeightRef& b) {
  return a.codec() == b.codec() && a.quant.bits == b.quant.bits && a.quant.group_size == b.quant.group_size &&
         a.cols == b.cols;
}

void check_shapes(const Qwen35Config& c) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) fail("--backend cuda: unsupported shape: {}", what);
  };
  need(c.head_dim % 32 == 0 && c.head_dim <= 256, fmt::format("head_dim {} (a multiple of 32, at most 256)", c.head_dim));
  need(c.rotary_dim() <= c.head_dim && c.rotary_dim() % 2 == 0, fmt::format("rotary dim {}", c.rotary_dim()));
  need(c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads == 0,
       fmt::format("{} query heads over {} KV heads", c.num_attention_heads, c.num_key_value_heads));
  need(c.linear_key_head_dim <= 128 && c.linear_value_head_dim <= 128,
       fmt::format("GDN head dims {}x{} (at most 128)", c.linear_key_head_dim, c.linear_value_head_dim));
  need(c.linear_num_key_heads > 0 && c.linear_num_value_heads % c.linear_num_key_heads == 0,
       fmt::format("{} GDN value heads over {} key heads", c.linear_num_value_heads, c.linear_num_key_heads));
  need(c.linear_conv_kernel_dim >= 1, "conv kernel");
  need(c.hidden_size % 32 == 0, fmt::format("hidden size {} (a multiple of 32)", c.hidden_size));
  if (c.moe) {
    need(c.num_experts <= kMaxExperts, fmt::format("{} experts (at most {})", c.num_experts, kMaxExperts));
    need(c.num_experts_per_tok <= kMaxExpertsPerToken,
         fmt::format("{} experts per token (at most {})", c.num_experts_per_tok, kMaxExpertsPerToken));
  }
}

// How a trunk matrix in one of transformers' formats arrives: the bf16 mode
// streams their native codecs (FP8 / Z4); the fp32 mode runs them
// dequantized, as the CPU does. (The embedding and LM head: always dequantized.)
MatrixForm trunk_form(Act act) { return act == Act::BF16 ? MatrixForm::Native : MatrixForm::Fp32; }

// Device bytes the weights take in the kernels' layout (for the up-front
// check). A transformers-format module arrives checked only (MatrixForm::
// Checked, as dense): it is counted at the dense width, an upper bound of
// its native codecs in the bf16 mode and exact for its fp32 dequantization.
size_t weight_bytes(const WeightRef& w, Act act) {
  if (!w.quantized()) return size_t(w.rows) * size_t(w.cols) * (act == Act::F32 ? 4 : 2);
  return size_t(w.rows) * size_t(w.cols) * size_t(w.quant.bits) / 8 +
         size_t(w.rows) * size_t(w.cols / w.quant.group_size) * 8;
}

size_t all_weight_bytes(const Qwen35Checkpoint& ck, Act act) {
  constexpr MatrixForm kChecked = MatrixForm::Checked;
  const auto& c = ck.config();
  const int H = c.hidden_size, hd = c.head_dim, I = c.intermediate_size;
  const int64_t V = c.vocab_size;
  const WeightRef emb = ck.matrix("embed_tokens", V, H, MatrixForm::Checked), head = ck.lm_head();
  size_t total = weight_bytes(emb, act);
  if (head.weight != emb.weight) total += weight_bytes(head, act);
  auto layer = [&](const std::string& p, bool full) {
    size_t b = 0;
    if (full) {
      for (const char* n : {".q_proj", ".k_proj", ".v_proj"}) {
        const int64_t rows = std::string(n) == ".q_proj" ? int64_t(c.num_attention_heads) * hd * 2
                                                          : int64_t(c.num_key_value_heads) * hd;
        b += weight_bytes(ck.matrix(p + ".self_attn" + n, rows, H, kChecked), act);
      }
      b += weight_bytes(ck.matrix(p + ".self_attn.o_proj", H, int64_t(c.num_attention_heads) * hd, kChecked), act);
    } else {
      const std::string g = p + ".linear_attn";
      b += weight_bytes(ck.matrix(g + ".in_proj_qkv", c.conv_dim(), H, kChecked), act);
      b += weight_bytes(ck.matrix(g + ".in_proj_z", c.value_dim(), H, kChecked), act);
      b += weight_bytes(ck.matrix(g + ".out_proj", H, c.value_dim(), kChecked), act);
    }
    if (c.moe) {
      const int Is = c.shared_expert_intermediate_size;
      b += weight_bytes(ck.matrix(p + ".mlp.gate", c.num_experts, H, kChecked), act);
      b += weight_bytes(ck.matrix(p + ".mlp.shared_expert_gate", 1, H, kChecked), act);
      for (const char* n : {".mlp.shared_expert.gate_proj", ".mlp.shared_expert.up_proj"})
        b += weight_bytes(ck.matrix(p + n, Is, H, kChecked), act);
      b += weight_bytes(ck.matrix(p + ".mlp.shared_expert.down_proj", H, Is, kChecked), act);
      const ExpertLayout layout = expert_layout(ck, p);
      for (int e = 0; e < c.num_experts; ++e) {
        const ExpertMatrices m = expert_matrices(ck, p, layout, e, kChecked);
        b += weight_bytes(m.gate, act) + weight_bytes(m.up, act) + weight_bytes(m.down, act);
      }
      return b;
    }
    for (const char* n : {".mlp.gate_proj", ".mlp.up_proj"}) b += weight_bytes(ck.matrix(p + n, I, H, kChecked), act);
    b += weight_bytes(ck.matrix(p + ".mlp.down_proj", H, I, kChecked), act);
    return b;
  };
  for (int i = 0; i < c.num_hidden_layers; ++i)
    total += layer("layers." + std::to_string(i), c.full_attention[size_t(i)]);
  if (ck.mtp_layers() > 0) {
    total += weight_bytes(ck.matrix("mtp.fc", H, 2 * H, kChecked), act);
    total += layer("mtp.layers.0", true);
  }
  return total;
}

}  // namespace

size_t sequence_bytes(const Qwen35Config& c, int max_tokens, Act act, bool has_mtp, int max_rows) {
  const size_t kv = size_t(max_tokens) * c.num_key_value_heads * c.head_dim * size_t(act_size(act)) * 2;
  const size_t gdn = 2 * size_t(c.linear_num_value_heads) * c.linear_key_head_dim * c.linear_value_head_dim * 4 +
                     size_t(max_rows) * (2 * c.conv_dim() + c.value_dim()) * 4;
  size_t total = has_mtp ? kv : 0;
  for (int i = 0; i < c.num_hidden_layers; ++i) total += c.full_attention[size_t(i)] ? kv : gdn;
  return total + size_t(max_rows) * size_t(c.vocab_size) * 4;  // logits
}

CudaQwen35Weights::CudaQwen35Weights(const Qwen35Checkpoint& ck, int reserve_tokens, const RuntimeOptions& options)
    : cfg(ck.config()), act(options.act == Activations::Fp32 ? Act::F32 : Act::BF16), fp8_matmul(options.fp8_matmul) {
  static_assert(kWorkspaceRows == kMaxRows && kMaxForwardRows == kMaxRows && kPartialSplitKeys == cuda::kAttnSplit);
  if (reserve_tokens < 0) fail("internal: CudaQwen35Weights reserving {} tokens", reserve_tokens);
  (void)cuda_device_summary();
  check_shapes(cfg);
  {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t need = all_weight_bytes(ck, act) + sequence_bytes(cfg, reserve_tokens, act, ck.mtp_layers() > 0);
    if (need > free_b)
      fail("--backend cuda: the checkpoint needs about {:.2f} GiB of device memory (weights, caches and {} tokens "
           "of context), but only {:.2f} of {:.2f} GiB are free",
           double(need) / kGiB, reserve_tokens, double(free_b) / kGiB, double(total_b) / kGiB);
  }
  cuda::init_kernels();
  const int H = cfg.hidden_size, V = cfg.vocab_size;
  const WeightRef emb = ck.matrix("embed_tokens", V, H), head_ref = ck.lm_head();
  const bool tied = head_ref.weight == emb.weight;
  embed = upload_matrix({emb}, "embedding", false, tied ? Use::Matmul : Use::RowLookupOnly);
  head = tied ? embed : upload_matrix({head_ref}, "LM head", false);
  head.splits = 1;  // every arm projects with the same kernel and the same bits
  final_norm = upload_floats(ck.norm("norm", H, true), "norms");
  for (int i = 0; i < cfg.num_hidden_layers; ++i)
    layers.push_back(load_layer(ck, "layers." + std::to_string(i), cfg.full_attention[size_t(i)]));
  has_mtp = ck.mtp_layers() > 0;
  if (has_mtp) {
    mtp_fc = upload_matrix({ck.matrix("mtp.fc", H, 2 * H, trunk_form(act))}, "MTP fc", true);
    mtp_norm_emb = upload_floats(ck.norm("mtp.pre_fc_norm_embedding", H, true), "norms");
    mtp_norm_hid = upload_floats(ck.norm("mtp.pre_fc_norm_hidden", H, true), "norms");
    mtp_norm = upload_floats(ck.norm("mtp.norm", H, true), "norms");
    mtp_layer = load_layer(ck, "mtp.layers.0", true);
  }
  {
    std::vector<float> inv(size_t(cfg.rotary_dim() / 2));
    for (size_t i = 0; i < inv.size(); ++i)  // as transformers and cpu::rope_angles: fp32(1 / theta^(2i/rd))
      inv[i] = float(1.0 / std::pow(cfg.rope_theta, double(2 * i) / double(cfg.rotary_dim())));
    inv_freq = upload_floats(inv, "rope");
  }
  for (auto& L : layers)
    if (L.full) L.kv_index = kv_layers++;
  if (has_mtp) mtp_layer.kv_index = kv_layers++;
  CUDA_CHECK(cudaDeviceSynchronize());
  if (fp8_matmul == Fp8Matmul::W8A8 && fp8_matrices == 0)
    fail("--fp8-matmul w8a8: {} has no FP8 weights (its quantization_config names no fp8 format)", ck.dir());
}

int64_t CudaQwen35Weights::splitk_floats_for(int max_rows) const {
  int64_t floats = 0;
  auto track = [&](const DevMatrix& m) { floats = std::max(floats, cuda::splitk_scratch_floats(m, max_rows)); };
  auto track_layer = [&](const LayerWeights& L) {
    for (const auto& p : L.attn.qkv.parts) track(p.m);
    for (const auto& p : L.gdn_in.parts) track(p.m);
    for (const auto& p : L.gate_up.parts) track(p.m);
    for (const auto& p : L.moe.gate_in.parts) track(p.m);
    track(L.moe.shared_down);
    track(L.attn.o);
    track(L.gdn_out);
    track(L.down);
  };
  for (const auto& L : layers) track_layer(L);
  if (has_mtp) {
    track_layer(mtp_layer);
    track(mtp_fc);
  }
  return floats;
}

float* CudaQwen35Weights::upload_floats(const std::vector<float>& v, const char* what) {
  return cuda::upload_floats(mem, v, what);
}

// Rows of all parts, concatenated, in the kernels' layout (weight_upload.h).
DevMatrix CudaQwen35Weights::upload_matrix(const std::vector<WeightRef>& parts, const char* what, bool splittable,
                                           Use use) {
  DevMatrix m = upload_weight_parts(parts, act, mem, what, splittable, use);
  if (m.kind == WKind::FP8) {
    m.fp8_activations = fp8_matmul == Fp8Matmul::W8A8;
    ++fp8_matrices;
  }
  return m;
}

// Fuses consecutive parts that share a storage format into one matrix;
// `use` applies when they all fuse into one (SwigluGateUp needs both halves).
Linear CudaQwen35Weights::upload_linear(const std::vector<WeightRef>& parts, const char* what, Use use) {
  Linear lin;
  lin.cols = int(parts.front().cols);
  size_t i = 0;
  while (i < parts.size()) {
    size_t j = i + 1;
    while (j < parts.size() && same_quant(parts[i], parts[j])) ++j;
    const std::vector<WeightRef> group(parts.begin() + long(i), parts.begin() + long(j));
    lin.parts.push_back({upload_matrix(group, what, true, group.size() == parts.size() ? use : Use::Matmul), lin.rows});
    lin.rows += lin.parts.back().m.rows;
    i = j;
  }
  return lin;
}

LayerWeights CudaQwen35Weights::load_layer(const Qwen35Checkpoint& ck, const std::string& p, bool full) {
  const auto& c = cfg;
  const int H = c.hidden_size, hd = c.head_dim;
  const MatrixForm form = trunk_form(act);
  LayerWeights L;
  L.full = full;
  L.input_norm = upload_floats(ck.norm(p + ".input_layernorm", H, true), "norms");
  L.post_norm = upload_floats(ck.norm(p + ".post_attention_layernorm", H, true), "norms");
  if (full) {
    const std::string a = p + ".self_attn";
    L.attn.qkv = upload_linear({ck.matrix(a + ".q_proj", int64_t(c.num_attention_heads) * hd * 2, H, form),
                                ck.matrix(a + ".k_proj", int64_t(c.num_key_value_heads) * hd, H, form),
                                ck.matrix(a + ".v_proj", int64_t(c.num_key_value_heads) * hd, H, form)},
                               "attention q/k/v");
    L.attn.o = upload_matrix({ck.matrix(a + ".o_proj", H, int64_t(c.num_attention_heads) * hd, form)}, "attention o", true);
    L.attn.q_norm = upload_floats(ck.norm(a + ".q_norm", hd, true), "norms");
    L.attn.k_norm = upload_floats(ck.norm(a + ".k_norm", hd, true), "norms");
  } else {
    const std::string g = p + ".linear_attn";
    const int Hv = c.linear_num_value_heads;
    L.gdn_in = upload_linear({ck.matrix(g + ".in_proj_qkv", c.conv_dim(), H, form), ck.matrix(g + ".in_proj_z", c.value_dim(), H, form),
                              ck.matrix(g + ".in_proj_b", Hv, H, form), ck.matrix(g + ".in_proj_a", Hv, H, form)},
                             "GDN in-projections");
    L.gdn_out = upload_matrix({ck.matrix(g + ".out_proj", H, c.value_dim(), form)}, "GDN out_proj", true);
    cuda::GdnLayer t{};
    t.conv_w = upload_floats(ck.conv1d(g + ".conv1d", c.conv_dim(), c.linear_conv_kernel_dim), "GDN conv");
    t.a_log = upload_floats(ck.vector(g + ".A_log", Hv), "GDN A_log");
    t.dt_bias = upload_floats(ck.vector(g + ".dt_bias", Hv), "GDN dt_bias");
    t.norm_w = upload_floats(ck.norm(g + ".norm", c.linear_value_head_dim, false), "GDN norm");
    L.gdn_index = int(gdn.size());
    gdn.push_back(t);
  }
  if (c.moe) {
    L.is_moe = true;
    L.moe = load_moe(ck, p);
    return L;
  }
  L.gate_up = upload_linear({ck.matrix(p + ".mlp.gate_proj", c.intermediate_size, H, form),
                             ck.matrix(p + ".mlp.up_proj", c.intermediate_size, H, form)},
                            "MLP gate/up", Use::SwigluGateUp);
  L.down = upload_matrix({ck.matrix(p + ".mlp.down_proj", H, c.intermediate_size, form)}, "MLP down", true);
  return L;
}

// The router and the shared expert as dense matrices (fused where they share
// a format); the experts stacked. Experts of transformers' formats arrive
// dequantized (MatrixForm::Fp32: bf16 in the bf16 mode): the grouped kernel
// reads dense and MLX affine weights only.
MoeLayer CudaQwen35Weights::load_moe(const Qwen35Checkpoint& ck, const std::string& p) {
  const auto& c = cfg;
  const int H = c.hidden_size;
  const MatrixForm form = trunk_form(act);
  const std::string m = p + ".mlp";
  MoeLayer M;
  M.E = c.num_experts;
  M.k = c.num_experts_per_tok;
  M.I = c.moe_intermediate_size;
  M.Is = c.shared_expert_intermediate_size;
  M.gate_in = upload_linear({ck.matrix(m + ".shared_expert.gate_proj", M.Is, H, form),
                             ck.matrix(m + ".shared_expert.up_proj", M.Is, H, form), ck.matrix(m + ".gate", M.E, H, form),
                             ck.matrix(m + ".shared_expert_gate", 1, H, form)},
                            "MoE router and shared expert");
  M.shared_down = upload_matrix({ck.matrix(m + ".shared_expert.down_proj", H, M.Is, form)}, "MoE shared expert", true);
  const ExpertLayout layout = expert_layout(ck, p);
  std::vector<std::vector<WeightRef>> gate_up, down;
  for (int e = 0; e < M.E; ++e) {
    const ExpertMatrices x = expert_matrices(ck, p, layout, e, MatrixForm::Fp32);
    gate_up.push_back({x.gate, x.up});
    down.push_back({x.down});
  }
  M.gate_up = upload_experts(gate_up, act, mem, "MoE experts");
  M.down = upload_experts(down, act, mem, "MoE experts");
  return M;
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
