// KvTable (kv_table.h): blocks taken and given back, the device table.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/kv_table.h"

#include <algorithm>
#include <utility>

#include "backend/cuda/check.h"
#include "core/error.h"

namespace nextn::cuda {

KvTable::KvTable(std::shared_ptr<KvBlockPool> pool, int max_positions, DeviceMemory& mem) : pool_(std::move(pool)) {
  const int max_blocks = kv_blocks_for(max_positions);
  blocks_.reserve(size_t(max_blocks));
  d_table_ = mem.alloc<void*>(size_t(std::max(1, max_blocks)) * sizeof(void*), "the KV block table");
}

KvTable::KvTable(KvTable&& o) noexcept
    : pool_(std::move(o.pool_)), blocks_(std::move(o.blocks_)), d_table_(std::exchange(o.d_table_, nullptr)) {
  o.blocks_.clear();
}

KvTable& KvTable::operator=(KvTable&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::move(o.pool_);
    blocks_ = std::move(o.blocks_);
    o.blocks_.clear();
    d_table_ = std::exchange(o.d_table_, nullptr);
  }
  return *this;
}

void KvTable::hold(int positions, cudaStream_t s) {
  if (!pool_) return;
  const size_t first = blocks_.size();
  if (size_t(kv_blocks_for(positions)) > blocks_.capacity())
    fail("internal: {} KV positions past the table's {}", positions, blocks_.capacity() * kKvBlockTokens);
  while (int(blocks_.size()) * kKvBlockTokens < positions) blocks_.push_back(pool_->take("the KV cache"));
  // From pageable memory: the call returns once the pointers are staged.
  if (blocks_.size() > first)
    CUDA_CHECK(cudaMemcpyAsync(d_table_ + first, blocks_.data() + first, (blocks_.size() - first) * sizeof(void*),
                               cudaMemcpyHostToDevice, s));
}

void KvTable::release() noexcept {
  if (pool_)
    for (void* b : blocks_) pool_->give(b);
  blocks_.clear();
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
