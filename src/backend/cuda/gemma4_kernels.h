// Host-callable launchers for the kernels only Gemma 4 needs (gemma4_kernels.cu);
// the runtime (gemma4.cpp) uses them beside the shared ones of kernels.h
// (matmuls, rmsnorm, embedding, argmax and walk steps).
//
// Conventions as kernels.h: device pointers, launches on the given stream,
// nothing synchronizes. Every kernel computes a row (a token) from that
// row's inputs alone, in a fixed order: a T-row launch gives each row the
// bits a one-row launch would, whichever sequences the other rows belong to.
#pragma once
#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"
#include "model/kv_pool.h"

namespace nextn::cuda {

// One attention layer's shapes. head_dim <= kGemma4MaxHeadDim (a full layer
// can have global_head_dim 512).
constexpr int kGemma4MaxHeadDim = 512;
struct Gemma4AttnShape {
  int Hq, Hkv, hd;
  float eps;
  bool k_eq_v;  // no v_proj: the values are the raw k projection
};

// One layer's keys and values in a sequence's KV blocks (model/kv_pool.h):
// position j at slot j % slots (full layers: slots = the capacity, no wrap;
// sliding layers: a ring), slot s in block s / kKvBlockTokens of the table
// of this layer's kind (the full-attention layers' or the sliding layers');
// a block holds, per layer of its kind in order, keys fp32
// [kKvBlockTokens][Hkv*hd] at k_at floats from its start, then values at v_at.
struct Gemma4LayerCache {
  float* const* blocks = nullptr;  // device: the sequence's block table for this layer's kind
  size_t k_at = 0, v_at = 0;
  int slots = 0;
#ifdef __CUDACC__
  // The key (at = k_at) or value (at = v_at) row of position j.
  __device__ float* row(size_t at, int j, size_t kv_row) const {
    const int s = j % slots;
    return blocks[s / kKvBlockTokens] + at + size_t(s % kKvBlockTokens) * kv_row;
  }
#endif
};
// A row of a forward pass: its sequence's caches and its position. The rows
// of a pass may belong to several sequences (the Gemma 4 group); a
// sequence's rows sit in position order.
struct Gemma4Row {
  const Gemma4LayerCache* caches = nullptr;  // device [layers]
  int pos = 0;
};

// Per row t (rows[t]: position p, caches c = rows[t].caches[layer]) of proj
// fp32 [T][ld] = q (Hq*hd) | k (Hkv*hd) | v (Hkv*hd, absent with k_eq_v):
//   q[t][h]             = rope(rmsnorm(q_h) * q_norm)   -> q fp32 [T][Hq*hd]
//   c's key row of p     = rope(rmsnorm(k_h) * k_norm)
//   c's value row of p   = rmsnorm(v_h) (no weight)
// RoPE rotates the pairs (i, i + hd/2) by angle inv_freq[i] * position;
// inv_freq [hd/2] holds 0 for the pairs a proportional layer leaves alone.
void gemma4_attn_prepare(const Gemma4AttnShape& a, const float* proj, int ld, int T, const float* q_norm,
                         const float* k_norm, const float* inv_freq, const Gemma4Row* rows, int layer, float* q,
                         cudaStream_t s);

// The q half of gemma4_attn_prepare only (the assistant's layers read the
// target's K/V): q[t][h] = rope(rmsnorm(q_h) * q_norm) at position rows[t].pos.
void gemma4_query_prepare(const Gemma4AttnShape& a, const float* proj, int ld, int T, const float* q_norm,
                          const float* inv_freq, const Gemma4Row* rows, float* q, cudaStream_t s);

// Query t (position p = rows[t].pos) attends, with scale 1.0, to the keys of
// positions max(0, p - window + 1) .. p held in its sequence's ring caches
// of `layer`; query head h reads KV head h / (Hq / Hkv). Output [T][Hq*hd]
// of type `act`. Keys are visited in position order in tiles of 32 (online
// softmax), the same for every T.
void gemma4_attention(const Gemma4AttnShape& a, const float* q, const Gemma4Row* rows, int layer, int T, int window,
                      void* out, Act act, cudaStream_t s);

// out[t][i] = gelu_tanh(gu[t][i]) * gu[t][I + i], to type `act` ([T][ldo]).
void gemma4_geglu(const float* gu, int ld, int I, int T, void* out, Act act, int ldo, cudaStream_t s);

// The sandwich norm into the residual: x[t] = (x[t] + rmsnorm(y[t]) * gamma) * scale,
// y fp32 [T][ldy], x fp32 [T][ldx], rows of n.
void gemma4_norm_residual(const float* y, int ldy, const float* gamma, float eps, int T, int n, float scale, float* x,
                          int ldx, cudaStream_t s);

// The MoE router's input (Gemma4TextRouter): out[t][i] = rmsnorm(x[t])[i]
// (no weight) * scale[i] * root, x fp32 [T][ldx], out `act` [T][ldo], rows of n.
void gemma4_router_input(const float* x, int ldx, const float* scale, float root, float eps, int T, int n, void* out,
                         Act act, int ldo, cudaStream_t s);

// The MoE layer's two feed-forward halves joined, in place:
// y[t] = rmsnorm(y[t]) * g_mlp + rmsnorm(routed[t]) * g_experts (the dense
// MLP's output and the experts' sum, each under its post-norm), fp32, rows of n.
void gemma4_moe_merge(float* y, int ldy, const float* routed, int ldr, const float* g_mlp, const float* g_experts,
                      float eps, int T, int n, cudaStream_t s);

// ---- the assistant drafter (gemma4_assistant_kernels.cu) ----
// out (act) [rows][2n] = embedding (fp32 [rows][n]) | hidden (hidden_act
// [rows][n]): the pre_projection's input rows.
void gemma4_assistant_input(const float* embedding, const void* hidden, Act hidden_act, int rows, int n, void* out,
                            Act act, cudaStream_t s);
// The tokens of the top-k of C centroids (by logit, highest first, ties by
// centroid index): candidates [k * per] = ordering rows of those centroids.
void gemma4_pick_candidates(const float* centroid_logits, int C, int k, int per, const int32_t* ordering,
                            int32_t* candidates, cudaStream_t s);
// scores[i] = rows[i] (fp32 [n][H]) . d (act [H]), fp32.
void gemma4_score_candidates(const float* rows, int n, int H, const void* d, Act act, float* scores, cudaStream_t s);
// *out = the candidate of the highest score, lowest token id among equal scores.
void gemma4_best_candidate(const float* scores, const int32_t* candidates, int n, int32_t* out, cudaStream_t s);
// logits [V] = -inf but for the candidates: their scores, tanh(s / cap) * cap when cap > 0.
void gemma4_candidate_logits(const float* scores, const int32_t* candidates, int n, float cap, float* logits, int V,
                             cudaStream_t s);

// x[i] *= scale for i < n (the embedding scale).
void scale_floats(float* x, int64_t n, float scale, cudaStream_t s);

// x[i] = tanh(x[i] / cap) * cap for i < n (the final logit softcap).
void softcap_floats(float* x, int64_t n, float cap, cudaStream_t s);

}  // namespace nextn::cuda
