// The Gemma 4 KV block layout and pools both backends share (gemma4_runtime.h).
#include "model/gemma4_runtime.h"

#include <climits>

namespace nextn {

Gemma4KvLayout gemma4_kv_layout(const Gemma4TextConfig& cfg) {
  Gemma4KvLayout l;
  for (const Gemma4LayerSpec& s : cfg.layers) {
    size_t& at = s.sliding ? l.ring_floats : l.full_floats;
    l.k_at.push_back(at);
    at += 2 * size_t(kKvBlockTokens) * size_t(s.kv_heads) * size_t(s.head_dim);
  }
  return l;
}

std::vector<KvPoolUse> gemma4_kv_pools(const Gemma4TextConfig& cfg, int pass_rows, KvBlockPool* full,
                                       KvBlockPool* ring) {
  std::vector<KvPoolUse> uses;
  if (full != nullptr) uses.push_back({"full_attention", full});
  if (ring != nullptr) uses.push_back({"sliding_window", ring, kv_blocks_for(gemma4_ring_slots(cfg, INT_MAX, pass_rows))});
  return uses;
}

}  // namespace nextn
