// The Qwen3.5 MoE block's launches and scratch (moe_layer.h).
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/moe_layer.h"

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/layer.h"
#include "backend/cuda/qwen35_runtime.h"

namespace nextn::cuda {

MoeShape moe_shape(const Qwen35Config& c) {
  return {c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size,
          c.shared_expert_intermediate_size};
}

MoeScratch::MoeScratch(const MoeShape& m, Act act, int R, DeviceMemory& mem) : rows(R), gate_ld(m.gate_ld()) {
  const size_t as = size_t(act_size(act)), H = size_t(m.H), I = size_t(m.I), Is = size_t(m.Is);
  const size_t P = size_t(R) * size_t(m.k);
  gate_in = mem.alloc<float>(size_t(R) * size_t(gate_ld) * 4, "MoE router");
  chosen = mem.alloc<int32_t>(P * 4, "MoE routing");
  weights = mem.alloc<float>(P * 4, "MoE routing");
  plan = moe_plan_at(mem.alloc<int>(moe_plan_ints(R, m.k, m.E) * 4, "MoE routing"), R, m.k, m.E);
  if (Is > 0) {
    shared_act = mem.alloc(size_t(R) * Is * as, "MoE shared expert");
    shared = mem.alloc<float>(size_t(R) * H * 4, "MoE shared expert");
  } else {
    routed = mem.alloc<float>(size_t(R) * H * 4, "MoE expert rows");
  }
  pair_act = mem.alloc(P * I * as, "MoE expert rows");
  y = mem.alloc<float>(P * H * 4, "MoE expert rows");
  expert_bytes = mem.alloc<unsigned long long>(8, "MoE counters");
  CUDA_CHECK(cudaMemset(expert_bytes, 0, 8));
}

void moe_block(const LayerContext& c, const MoeLayer& M, int T, const void* xn, int ldxn, float* x, int ldx) {
  const MoeScratch& s = *c.moe;
  const int H = c.H, E = M.E, k = M.k, I = M.I, Is = M.Is;
  const size_t as = size_t(act_size(c.act));
  const cudaStream_t st = c.stream;
  for (int t0 = 0; t0 < T; t0 += s.rows) {
    const int n = std::min(s.rows, T - t0);
    const void* xr = static_cast<const char*>(xn) + size_t(t0) * size_t(ldxn) * as;
    c.mark("moe.gate_in");
    for (const auto& p : M.gate_in.parts)
      cuda::matmul(p.m, xr, c.act, n, ldxn, s.gate_in + p.offset, s.gate_ld, false, c.splitk, st);
    c.mark("moe.route");
    cuda::moe_route_plan(s.gate_in + 2 * Is, s.gate_ld, n, E, k, nullptr, s.chosen, s.weights, s.plan, st);
    c.mark("moe.shared");
    cuda::swiglu(s.gate_in, s.gate_ld, Is, n, s.shared_act, c.act, Is, st);
    cuda::matmul(M.shared_down, s.shared_act, c.act, n, Is, s.shared, H, false, c.splitk, st);
    c.mark("moe.experts");
    cuda::moe_experts_glu(M.gate_up, MoeGate::Silu, s.plan, n, k, xr, c.act, ldxn, s.pair_act, I, st,
                          s.expert_bytes);
    cuda::moe_experts_matmul(M.down, s.plan, n, k, s.pair_act, c.act, I, true, s.y, H, st, s.expert_bytes);
    c.mark("moe.combine");
    cuda::moe_combine(s.y, s.chosen, s.weights, n, k, H, s.shared, s.gate_in + 2 * Is + E, s.gate_ld,
                      x + size_t(t0) * size_t(ldx), ldx, CombineInto::Residual, st);
  }
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
