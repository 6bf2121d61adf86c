// KvTable (kv_table.h): blocks taken and given back, the device table.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/kv_table.h"

#include <algorithm>
#include <utility>

#include "backend/cuda/check.h"
#include "core/error.h"

namespace nextn::cuda {

KvTable::KvTable(std::shared_ptr<KvBlockPool> pool, int max_positions, DeviceMemory& mem, const char* what)
    : pool_(std::move(pool)), table_(pool_.get(), max_positions, what) {
  const int max_blocks = kv_blocks_for(max_positions);
  d_table_ = mem.alloc<void*>(size_t(std::max(1, max_blocks)) * sizeof(void*), "the KV block table");
}

KvTable::KvTable(KvTable&& o) noexcept
    : pool_(std::move(o.pool_)), table_(std::move(o.table_)), d_table_(std::exchange(o.d_table_, nullptr)) {}

KvTable& KvTable::operator=(KvTable&& o) noexcept {
  if (this != &o) {
    table_.release();  // to the pool this table holds, before it may go
    table_ = std::move(o.table_);
    pool_ = std::move(o.pool_);
    d_table_ = std::exchange(o.d_table_, nullptr);
  }
  return *this;
}

void KvTable::hold(int positions, cudaStream_t s) {
  const int first = table_.blocks();
  table_.hold(positions);
  // From pageable memory: the call returns once the pointers are staged.
  if (table_.blocks() > first)
    CUDA_CHECK(cudaMemcpyAsync(d_table_ + first, table_.data() + first, size_t(table_.blocks() - first) * sizeof(void*),
                               cudaMemcpyHostToDevice, s));
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
