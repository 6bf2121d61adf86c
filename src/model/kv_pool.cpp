#include "model/kv_pool.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace nextn {

KvBlockPool::KvBlockPool(size_t block_bytes, int arena_blocks, Allocator& allocator)
    : block_bytes_(block_bytes), arena_blocks_(arena_blocks), allocator_(allocator) {
  if (block_bytes == 0 || arena_blocks < 1)
    fail("internal: KV pool of {}-byte blocks in arenas of {}", block_bytes, arena_blocks);
}

KvBlockPool::~KvBlockPool() {
  for (const Arena& a : arenas_) allocator_.release(a.p, block_bytes_ * size_t(a.blocks));
}

void* KvBlockPool::take(const char* what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) {
    // The last arena is cut short where the limit falls inside it.
    const int n = limit_ > 0 ? std::min(arena_blocks_, limit_ - allocated_) : arena_blocks_;
    if (n <= 0)
      fail("the KV cache is full: all {} blocks of {} positions are in use (--kv-cache-tokens), taking one for {}",
           limit_, kKvBlockTokens, what);
    char* arena = static_cast<char*>(allocator_.allocate(block_bytes_ * size_t(n), what));
    arenas_.push_back({arena, n});
    allocated_ += n;
    // Handed out lowest address first.
    for (int i = n - 1; i >= 0; --i) free_.push_back(arena + size_t(i) * block_bytes_);
  }
  void* b = free_.back();
  free_.pop_back();
  ++in_use_;
  return b;
}

void KvBlockPool::give(void* block) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(block);
  --in_use_;
}

void KvBlockPool::set_limit(int blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (blocks < 0) fail("--kv-cache-tokens: a negative number of blocks ({})", blocks);
  if (blocks > 0 && (blocks < allocated_ || blocks < promised_))
    fail("--kv-cache-tokens: {} blocks is below the {} the pool holds", blocks, std::max(allocated_, promised_));
  limit_ = blocks;
}

bool KvBlockPool::promise(int blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (limit_ > 0 && promised_ + blocks > limit_) return false;
  promised_ += blocks;
  return true;
}

void KvBlockPool::unpromise(int blocks) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  promised_ -= blocks;
}

KvPoolStats KvBlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {block_bytes_, limit_, allocated_, in_use_, promised_};
}

KvBlockTable::KvBlockTable(KvBlockPool* pool, int max_positions, const char* what) : pool_(pool), what_(what) {
  if (pool_) blocks_.reserve(size_t(std::max(0, kv_blocks_for(max_positions))));
}

KvBlockTable::KvBlockTable(KvBlockTable&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)), what_(o.what_), blocks_(std::move(o.blocks_)) {
  o.blocks_.clear();
}

KvBlockTable& KvBlockTable::operator=(KvBlockTable&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::exchange(o.pool_, nullptr);
    what_ = o.what_;
    blocks_ = std::move(o.blocks_);
    o.blocks_.clear();
  }
  return *this;
}

void KvBlockTable::hold(int positions) {
  if (!pool_) return;
  const int need = kv_blocks_for(positions);
  if (size_t(need) > blocks_.capacity())
    fail("internal: {} positions past the block table's {}", positions, blocks_.capacity() * kKvBlockTokens);
  while (blocks() < need) blocks_.push_back(pool_->take(what_));
}

void KvBlockTable::release() noexcept {
  if (pool_)
    for (void* b : blocks_) pool_->give(b);
  blocks_.clear();
}

bool promise_positions(const std::vector<KvPoolUse>& pools, int positions) {
  for (size_t i = 0; i < pools.size(); ++i)
    if (!pools[i].pool->promise(pools[i].blocks_for(positions))) {
      for (size_t j = 0; j < i; ++j) pools[j].pool->unpromise(pools[j].blocks_for(positions));
      return false;
    }
  return true;
}

void unpromise_positions(const std::vector<KvPoolUse>& pools, int positions) noexcept {
  for (const KvPoolUse& u : pools) u.pool->unpromise(u.blocks_for(positions));
}

}  // namespace nextn
