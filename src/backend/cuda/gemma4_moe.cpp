// The CUDA Gemma 4 runtime's MoE layers (enable_moe_block, the 26B-A4B):
// loading a layer's router and experts, and the routed half of its
// feed-forward, beside the dense MLP the layer runs as any other
// (backend/cpu/gemma4_moe.cpp has the formulas, transformers 5.23's order):
//
//   r       = rmsnorm(x) (no weight) * router.scale * H^-0.5     (gemma4_router_input)
//   logits  = router.proj . r                                      (dense matmul)
//   top-k of softmax(logits), renormalized, * per_expert_scale     (moe_route_plan)
//   a       = gelu_tanh(gate z) * up z per (row, expert) pair,
//             z = pre_experts_norm(x)                              (rmsnorm, moe_experts_glu)
//   routed  = sum by rising id of w * down(a)                      (moe_experts_matmul, moe_combine)
//   y       = post_mlp_norm(y) + post_experts_norm(routed)          (gemma4_moe_merge)
//
// and the layer then adds post_ff_norm(y) to the residual as a dense one
// does. The grouped expert kernels are Qwen3.5's (moe.h): batch invariant,
// each expert's weights read once for all rows routed to it.
#ifdef NEXTN_HAVE_CUDA
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/gemma4_runtime.h"
#include "backend/cuda/moe.h"
#include "io/gemma4_checkpoint.h"
#include "io/moe_experts.h"

namespace nextn::cuda {

Gemma4DevMoe CudaGemma4Model::load_moe(const Gemma4Checkpoint& ck, int index) {
  const std::string p = "layers." + std::to_string(index) + ".";
  Gemma4DevMoe M;
  M.E = cfg.num_experts;
  M.k = cfg.top_k_experts;
  M.I = cfg.moe_intermediate_size;
  if (M.E > kMaxExperts || M.k > kMaxExpertsPerToken)
    fail("--backend cuda: {} experts, {} per token: the grouped expert kernels take at most {} and {}", M.E, M.k,
         kMaxExperts, kMaxExpertsPerToken);
  M.router = upload_matrix({ck.matrix(p + "router.proj", M.E, H)}, "MoE router", true);
  M.router_scale = upload_floats(ck.vector(ck.stored(p + "router.scale"), H), "MoE router");
  M.expert_scale = upload_floats(ck.vector(ck.stored(p + "router.per_expert_scale"), M.E), "MoE router");
  M.post_mlp_norm = upload_floats(ck.vector(ck.stored(p + "post_feedforward_layernorm_1.weight"), H), "norms");
  M.pre_experts_norm = upload_floats(ck.vector(ck.stored(p + "pre_feedforward_layernorm_2.weight"), H), "norms");
  M.post_experts_norm = upload_floats(ck.vector(ck.stored(p + "post_feedforward_layernorm_2.weight"), H), "norms");
  // The experts hang off the decoder layer itself (<layer>.experts.*), as on the CPU.
  const std::string layer = ck.stored("layers." + std::to_string(index));
  const ExpertLayout layout = detect_expert_layout(ck.store(), ck.dir(), layer);
  std::vector<std::vector<WeightRef>> gate_up, down;
  for (int e = 0; e < M.E; ++e) {
    const ExpertMatrices m = expert_matrices(ck.store(), cfg.quant, ck.dir(), layer, layout, e, M.E, M.I, H);
    gate_up.push_back({m.gate, m.up});
    down.push_back({m.down});
  }
  M.gate_up = upload_experts(gate_up, act, mem, "MoE experts");
  M.down = upload_experts(down, act, mem, "MoE experts");
  return M;
}

void CudaGemma4Model::moe_half(const Gemma4DevMoe& M, int T) {
  const MoeScratch& m = moe;
  const cudaStream_t s = stream;
  // transformers multiplies by the Python float hidden_size**-0.5, which torch rounds to fp32.
  const float root = float(std::pow(double(H), -0.5));
  gemma4_router_input(x, H, M.router_scale, root, eps, T, H, xn, act, H, s);
  matmul(M.router, xn, act, T, H, m.gate_in, m.gate_ld, false, splitk, s);
  moe_route_plan(m.gate_in, m.gate_ld, T, M.E, M.k, M.expert_scale, m.chosen, m.weights, m.plan, s);
  rmsnorm(x, Act::F32, H, M.pre_experts_norm, eps, T, H, xn, act, H, nullptr, s);
  moe_experts_glu(M.gate_up, MoeGate::GeluTanh, m.plan, T, M.k, xn, act, H, m.pair_act, M.I, s, m.expert_bytes);
  moe_experts_matmul(M.down, m.plan, T, M.k, m.pair_act, act, M.I, true, m.y, H, s, m.expert_bytes);
  moe_combine(m.y, m.chosen, m.weights, T, M.k, H, nullptr, nullptr, 0, m.routed, H, CombineInto::Fresh, s);
  gemma4_moe_merge(y, H, m.routed, H, M.post_mlp_norm, M.post_experts_norm, eps, T, H, s);
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
