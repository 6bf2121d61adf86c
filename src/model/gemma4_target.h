// What the Gemma 4 assistant drafter reads from its target runtime besides
// ModelRuntime: the last hidden row, the scaled embedding and the cached K/V
// of two layers. A Gemma 4 runtime implements both interfaces. A target on
// a device also runs the assistant there (device_assistant), reading its
// own state in place; the CPU assistant reads it through this view.
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "io/gemma4_config.h"

namespace nextn {

class Gemma4Checkpoint;

// The assistant's draft chain for one target sequence (speculative/
// gemma4_drafter.h drives it). A round: start(bonus) pairs the bonus with
// the target's last hidden row, queries held at the target's length; then
// either propose(n) (greedy: n chained drafts, each step continuing from
// the previous draft and the assistant's post_projection output), or, for
// sampled drafting, next_logits / advance(token) one position at a time.
class AssistantChain {
 public:
  virtual ~AssistantChain() = default;
  virtual void start(int32_t bonus) = 0;
  virtual void propose(int n, int32_t* out) = 0;
  // The logits [vocab] of the chain's next draft: the tied head (centroid
  // masked: -inf outside the top centroids' tokens), softcapped as the config says.
  virtual void next_logits(float* out) = 0;
  // The next draft is `token` (after next_logits).
  virtual void advance(int32_t token) = 0;
  // Chains whose greedy steps can run as one pass over several sequences
  // (the same assistant on one device) share a non-null key.
  // propose_together(chains, n, out) is propose(n[i], out[i]) on each started
  // chains[i] (equal keys; this one is chains[0]). The default runs each alone.
  virtual const void* batch_key() const { return nullptr; }
  virtual void propose_together(std::span<AssistantChain* const> chains, std::span<const int> n,
                                std::span<int32_t* const> out) {
    for (size_t i = 0; i < chains.size(); ++i) chains[i]->propose(n[i], out[i]);
  }
};

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
  // The assistant `assistant` (checked to fit this target) as a chain on
  // this target's device, or nullptr where the CPU assistant drafts for it.
  virtual std::unique_ptr<AssistantChain> device_assistant(const Gemma4Checkpoint& assistant) {
    (void)assistant;
    return nullptr;
  }
};

}  // namespace nextn
