// Host-callable launchers of the mixture-of-experts kernels (moe.cu), the
// Qwen3.5 MoE block's device half (docs/moe.md, "CUDA"). Conventions as in
// kernels.h: device pointers, one stream, no synchronization, capturable;
// what the routing decides (which experts, which rows) stays in device
// memory, so a launch's shape depends on the row count alone.
//
// Batch invariance: every (row, expert, output) sum is taken by the same
// lanes in the same order whatever other rows share the launch, and each
// row's experts are added in rising expert id, so a row's result is the same
// bits alone or among any other rows (speculative == greedy, group == solo).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels.h"

namespace nextn::cuda {

// Experts are routed among at most this many per layer (the plan's block
// scan holds them in shared memory), at most kMaxExpertsPerToken per token.
constexpr int kMaxExperts = 1024;
constexpr int kMaxExpertsPerToken = 32;

// One layer's E routed experts of one projection, stacked: expert e's
// [rows][cols] matrix begins e * w_stride bytes into `w` (and e * sb_stride
// groups into the scales). Kinds: F32 (the fp32 mode), BF16, and MLX
// affine Q4 / Q8 in the generic layout (kernels.h: Q4 words after
// pack_quant's in-place repack), their [rows][cols/group] scales and
// biases as bf16 pairs in one u32 (scale in the low half) where every one
// is exact in bf16, as MLX stores them, else as two fp32 arrays.
struct DevExperts {
  WKind kind = WKind::BF16;
  int E = 0, rows = 0, cols = 0, group = 0;
  const void* w = nullptr;
  const float* scales = nullptr;
  const float* biases = nullptr;
  const uint32_t* sb16 = nullptr;  // the bf16 pairs (then scales and biases are null)
  size_t w_stride = 0;   // bytes per expert
  size_t sb_stride = 0;  // groups per expert
};

// Where moe_plan writes a call's routing, for calls of up to `rows` rows of
// k experts each among E: P = rows * k (row, slot) pairs, A = min(E, P)
// experts at most active.
struct MoePlan {
  int* n_active = nullptr;  // [1]
  int* active = nullptr;    // [A] active expert ids, rising
  int* start = nullptr;     // [A + 1] active expert u's pairs: pairs[start[u], start[u+1])
  int* pairs = nullptr;     // [P] pair ids t * k + j, grouped by expert (any order within one)
};
inline int moe_active_bound(int rows, int k, int E) { return rows * k < E ? rows * k : E; }
// Ints the four arrays take (a caller allocates one buffer and carves it with moe_plan_at).
size_t moe_plan_ints(int rows, int k, int E);
MoePlan moe_plan_at(int* base, int rows, int k, int E);

// Router (transformers' Qwen3_5MoeTopKRouter, Gemma4TextRouter's top-k) and
// plan in one launch: per row t, softmax in fp32 over logits[t][0, E)
// ([T][ld]); the k largest probabilities (ties to the lower expert id) into
// chosen[t][j] (by falling probability) and weights[t][j] = p / (sum of the
// k, added in that order), times expert_scale[e] where given (Gemma 4's
// per_expert_scale [E]); then the plan of the T * k pairs (above).
void moe_route_plan(const float* logits, int ld, int T, int E, int k, const float* expert_scale, int32_t* chosen,
                    float* weights, const MoePlan& plan, cudaStream_t s);

// y[p][n] = sum_c W_e[n][c] * x[in(p)][c] for every pair p = t * k + j
// routed to an active expert e (n < W.rows): one launch for every expert,
// each expert's weights read once for all its rows. in(p) = p / k (the
// rows' input, x_per_pair false) or p (x holds one row per pair). x is
// [..][ldx] of `act`; y is fp32 [T * k][ldy]. bytes_read (may be null): +
// the weight and scale bytes the launch reads, an expert's once per pass of
// kRowsPerPass (moe.cu) of its pairs, added by the kernel.
void moe_experts_matmul(const DevExperts& W, const MoePlan& plan, int T, int k, const void* x, Act act, int ldx,
                        bool x_per_pair, float* y, int ldy, cudaStream_t s, unsigned long long* bytes_read = nullptr);

// The gate activation of a gated expert: Qwen3.5's SwiGLU, Gemma 4's GeGLU
// (gelu_pytorch_tanh).
enum class MoeGate { Silu, GeluTanh };

// The same over a gate_up stack (W.rows = 2I: gate rows, then up), the GLU
// in the epilogue: out[p][f] = act(gate_f) * up_f, f < I, in `act`'s type
// ([T * k][ldo]); x holds the rows' input (in(p) = p / k). The same bits as
// moe_experts_matmul followed by swiglu() (or gemma4_geglu()).
void moe_experts_glu(const DevExperts& W, MoeGate gate, const MoePlan& plan, int T, int k, const void* x, Act act,
                     int ldx, void* out, int ldo, cudaStream_t s, unsigned long long* bytes_read = nullptr);

// Where the combined rows go: added to a residual stream (Qwen3.5), or
// stored (Gemma 4 norms the experts' sum before it joins the stream).
enum class CombineInto { Residual, Fresh };

// r[t][h] = (sum over row t's experts by rising id of weights[t][j] *
// y[t * k + j][h]) + sigmoid(gate[t * gate_ld]) * shared[t][h], h < H
// (transformers' order: the routed sum into zeros, then the gated shared
// expert; no shared term where shared is null); x[t][h] += r (Residual) or
// x[t][h] = r (Fresh). y is [T * k][H], shared [T][H], x [T][ldx], all fp32.
void moe_combine(const float* y, const int32_t* chosen, const float* weights, int T, int k, int H,
                 const float* shared, const float* gate, int gate_ld, float* x, int ldx, CombineInto into,
                 cudaStream_t s);

}  // namespace nextn::cuda
