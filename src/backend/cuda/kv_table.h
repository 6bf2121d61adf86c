// A CUDA sequence's KV block table (model/kv_pool.h): blocks from its
// group's pool as the sequence grows, their pointers on the host and in a
// device table the kernels read. Private to the CUDA runtimes.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "model/kv_pool.h"

namespace nextn::cuda {

// A sequence's KV block table: blocks from the group's pool as the sequence
// grows, their pointers on the host and in a device table the kernels read.
class KvTable {
 public:
  KvTable() = default;
  // Room for `max_positions` positions; the device table from `mem`.
  KvTable(std::shared_ptr<KvBlockPool> pool, int max_positions, DeviceMemory& mem);
  KvTable(KvTable&& o) noexcept;
  KvTable& operator=(KvTable&& o) noexcept;
  ~KvTable() { release(); }
  // Takes blocks until `positions` positions are held, their pointers
  // copied into the device table on `s` (before the work that reads them).
  void hold(int positions, cudaStream_t s);
  // Every block back to the pool.
  void release() noexcept;
  void* const* device() const { return d_table_; }
  int blocks() const { return int(blocks_.size()); }
  void* block(int i) const { return blocks_[size_t(i)]; }
  size_t bytes_held() const { return pool_ ? blocks_.size() * pool_->block_bytes() : 0; }

 private:
  std::shared_ptr<KvBlockPool> pool_;
  std::vector<void*> blocks_;  // capacity max_blocks: the copies read it in place
  void** d_table_ = nullptr;   // [max_blocks]
};

}  // namespace nextn::cuda
