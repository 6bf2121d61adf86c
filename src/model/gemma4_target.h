// What the Gemma 4 assistant drafter reads from its target runtime besides
// ModelRuntime: the last hidden row, the scaled embedding and the cached K/V
// of two layers. A Gemma 4 runtime implements both interfaces.
#pragma once
#include <cstdint>

#include "io/gemma4_config.h"

namespace nextn {

class Gemma4Target {
 public:
  virtual ~Gemma4Target() = default;
  virtual const Gemma4TextConfig& gemma4_config() const = 0;
  // The last kept row of the last target_forward, after the final norm [hidden].
  virtual void last_hidden(float* out) const = 0;
  // embed(token) * embed_scale [hidden], as the target's own input.
  virtual void scaled_embedding(int32_t token, float* out) const = 0;
  // Cached key / value of `layer` at `pos` (after k_norm + RoPE / v_norm):
  // [kv_heads][head_dim]. `pos` must be one the cache still holds: below
  // target_length() and, for a sliding layer, within sliding_window + 1 of it.
  virtual const float* cached_key(int layer, int pos) const = 0;
  virtual const float* cached_value(int layer, int pos) const = 0;
};

}  // namespace nextn
