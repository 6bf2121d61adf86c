// The KV cache in fixed-size blocks (docs/engine.md, "Memory that grows with
// use"). A sequence's keys and values live in blocks of kKvBlockTokens
// positions taken from its group's pool as it grows; its block table maps
// position p to block p / kKvBlockTokens. One block holds every attention
// layer's keys and values for its positions (the backend fixes the layout),
// so a sequence needs one table for all its layers.
//
// The pool takes memory from its allocator in arenas of several blocks, only
// when no free block is left, and keeps it for the next sequence: the memory
// grows with the positions in use, up to a limit. Admission promises blocks
// before a request joins (promise): a server admits a request only when its
// whole budget (prompt + max_tokens + a verify block) fits beside the
// budgets already promised, so a running sequence never finds the pool empty.
//
// A group may have several pools (Gemma 4: one for its full-attention
// layers, one for its sliding-window rings, whose blocks differ in size);
// KvPoolUse says how many blocks of each a sequence of P positions holds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/allocator.h"

namespace nextn {

constexpr int kKvBlockTokens = 64;

// Blocks that hold `positions` positions.
constexpr int kv_blocks_for(int64_t positions) {
  return int((positions + kKvBlockTokens - 1) / kKvBlockTokens);
}

struct KvPoolStats {
  size_t block_bytes = 0;
  int limit = 0;      // blocks the pool may hold (0: no limit)
  int allocated = 0;  // blocks whose memory the pool holds
  int in_use = 0;     // blocks held by sequences
  int promised = 0;   // blocks promised to admitted requests
};

class KvBlockPool {
 public:
  // Blocks of `block_bytes`, allocated `arena_blocks` at a time from
  // `allocator` (which outlives the pool).
  KvBlockPool(size_t block_bytes, int arena_blocks, Allocator& allocator);
  ~KvBlockPool();
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  // A free block, allocating an arena when none is free. Throws Error (the
  // pool unchanged) at the limit or when the allocator refuses.
  void* take(const char* what);
  // A block take() gave.
  void give(void* block) noexcept;

  // At most `blocks` blocks (0: no limit); refuses a limit below the blocks
  // in use or promised.
  void set_limit(int blocks);
  // Admission: true, and `blocks` more counted as promised, when they fit
  // under the limit beside the blocks already promised.
  bool promise(int blocks);
  void unpromise(int blocks) noexcept;

  KvPoolStats stats() const;
  size_t block_bytes() const { return block_bytes_; }

 private:
  const size_t block_bytes_;
  const int arena_blocks_;
  Allocator& allocator_;
  mutable std::mutex mu_;
  struct Arena {
    void* p;
    int blocks;
  };
  std::vector<Arena> arenas_;
  std::vector<void*> free_;
  int limit_ = 0, allocated_ = 0, in_use_ = 0, promised_ = 0;
};

// One of a group's pools and what its sequences hold of it: the blocks of
// their positions, or at most `ring_blocks` where the pool holds a ring
// (sliding-window layers reuse their slots once the window is full).
struct KvPoolUse {
  const char* name = "attention";  // the metrics' `pool` label
  KvBlockPool* pool = nullptr;
  int ring_blocks = 0;  // 0: no ring
  int blocks_for(int64_t positions) const {
    const int b = kv_blocks_for(positions);
    return ring_blocks > 0 && b > ring_blocks ? ring_blocks : b;
  }
};

// A sequence's blocks of one pool, in order: block b holds positions (a
// ring: slots) [64b, 64b + 64). Its capacity is fixed when it is made, so
// data() never moves and the backends' layer views read it in place.
class KvBlockTable {
 public:
  KvBlockTable() = default;
  // Room for `max_positions` positions of `pool` (null: a table that holds
  // nothing, for a model without such layers); `what` names the blocks in
  // the pool's errors.
  KvBlockTable(KvBlockPool* pool, int max_positions, const char* what);
  KvBlockTable(KvBlockTable&& o) noexcept;
  KvBlockTable& operator=(KvBlockTable&& o) noexcept;
  ~KvBlockTable() { release(); }

  // Takes blocks until `positions` positions are held. Throws Error where
  // the pool refuses; the blocks taken before stay held (release gives them
  // back).
  void hold(int positions);
  // Every block back to the pool.
  void release() noexcept;

  int blocks() const { return int(blocks_.size()); }
  void* block(int i) const { return blocks_[size_t(i)]; }
  void* const* data() const { return blocks_.data(); }
  size_t bytes_held() const { return pool_ ? blocks_.size() * pool_->block_bytes() : 0; }

 private:
  KvBlockPool* pool_ = nullptr;
  const char* what_ = "";
  std::vector<void*> blocks_;  // capacity: the most blocks
};

// Admission over a group's pools: the blocks of `positions` promised on
// every pool, or on none (false).
bool promise_positions(const std::vector<KvPoolUse>& pools, int positions);
void unpromise_positions(const std::vector<KvPoolUse>& pools, int positions) noexcept;

}  // namespace nextn
