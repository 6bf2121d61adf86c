// The routed experts' weighted sum shared by the CPU MoE blocks (Qwen3.5:
// qwen35_moe.cpp; Gemma 4: gemma4_moe.cpp), as transformers' experts loop
// computes it:
//   out[t] = sum over the k experts e chosen for row t, by rising id, of
//            w[t][e] * down_e(act(gate_e x[t]) * up_e x[t])
// Each expert runs once over the rows routed to it (every product element is
// one gemm.h sum, whatever rows share the call) and each row's sum is taken
// in rising expert id, so a row's output is the same bits alone or among any
// other rows (speculative == greedy, batched == solo).
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "backend/cpu/ops.h"

namespace nextn::cpu {

struct ExpertMlp {
  std::shared_ptr<Matrix> gate, up, down;  // [I, H], [I, H], [H, I]
};

enum class GateActivation {
  Silu,      // Qwen3.5 (SwiGLU)
  GeluTanh,  // Gemma 4 (GeGLU with gelu_pytorch_tanh)
};

// x [N][H] -> out [N][H] (overwritten). chosen / weights [N][k]: row t's
// expert ids and their weights (route_top_k's order; any order works, the
// sum runs by id).
void routed_experts(std::span<const ExpertMlp> experts, GateActivation act, int N, int k, const int32_t* chosen,
                    const float* weights, const float* x, float* out, ThreadPool* pool, int64_t min_chunk_work);

}  // namespace nextn::cpu
