// What the CPU and CUDA Gemma 4 runtimes share: no MTP head (Gemma 4 drafts
// with a separate assistant checkpoint, so mtp() stays nullptr), and the
// positions of the caches that a rollback moves back (the backend restores the caches themselves).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "model/kv_pool.h"
#include "model/gemma4_target.h"
#include "model/runtime.h"

namespace nextn {

// The KV cache in blocks, as both backends lay it out (docs/gemma4.md, "The
// sliding-window cache and rollback"): a block of one kind holds
// kKvBlockTokens positions (full-attention layers) or ring slots (sliding
// layers) of every layer of that kind, in layer order, each layer's keys
// [kKvBlockTokens][kv_heads * head_dim] then its values, as floats.
struct Gemma4KvLayout {
  std::vector<size_t> k_at;                 // per layer: floats from its kind's block start to its keys
  size_t full_floats = 0, ring_floats = 0;  // per block of each kind; 0: no layer of that kind
};
Gemma4KvLayout gemma4_kv_layout(const Gemma4TextConfig& cfg);
// A sliding layer's ring in a sequence of max_tokens positions: the window
// and one pass of pass_rows rows more (what a forward may overwrite).
inline int gemma4_ring_slots(const Gemma4TextConfig& cfg, int max_tokens, int pass_rows) {
  return std::min(max_tokens, cfg.sliding_window + 1 + pass_rows);
}
// The group's two pools as admission counts them (null: no layer of that kind).
std::vector<KvPoolUse> gemma4_kv_pools(const Gemma4TextConfig& cfg, int pass_rows, KvBlockPool* full,
                                       KvBlockPool* ring);

class Gemma4Runtime : public ModelRuntime, public Gemma4Target {
 public:
  int target_length() const override { return length_; }
  // What target_rollback(keep) refuses (Error), checked without changing anything.
  void check_rollback(int keep) const {
    if (keep < 1 || keep > last_T_) fail("target_rollback: keep {} outside [1, {}]", keep, last_T_);
    if (last_T_ - keep > max_undo_) fail("target_rollback: cannot undo more than {} rows of one forward", max_undo_);
  }
  // The step's reservation: token ids and capacity (its buffers are all made
  // with it; it has no MTP head).
  void reserve_step(std::span<const int32_t> tokens, int mtp_end) override {
    if (mtp_end > 0) fail("Gemma 4 has no MTP head (draft with its assistant checkpoint)");
    check_capacity(int(tokens.size()));
    ModelRuntime::reserve_step(tokens, 0);
    hold_forward(int(tokens.size()));
  }

 protected:
  Gemma4Runtime(int max_tokens, int max_undo) : max_tokens_(max_tokens), max_undo_(max_undo) {}
  // Acquires what a forward of T more rows needs: KV blocks from the
  // group's pools until length + T positions are held (model/kv_pool.h),
  // and rows for T outputs. Throws Error when memory cannot be had; what the
  // sequence computes is unchanged (it may keep what it took).
  virtual void hold_forward(int T) = 0;
  // Before a forward of T tokens: they fit the caches.
  void check_capacity(int T) const {
    if (length_ + T > max_tokens_) fail("sequence of {} tokens exceeds the cache capacity {}", length_ + T, max_tokens_);
  }
  // After a forward of T tokens.
  void record_forward(int T) {
    forward_start_ = length_;
    length_ += T;
    last_T_ = T;
  }
  // Keeps the first `keep` rows of the last forward. Sliding rings hold
  // max_undo slots beyond the window: only that many rows of one forward can
  // be undone without losing context.
  void record_rollback(int keep) {
    check_rollback(keep);
    length_ = forward_start_ + keep;
    last_T_ = keep;
  }
  void clear_positions() { length_ = forward_start_ = last_T_ = 0; }

  int max_tokens_;
  int max_undo_;
  int length_ = 0;
  int forward_start_ = 0;  // length before the last target_forward
  int last_T_ = 0;         // rows of the last forward still kept
};

}  // namespace nextn
