// CudaQwen35's weight loading: checkpoint tensors uploaded to the device in the
// kernels' layout (dense, or MLX q4/q8 packed), one projection or layer at a time.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35_runtime.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/weight_upload.h"
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

// Rows of all parts, concatenated, in the kernels' layout (weight_upload.h).
DevMatrix CudaQwen35::upload_matrix(const std::vector<WeightRef>& parts, const char* what, bool splittable,
                                    Use use) {
  return upload_weight_parts(parts, act_, mem_, what, splittable, use);
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
