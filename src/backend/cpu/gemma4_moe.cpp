// The Gemma 4 MoE block on the CPU (the 26B-A4B layer; transformers 5.23's
// Gemma4TextRouter, Gemma4TextExperts and Gemma4TextDecoderLayer): beside
// the dense MLP, for the residual stream x of a row (the input of the
// layer's feed-forward half, before any norm):
//   router: r = rmsnorm_without_weight(x) * router.scale * H^-0.5
//           p = softmax(router.proj . r); the k largest p (ties: lower id),
//           renormalized to sum 1, each times per_expert_scale[e]
//   experts: y = sum over the chosen e, by rising id, of
//            w_e * down_e(gelu_tanh(gate_e z) * up_e z),  z = pre_experts_norm(x)
//   out = post_mlp_norm(dense MLP output) + post_experts_norm(y)
// and the layer goes on as a dense one: x = (x + post_ff_norm(out)) * layer_scalar.
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/gemma4_layer.h"
#include "backend/cpu/moe_router.h"
#include "io/gemma4_checkpoint.h"
#include "io/moe_experts.h"

namespace nextn::cpu {

std::shared_ptr<const Gemma4Moe> load_gemma4_moe(const Gemma4Checkpoint& ck, int index) {
  const Gemma4TextConfig& c = ck.config();
  const int H = c.hidden_size, E = c.num_experts;
  const std::string p = "layers." + std::to_string(index) + ".";
  auto W = std::make_shared<Gemma4Moe>();
  W->router = Matrix::load(ck.matrix(p + "router.proj", E, H));
  W->router_scale = ck.vector(ck.stored(p + "router.scale"), H);
  W->per_expert_scale = ck.vector(ck.stored(p + "router.per_expert_scale"), E);
  // The experts hang off the decoder layer itself (<layer>.experts.*), not off its mlp.
  const std::string layer = ck.stored("layers." + std::to_string(index));
  const ExpertLayout layout = detect_expert_layout(ck.store(), ck.dir(), layer);
  for (int e = 0; e < E; ++e) {
    const ExpertMatrices m =
        expert_matrices(ck.store(), c.quant, ck.dir(), layer, layout, e, E, c.moe_intermediate_size, H);
    W->experts.push_back({Matrix::load(m.gate), Matrix::load(m.up), Matrix::load(m.down)});
  }
  W->post_mlp_norm = ck.vector(ck.stored(p + "post_feedforward_layernorm_1.weight"), H);
  W->pre_experts_norm = ck.vector(ck.stored(p + "pre_feedforward_layernorm_2.weight"), H);
  W->post_experts_norm = ck.vector(ck.stored(p + "post_feedforward_layernorm_2.weight"), H);
  return W;
}

void gemma4_moe_mix(const Gemma4Moe& W, const Gemma4TextConfig& c, int T, const float* x, float* m, ThreadPool* pool,
                    int64_t min_chunk_work) {
  const int H = c.hidden_size, E = c.num_experts, k = c.top_k_experts;
  const float eps = c.rms_norm_eps;
  // transformers multiplies by the Python float hidden_size**-0.5, which torch rounds to fp32.
  const float root = float(std::pow(double(H), -0.5));
  const std::vector<float> ones(static_cast<size_t>(H), 1.0f);
  std::vector<float> r(size_t(T) * H), z(size_t(T) * H), y(size_t(T) * H), logits(size_t(T) * E);
  for (int t = 0; t < T; ++t) {
    const float* xt = x + size_t(t) * H;
    float* rt = &r[size_t(t) * H];
    rmsnorm(xt, ones.data(), eps, H, rt);  // the router's norm has no weight
    for (int d = 0; d < H; ++d) rt[d] = rt[d] * W.router_scale[size_t(d)] * root;  // transformers' order
    rmsnorm(xt, W.pre_experts_norm.data(), eps, H, &z[size_t(t) * H]);
  }
  matmul(*W.router, r.data(), T, logits.data(), 0, -1, pool, min_chunk_work);
  std::vector<int32_t> chosen(size_t(T) * k);  // [T][k] expert ids
  std::vector<float> weight(size_t(T) * k);    // [T][k] renormalized probabilities times per_expert_scale
  for (int t = 0; t < T; ++t) {
    route_top_k(&logits[size_t(t) * E], E, k, &chosen[size_t(t) * k], &weight[size_t(t) * k]);
    for (int j = 0; j < k; ++j) weight[size_t(t) * k + j] *= W.per_expert_scale[size_t(chosen[size_t(t) * k + j])];
  }
  routed_experts(W.experts, GateActivation::GeluTanh, T, k, chosen.data(), weight.data(), z.data(), y.data(), pool,
                 min_chunk_work);
  std::vector<float> a(static_cast<size_t>(H)), b(static_cast<size_t>(H));
  for (int t = 0; t < T; ++t) {
    float* mt = m + size_t(t) * H;
    rmsnorm(mt, W.post_mlp_norm.data(), eps, H, a.data());
    rmsnorm(&y[size_t(t) * H], W.post_experts_norm.data(), eps, H, b.data());
    for (int d = 0; d < H; ++d) mt[d] = a[size_t(d)] + b[size_t(d)];
  }
}

}  // namespace nextn::cpu
