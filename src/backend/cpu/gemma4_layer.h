// One Gemma 4 decoder layer's weights and the parts of its forward shared by
// the target (backend/cpu/gemma4.cpp) and the assistant drafter
// (backend/cpu/gemma4_assistant.cpp): the layer load, the RoPE table of a
// layer type, and the sandwich after attention (with a MoE target's routed
// experts beside the dense MLP: gemma4_moe.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/routed_experts.h"
#include "io/gemma4_config.h"

namespace nextn {
class Gemma4Checkpoint;
class ThreadPool;
}  // namespace nextn

namespace nextn::cpu {

// A MoE layer's routed block (transformers' Gemma4TextRouter and
// Gemma4TextExperts with the decoder layer's three extra norms).
struct Gemma4Moe {
  std::shared_ptr<Matrix> router;       // router.proj [E, H]
  std::vector<float> router_scale;      // router.scale [H]
  std::vector<float> per_expert_scale;  // router.per_expert_scale [E]
  std::vector<ExpertMlp> experts;       // [E], by expert id
  std::vector<float> post_mlp_norm;     // post_feedforward_layernorm_1 [H]: the dense MLP's output
  std::vector<float> pre_experts_norm;  // pre_feedforward_layernorm_2 [H]: the experts' input
  std::vector<float> post_experts_norm; // post_feedforward_layernorm_2 [H]: the experts' sum
};

struct Gemma4Layer {
  Gemma4LayerSpec spec;
  std::vector<float> input_norm, post_attn_norm, pre_ff_norm, post_ff_norm;  // [H]
  std::vector<float> q_norm, k_norm;                                         // [head_dim] (k_norm empty: no K/V)
  std::shared_ptr<Matrix> q, k, v,
      o;  // q [Hq*hd, H], k/v [kv*hd, H] (v null with K = V; both null: shared K/V), o [H, Hq*hd]
  std::shared_ptr<Matrix> gate, up, down;  // gate/up [I, H], down [H, I]
  float layer_scalar = 1.0f;
  std::shared_ptr<const Gemma4Moe> moe;  // enable_moe_block; null in a dense model
};

// Layer `index` of the checkpoint's text model; `with_kv`: the layer has its
// own k/v projections (a target), else it reads shared K/V (an assistant).
Gemma4Layer load_gemma4_layer(const Gemma4Checkpoint& ck, int index, bool with_kv);

// cos/sin for one position: head_dim/2 pairs, the first rope_pairs rotating
// with theta^(-2i/head_dim), the rest the identity (proportional RoPE).
void gemma4_rope_table(const Gemma4LayerSpec& s, int64_t pos, float* cos, float* sin);

// Layer `index`'s MoE block (the config has enable_moe_block). Throws Error
// naming a missing or misshapen tensor.
std::shared_ptr<const Gemma4Moe> load_gemma4_moe(const Gemma4Checkpoint& ck, int index);

// A MoE layer's feed-forward output for T rows: the dense MLP's output m
// [T][H] is replaced by post_mlp_norm(m) + post_experts_norm(experts(
// pre_experts_norm(x))), the experts chosen by the router from the residual
// stream x [T][H] (the layer's input to its feed-forward half).
void gemma4_moe_mix(const Gemma4Moe& W, const Gemma4TextConfig& c, int T, const float* x, float* m, ThreadPool* pool,
                    int64_t min_chunk_work);

// After attention, for T rows x [T][H] and the attention output [T][H]:
//   x += post_attn_norm(attn)
//   x  = (x + post_ff_norm(f)) * layer_scalar,  f = down(gelu_tanh(gate(n)) * up(n)),  n = pre_ff_norm(x)
// (a MoE layer: f = gemma4_moe_mix of it)
void gemma4_layer_tail(const Gemma4Layer& L, const Gemma4TextConfig& c, int T, const float* attn, float* x,
                       ThreadPool* pool, int64_t min_chunk_work);

// One query row against cached keys: softmax(q . k_j) (scale 1.0) weighted
// values, for keys j in [first, last]; key(j) / value(j) point at head kh's
// [head_dim] vectors. Accumulates in key order.
template <class KeyAt, class ValueAt>
void gemma4_attend(const float* q, int hd, int first, int last, KeyAt key, ValueAt value, float* scores, float* out) {
  float mx = -INFINITY;
  for (int j = first; j <= last; ++j) {
    scores[j - first] = dot(q, key(j), hd);
    mx = std::max(mx, scores[j - first]);
  }
  float sum = 0.0f;
  for (int j = first; j <= last; ++j) {
    scores[j - first] = std::exp(scores[j - first] - mx);
    sum += scores[j - first];
  }
  for (int d = 0; d < hd; ++d) out[d] = 0.0f;
  for (int j = first; j <= last; ++j) {
    const float w = scores[j - first] / sum;
    const float* vj = value(j);
    for (int d = 0; d < hd; ++d) out[d] += w * vj[d];
  }
}

}  // namespace nextn::cpu
