// The Qwen3.5 MoE block on the device (transformers' Qwen3_5MoeSparseMoeBlock,
// docs/moe.md): its weights, the row scratch a sequence's workspace holds
// for it, and the block's launches. Private to the CUDA runtime.
//
//   gate_in = xn . [shared gate ; shared up ; router ; shared_expert_gate]^T   (dense matmul)
//   top-k of softmax(router logits), renormalized, the plan     (moe_route_plan)
//   shared  = shared_down(silu(shared gate) * shared up)       (swiglu, dense matmul)
//   a       = silu(gate x) * up x per (row, expert) pair        (moe_experts_glu)
//   y       = expert down(a)                                    (moe_experts_matmul)
//   x      += sum by rising id of w * y + sigmoid(gate) * shared (moe_combine)
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe.h"
#include "io/checkpoint.h"
#include "io/config.h"

namespace nextn::cuda {

struct LayerContext;
struct MoeLayer;

// A MoE block's sizes: the routed experts (E, k, width I), and either
// Qwen3.5's shared expert (width Is > 0: gate_in holds its projections
// beside the router's) or none (Is 0: Gemma 4, whose dense MLP runs beside).
struct MoeShape {
  int H = 0, E = 0, k = 0, I = 0, Is = 0;
  int gate_ld() const { return Is > 0 ? 2 * Is + E + 1 : E; }
};
MoeShape moe_shape(const Qwen35Config& c);

// Per sequence, for calls of up to `rows` rows (the decode workspace's R; a
// prefill chunk runs in slices of R rows).
struct MoeScratch {
  MoeScratch() = default;  // none: a dense model
  MoeScratch(const MoeShape& m, Act act, int rows, DeviceMemory& mem);
  bool present() const { return rows > 0; }

  int rows = 0, gate_ld = 0;
  float* gate_in = nullptr;   // [rows][gate_ld] fp32: shared gate | shared up | router logits | shared_expert_gate
                              // (Is 0: the router logits alone)
  int32_t* chosen = nullptr;  // [rows][k] expert ids
  float* weights = nullptr;   // [rows][k] their renormalized probabilities (times any per-expert scale)
  MoePlan plan;               // moe_plan_ints(rows, k, E)
  void* shared_act = nullptr; // [rows][Is] act: the shared expert's down input (Is > 0)
  float* shared = nullptr;    // [rows][H] fp32: the shared expert's output (Is > 0)
  float* routed = nullptr;    // [rows][H] fp32: the experts' weighted sum (Is 0; Gemma 4 norms it)
  void* pair_act = nullptr;   // [rows * k][I] act: each pair's down input
  float* y = nullptr;         // [rows * k][H] fp32: each pair's expert output
  // [1] routed-expert bytes read by the grouped passes this scratch served
  // (RuntimeProbe::expert_bytes_read), added by the kernels; zeroed at allocation.
  unsigned long long* expert_bytes = nullptr;
};

// experts[e]: expert e's parts (gate then up, or down), dense or MLX affine
// q4 / q8, all experts in one format; stacked into one DevExperts
// (moe_weights.cpp). Synchronous. Throws Error naming the tensor.
DevExperts upload_experts(const std::vector<std::vector<WeightRef>>& experts, Act act, DeviceMemory& mem,
                          const char* what);

// x[t] += the MoE block of xn[t] for T rows (xn [T][ldxn] of c.act, x fp32
// [T][ldx]), in slices of the scratch's rows.
void moe_block(const LayerContext& c, const MoeLayer& M, int T, const void* xn, int ldxn, float* x, int ldx);

}  // namespace nextn::cuda
