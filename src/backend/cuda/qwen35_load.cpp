// CudaQwen35's weight loading: checkpoint tensors uploaded to the device in the
// kernels' layout (dense, or MLX q4/q8 packed), one projection or layer at a time.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35_runtime.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/dense_upload.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/checkpoint.h"

namespace nextn::cuda {

// ---------------------------------------------------------------------------
// loading

namespace {

bool same_quant(const WeightRef& a, const WeightRef& b) {
  return a.quantized() == b.quantized() && a.quant.bits == b.quant.bits && a.quant.group_size == b.quant.group_size &&
         a.cols == b.cols;
}

}  // namespace

float* CudaQwen35::upload_floats(const std::vector<float>& v, const char* what) {
  float* d = mem_.alloc<float>(v.size() * sizeof(float), what);
  CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

// Rows of all parts, concatenated, in the kernels' layout: dense as bf16
// (fp32 in the fp32-activation mode), MLX packed words as stored with fp32
// scales and biases.
DevMatrix CudaQwen35::upload_matrix(const std::vector<WeightRef>& parts, const char* what, bool splittable,
                                    Use use) {
  DevMatrix m;
  const WeightRef& w0 = parts.front();
  m.cols = int(w0.cols);
  for (const auto& p : parts) m.rows += int(p.rows);
  if (w0.quantized()) {
    if (w0.quant.bits != 4 && w0.quant.bits != 8)
      fail("--backend cuda: {}: {}-bit quantization is not supported (4 or 8)", w0.name, w0.quant.bits);
    m.kind = w0.quant.bits == 4 ? WKind::Q4 : WKind::Q8;
    m.group = w0.quant.group_size;
  } else {
    m.kind = act_ == Act::F32 ? WKind::F32 : WKind::BF16;
  }
  m.splits = splittable ? cuda::choose_splits(m.rows, m.cols, m.kind) : 1;
  cuda::check_matrix(m, w0.name.c_str());

  if (!w0.quantized()) {
    const size_t esz = m.kind == WKind::F32 ? 4 : 2;
    auto* dst = mem_.alloc<uint8_t>(size_t(m.rows) * m.cols * esz, what);
    m.w = dst;
    upload_dense_parts(parts, esz, dst);
    return m;
  }
  const int per_word = 32 / w0.quant.bits;
  const size_t words = size_t(m.rows) * (m.cols / per_word), groups = size_t(m.rows) * (m.cols / m.group);
  auto* dw = mem_.alloc<uint8_t>(words * 4, what);
  auto* ds = mem_.alloc<float>(groups * 4, what);
  auto* db = mem_.alloc<float>(groups * 4, what);
  m.w = dw;
  m.scales = ds;
  m.biases = db;
  std::vector<float> s, b;
  for (const auto& p : parts) {
    const size_t pw = size_t(p.rows) * (p.cols / per_word), pg = size_t(p.rows) * (p.cols / p.quant.group_size);
    CUDA_CHECK(cudaMemcpy(dw, p.weight->data, pw * 4, cudaMemcpyHostToDevice));
    s.resize(pg);
    b.resize(pg);
    for (size_t i = 0; i < pg; ++i) {
      s[i] = load_float(p.scales->dtype, p.scales->data, i);
      b[i] = load_float(p.biases->dtype, p.biases->data, i);
      // The fast q4 kernel takes (scale, bias) as bf16: only when that is exact.
      m.sb_exact = m.sb_exact && bf16_to_f32(f32_to_bf16(s[i])) == s[i] && bf16_to_f32(f32_to_bf16(b[i])) == b[i];
    }
    CUDA_CHECK(cudaMemcpy(ds, s.data(), pg * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, b.data(), pg * 4, cudaMemcpyHostToDevice));
    dw += pw * 4;
    ds += pg;
    db += pg;
  }
  const int64_t packed_bytes = use == Use::Matmul ? cuda::pack_quant_bytes(m) : 0;
  cuda::pack_quant(m, packed_bytes > 0 ? mem_.alloc<uint8_t>(size_t(packed_bytes), what) : nullptr, nullptr);
  // The bf16 mode reads a streamed matrix only through its packed copy
  // (embedding lookups included): the MLX words and fp32 scales go.
  if (m.packed != nullptr && act_ == Act::BF16) {
    mem_.release(m.w);
    mem_.release(m.scales);
    mem_.release(m.biases);
    m.w = nullptr;
    m.scales = m.biases = nullptr;
  }
  return m;
}

// Fuses consecutive parts that share a storage format into one matrix.
Linear CudaQwen35::upload_linear(const std::vector<WeightRef>& parts, const char* what) {
  Linear lin;
  lin.cols = int(parts.front().cols);
  size_t i = 0;
  while (i < parts.size()) {
    size_t j = i + 1;
    while (j < parts.size() && same_quant(parts[i], parts[j])) ++j;
    const std::vector<WeightRef> group(parts.begin() + long(i), parts.begin() + long(j));
    lin.parts.push_back({upload_matrix(group, what, true), lin.rows});
    lin.rows += lin.parts.back().m.rows;
    i = j;
  }
  return lin;
}

LayerWeights CudaQwen35::load_layer(const Qwen35Checkpoint& ck, const std::string& p, bool full) {
  const auto& c = cfg_;
  const int H = c.hidden_size, hd = c.head_dim;
  LayerWeights L;
  L.full = full;
  L.input_norm = upload_floats(ck.norm(p + ".input_layernorm", H, true), "norms");
  L.post_norm = upload_floats(ck.norm(p + ".post_attention_layernorm", H, true), "norms");
  if (full) {
    const std::string a = p + ".self_attn";
    L.attn.qkv = upload_linear({ck.matrix(a + ".q_proj", int64_t(c.num_attention_heads) * hd * 2, H),
                                ck.matrix(a + ".k_proj", int64_t(c.num_key_value_heads) * hd, H),
                                ck.matrix(a + ".v_proj", int64_t(c.num_key_value_heads) * hd, H)},
                               "attention q/k/v");
    L.attn.o = upload_matrix({ck.matrix(a + ".o_proj", H, int64_t(c.num_attention_heads) * hd)}, "attention o", true);
    L.attn.q_norm = upload_floats(ck.norm(a + ".q_norm", hd, true), "norms");
    L.attn.k_norm = upload_floats(ck.norm(a + ".k_norm", hd, true), "norms");
  } else {
    const std::string g = p + ".linear_attn";
    const int Hv = c.linear_num_value_heads;
    L.gdn_in = upload_linear({ck.matrix(g + ".in_proj_qkv", c.conv_dim(), H), ck.matrix(g + ".in_proj_z", c.value_dim(), H),
                              ck.matrix(g + ".in_proj_b", Hv, H), ck.matrix(g + ".in_proj_a", Hv, H)},
                             "GDN in-projections");
    L.gdn_out = upload_matrix({ck.matrix(g + ".out_proj", H, c.value_dim())}, "GDN out_proj", true);
    cuda::GdnLayer t{};
    t.conv_w = upload_floats(ck.conv1d(g + ".conv1d", c.conv_dim(), c.linear_conv_kernel_dim), "GDN conv");
    t.a_log = upload_floats(ck.vector(g + ".A_log", Hv), "GDN A_log");
    t.dt_bias = upload_floats(ck.vector(g + ".dt_bias", Hv), "GDN dt_bias");
    t.norm_w = upload_floats(ck.norm(g + ".norm", c.linear_value_head_dim, false), "GDN norm");
    L.gdn_index = int(gdn_host_.size());
    gdn_host_.push_back(t);
  }
  L.gate_up = upload_linear({ck.matrix(p + ".mlp.gate_proj", c.intermediate_size, H),
                             ck.matrix(p + ".mlp.up_proj", c.intermediate_size, H)},
                            "MLP gate/up");
  L.down = upload_matrix({ck.matrix(p + ".mlp.down_proj", H, c.intermediate_size)}, "MLP down", true);
  return L;
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
