// The CUDA Gemma 4 model: loading and the forward pass over rows of one or
// several sequences. The sequences (their caches, rollback, the Gemma4Target
// view) are in gemma4_sequence.cpp, the LM-head entry points in
// gemma4_head.cpp, the group in gemma4_group.cpp, the Gemma-only kernels in
// gemma4_kernels.cu.
//
// Same semantics as the CPU runtime (backend/cpu/gemma4.cpp), step by step:
//   x = embed(token) * embed_scale
//   per layer: h = x + post_attn_norm(o(attn(input_norm(x))))
//              x = (h + post_ff_norm(down(gelu_tanh(gate(n)) * up(n)))) * layer_scalar,  n = pre_ff_norm(h)
//              (a MoE layer: the MLP's output normed and joined by its routed experts', gemma4_moe.cpp)
//   hidden = norm(x)
// A pass's launches are captured once per row count and replayed (the
// row table and the tokens are device inputs: nothing a launch takes by
// value changes between passes of one row count); --graphs off runs them
// directly, with the same bits.
// KV caches are fp32, in blocks of 64 positions from the model's two pools
// (full-attention layers, sliding rings) taken as a sequence grows
// (gemma4_kernels.h, Gemma4LayerCache): sliding layers hold a ring of
// sliding_window + 1 + 64 slots, full layers every position; a pass holds at most 64 rows, so it only
// overwrites positions no query or rollback can reach (rollback undoes at
// most 64 rows of one forward, as on the CPU). Every kernel is
// batch-invariant (the matmul family by construction, the Gemma kernels one
// row per block, each row reading its own sequence's caches through the
// pass's row table), so a row's bits do not depend on the other rows of its
// pass, its own sequence's or others': speculative output equals greedy, and
// a sequence forwarded beside others equals it forwarded alone.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/gemma4.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/gemma4_assistant.h"
#include "backend/cuda/gemma4_runtime.h"
#include "backend/cuda/qwen35.h"
#include "backend/cuda/weight_upload.h"
#include "core/dtype.h"
#include "io/gemma4_checkpoint.h"

namespace nextn {
namespace cuda {

float* CudaGemma4Model::upload_floats(const std::vector<float>& v, const char* what) {
  return cuda::upload_floats(mem, v, what);
}

// Parts concatenated along the rows in the kernels' layout (weight_upload.h):
// dense as fp32 in the fp32 mode, bf16 otherwise; MLX Q4/Q8 packed.
DevMatrix CudaGemma4Model::upload_matrix(const std::vector<WeightRef>& parts, const char* what, bool splittable,
                                         WeightUse use) {
  return upload_weight_parts(parts, act, mem, what, splittable, use);
}

Gemma4DevLayer CudaGemma4Model::load_layer(const Gemma4Checkpoint& ck, int index) {
  const std::string p = "layers." + std::to_string(index) + ".";
  Gemma4DevLayer L;
  L.spec = cfg.layers[size_t(index)];
  const int hd = L.spec.head_dim, kvh = L.spec.kv_heads;
  L.input_norm = upload_floats(ck.vector(ck.stored(p + "input_layernorm.weight"), H), "norms");
  L.post_attn_norm = upload_floats(ck.vector(ck.stored(p + "post_attention_layernorm.weight"), H), "norms");
  L.pre_ff_norm = upload_floats(ck.vector(ck.stored(p + "pre_feedforward_layernorm.weight"), H), "norms");
  L.post_ff_norm = upload_floats(ck.vector(ck.stored(p + "post_feedforward_layernorm.weight"), H), "norms");
  L.q_norm = upload_floats(ck.vector(ck.stored(p + "self_attn.q_norm.weight"), hd), "norms");
  L.k_norm = upload_floats(ck.vector(ck.stored(p + "self_attn.k_norm.weight"), hd), "norms");
  L.layer_scalar = ck.vector(ck.stored(p + "layer_scalar"), 1)[0];
  std::vector<WeightRef> qkv = {ck.matrix(p + "self_attn.q_proj", int64_t(Hq) * hd, H),
                                ck.matrix(p + "self_attn.k_proj", int64_t(kvh) * hd, H)};
  if (!L.spec.k_eq_v) qkv.push_back(ck.matrix(p + "self_attn.v_proj", int64_t(kvh) * hd, H));
  L.qkv = upload_matrix(qkv, "attention q/k/v", true);
  L.o = upload_matrix({ck.matrix(p + "self_attn.o_proj", H, int64_t(Hq) * hd)}, "attention o", true);
  L.gate_up =
      upload_matrix({ck.matrix(p + "mlp.gate_proj", I, H), ck.matrix(p + "mlp.up_proj", I, H)}, "MLP gate/up", true);
  L.down = upload_matrix({ck.matrix(p + "mlp.down_proj", H, I)}, "MLP down", true);
  if (cfg.moe) L.moe = load_moe(ck, index);
  // As cpu::gemma4_rope_table: fp32(1 / theta^(2i/hd)) for the rotating pairs.
  std::vector<float> inv(size_t(hd / 2), 0.0f);
  for (int i = 0; i < L.spec.rope_pairs && i < hd / 2; ++i)
    inv[size_t(i)] = float(1.0 / std::pow(L.spec.rope_theta, double(2 * i) / double(hd)));
  L.inv_freq = upload_floats(inv, "rope");
  return L;
}

CudaGemma4Model::CudaGemma4Model(const Gemma4Checkpoint& ck, const RuntimeOptions& options)
    : cfg(ck.config()), act(options.act == Activations::Fp32 ? Act::F32 : Act::BF16) {
  (void)cuda_device_summary();  // one error line when there is no usable device
  H = cfg.hidden_size;
  V = cfg.vocab_size;
  I = cfg.intermediate_size;
  Hq = cfg.num_attention_heads;
  eps = cfg.rms_norm_eps;
  info = {V, H, cfg.max_position_embeddings, 0, cfg.eos_token_ids};
  int max_hd = 0, max_qkv = 0;
  for (const auto& s : cfg.layers) {
    if (s.head_dim > kGemma4MaxHeadDim || s.head_dim % 2 != 0)
      fail("--backend cuda: unsupported shape: head_dim {} (an even number up to {})", s.head_dim, kGemma4MaxHeadDim);
    if (s.kv_heads < 1 || Hq % s.kv_heads != 0)
      fail("--backend cuda: unsupported shape: {} query heads over {} KV heads", Hq, s.kv_heads);
    max_hd = std::max(max_hd, s.head_dim);
    max_qkv = std::max(max_qkv, (Hq + 2 * s.kv_heads) * s.head_dim);
  }
  cuda::init_kernels();
  stream = make_stream();
  graphs = std::make_unique<GraphCache>(options, stream, prof);
  const size_t as = size_t(act_size(act));

  // weights
  // Unsplit (every verify arm projects the head with the same kernel and the
  // same bits); a quantized matrix is packed for its split factor, so the
  // tied embedding is uploaded unsplit too.
  const WeightRef emb = ck.matrix("embed_tokens", V, H), lm = ck.lm_head();
  const bool tied = lm.name == emb.name;
  embed = upload_matrix({emb}, "embedding", false, tied ? WeightUse::Matmul : WeightUse::RowLookupOnly);
  head = tied ? embed : upload_matrix({lm}, "LM head", false);
  embed_scale = ck.embed_scale();
  final_norm = upload_floats(ck.vector(ck.stored("norm.weight"), H), "norms");
  for (int i = 0; i < cfg.num_hidden_layers; ++i) layers.push_back(load_layer(ck, i));
  const Gemma4KvLayout layout = gemma4_kv_layout(cfg);
  kv_at = layout.k_at;
  // Arenas of 4 blocks: the 31B's sliding block is 100 MiB (50 layers of 64 positions).
  if (layout.full_floats > 0) full_pool = std::make_shared<KvBlockPool>(layout.full_floats * 4, 4, device_allocator());
  if (layout.ring_floats > 0) ring_pool = std::make_shared<KvBlockPool>(layout.ring_floats * 4, 4, device_allocator());

  // workspace
  const int R = kMaxRows;
  proj_ld = std::max(max_qkv, 2 * I);
  act_ld = std::max(I, Hq * max_hd);
  d_rows = mem.alloc<Gemma4Row>(size_t(R) * sizeof(Gemma4Row), "row table");
  d_tokens = mem.alloc<int32_t>(size_t(R) * 4, "tokens");
  x = mem.alloc<float>(size_t(R) * H * 4, "activations");
  xn = mem.alloc(size_t(R) * H * as, "activations");
  proj = mem.alloc<float>(size_t(R) * proj_ld * 4, "activations");
  q = mem.alloc<float>(size_t(R) * Hq * max_hd * 4, "activations");
  act_buf = mem.alloc(size_t(R) * act_ld * as, "activations");
  y = mem.alloc<float>(size_t(R) * H * 4, "activations");
  hidden = mem.alloc(size_t(R) * H * as, "hidden rows");
  if (cfg.moe) moe = MoeScratch({H, cfg.num_experts, cfg.top_k_experts, cfg.moe_intermediate_size, 0}, act, R, mem);
  int64_t splitk_floats = 0;
  for (const auto& L : layers)
    for (const DevMatrix* m : {&L.qkv, &L.o, &L.gate_up, &L.down, &L.moe.router})
      splitk_floats = std::max(splitk_floats, splitk_scratch_floats(*m));
  splitk = mem.alloc<float>(size_t(splitk_floats) * 4, "split-K partials");
  CUDA_CHECK(cudaMemset(splitk, 0, size_t(splitk_floats) * 4));  // counters start at zero (kernels.h)
  head_in = mem.alloc(size_t(R) * H * as, "head inputs");
  logits = mem.alloc<float>(size_t(R) * V * 4, "logits");
  pairs = mem.alloc(size_t(argmax_pairs_bytes(head)), "argmax pairs");
  argmax_scratch = mem.alloc(size_t(argmax_scratch_bytes(V)) * R, "argmax");
  d_head_rows = mem.alloc<int>(2 * sizeof(int), "row range");
  d_drafts = mem.alloc<int32_t>(size_t(R) * 4, "drafts");
  d_out = mem.alloc<int32_t>(size_t(R + 2) * 4, "tokens");
  d_walk = mem.alloc<int>(2 * sizeof(int), "walk counters");
  CUDA_CHECK(cudaMemset(d_walk, 0, 2 * sizeof(int)));
  d_embed_token = mem.alloc<int32_t>(sizeof(int32_t), "embedding token");
  d_embed_row = mem.alloc<float>(size_t(H) * 4, "embedding row");
  h_counts = make_pinned<HeadCounters>(2);
  CUDA_CHECK(cudaDeviceSynchronize());
}

// The members release themselves; work still queued must finish first.
CudaGemma4Model::~CudaGemma4Model() {
  if (stream) (void)cudaStreamSynchronize(stream);
}

int CudaGemma4Model::slots(const Gemma4LayerSpec& spec, int max_tokens) const {
  return spec.sliding ? gemma4_ring_slots(cfg, max_tokens, kMaxRows) : max_tokens;
}

std::vector<KvPoolUse> CudaGemma4Model::kv_pools() const {
  return gemma4_kv_pools(cfg, kMaxRows, full_pool.get(), ring_pool.get());
}

std::shared_ptr<CudaAssistant> CudaGemma4Model::assistant(const Gemma4Checkpoint& ck) {
  for (const auto& a : assistants_)
    if (a->dir == ck.dir()) return a;
  if (act == Act::BF16) {  // the tensor-core kernels take widths that are multiples of 32
    const Gemma4TextConfig& c = ck.assistant_config().text;
    bool fits = c.hidden_size % 32 == 0 && c.intermediate_size % 32 == 0;
    for (const auto& s : c.layers) fits = fits && (c.num_attention_heads * s.head_dim) % 32 == 0;
    if (!fits) return nullptr;
  }
  assistants_.push_back(std::make_shared<CudaAssistant>(ck, *this));
  return assistants_.back();
}

void CudaGemma4Model::fetch(const void* src, size_t bytes, void* dst) const {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

// ---------------------------------------------------------------------------
// the forward

void CudaGemma4Model::decoder_layer(const Gemma4DevLayer& L, int layer, int T) {
  const int hd = L.spec.head_dim, qd = Hq * hd;
  const Gemma4AttnShape a{Hq, L.spec.kv_heads, hd, eps, L.spec.k_eq_v};
  const int window = L.spec.sliding ? cfg.sliding_window : 0;
  cudaStream_t s = stream;
  rmsnorm(x, Act::F32, H, L.input_norm, eps, T, H, xn, act, H, nullptr, s);
  matmul(L.qkv, xn, act, T, H, proj, proj_ld, false, splitk, s);
  gemma4_attn_prepare(a, proj, proj_ld, T, L.q_norm, L.k_norm, L.inv_freq, d_rows, layer, q, s);
  gemma4_attention(a, q, d_rows, layer, T, window, act_buf, act, s);
  matmul(L.o, act_buf, act, T, qd, y, H, false, splitk, s);
  gemma4_norm_residual(y, H, L.post_attn_norm, eps, T, H, 1.0f, x, H, s);
  rmsnorm(x, Act::F32, H, L.pre_ff_norm, eps, T, H, xn, act, H, nullptr, s);
  matmul(L.gate_up, xn, act, T, H, proj, proj_ld, false, splitk, s);
  gemma4_geglu(proj, proj_ld, I, T, act_buf, act, I, s);
  matmul(L.down, act_buf, act, T, I, y, H, false, splitk, s);
  if (L.moe.E > 0) moe_half(L.moe, T);
  gemma4_norm_residual(y, H, L.post_ff_norm, eps, T, H, L.layer_scalar, x, H, s);
}

void CudaGemma4Model::forward_rows(int T) {
  embed_rows(embed, d_tokens, T, x, H, stream);
  scale_floats(x, int64_t(T) * H, embed_scale, stream);
  for (size_t i = 0; i < layers.size(); ++i) decoder_layer(layers[i], int(i), T);
  rmsnorm(x, Act::F32, H, final_norm, eps, T, H, hidden, act, H, nullptr, stream);
}

void CudaGemma4Model::forward_pass(std::span<const Gemma4Piece> pieces) {
  std::vector<int32_t> tokens;
  h_rows_.clear();
  for (const Gemma4Piece& p : pieces) {
    for (size_t t = 0; t < p.tokens.size(); ++t) h_rows_.push_back({p.seq->d_caches_, p.pos + int(t)});
    tokens.insert(tokens.end(), p.tokens.begin(), p.tokens.end());
  }
  const int T = int(tokens.size());
  if (T < 1 || T > kMaxRows) fail("internal: a Gemma 4 pass of {} rows (1 to {})", T, kMaxRows);
  // From pageable memory: the calls return once the host copies are staged.
  CUDA_CHECK(cudaMemcpyAsync(d_tokens, tokens.data(), size_t(T) * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d_rows, h_rows_.data(), size_t(T) * sizeof(Gemma4Row), cudaMemcpyHostToDevice, stream));
  graphs->replay(GraphKind::Forward, T, 0, [&] { forward_rows(T); });
  const size_t row_bytes = size_t(H) * size_t(act_size(act));
  size_t row = 0;
  for (const Gemma4Piece& p : pieces) {  // each piece's rows into its sequence's hidden rows
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(p.seq->hidden_) + size_t(p.hidden_row) * row_bytes,
                               static_cast<const char*>(hidden) + row * row_bytes, p.tokens.size() * row_bytes,
                               cudaMemcpyDeviceToDevice, stream));
    row += p.tokens.size();
  }
}

}  // namespace cuda
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
