// One Gemma 4 decoder layer's weights and the parts of its forward shared by
// the target (backend/cpu/gemma4.cpp) and the assistant drafter
// (backend/cpu/gemma4_assistant.cpp): the layer load, the RoPE table of a
// layer type, and the sandwich after attention.
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backend/cpu/ops.h"
#include "io/gemma4_config.h"

namespace nextn {
class Gemma4Checkpoint;
class ThreadPool;
}  // namespace nextn

namespace nextn::cpu {

struct Gemma4Layer {
  Gemma4LayerSpec spec;
  std::vector<float> input_norm, post_attn_norm, pre_ff_norm, post_ff_norm;  // [H]
  std::vector<float> q_norm, k_norm;                                         // [head_dim] (k_norm empty: no K/V)
  std::shared_ptr<Matrix> q, k, v,
      o;  // q [Hq*hd, H], k/v [kv*hd, H] (v null with K = V; both null: shared K/V), o [H, Hq*hd]
  std::shared_ptr<Matrix> gate, up, down;  // gate/up [I, H], down [H, I]
  float layer_scalar = 1.0f;
};

// Layer `index` of the checkpoint's text model; `with_kv`: the layer has its
// own k/v projections (a target), else it reads shared K/V (an assistant).
Gemma4Layer load_gemma4_layer(const Gemma4Checkpoint& ck, int index, bool with_kv);

// cos/sin for one position: head_dim/2 pairs, the first rope_pairs rotating
// with theta^(-2i/head_dim), the rest the identity (proportional RoPE).
void gemma4_rope_table(const Gemma4LayerSpec& s, int64_t pos, float* cos, float* sin);

// After attention, for T rows x [T][H] and the attention output [T][H]:
//   x += post_attn_norm(attn)
//   x  = (x + post_ff_norm(down(gelu_tanh(gate(n)) * up(n)))) * layer_scalar,  n = pre_ff_norm(x)
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
