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

// A sequence's KV block table (model/kv_pool.h's KvBlockTable) and its
// copy in device memory, which the kernels read.
class KvTable {
 public:
  KvTable() = default;
  // Room for `max_positions` positions; the device table from `mem`;
  // `what` names the blocks in the pool's errors.
  KvTable(std::shared_ptr<KvBlockPool> pool, int max_positions, DeviceMemory& mem, const char* what = "the KV cache");
  KvTable(KvTable&& o) noexcept;
  KvTable& operator=(KvTable&& o) noexcept;
  ~KvTable() = default;
  // Takes blocks until `positions` positions are held, their pointers
  // copied into the device table on `s` (before the work that reads them).
  void hold(int positions, cudaStream_t s);
  // Every block back to the pool.
  void release() noexcept { table_.release(); }
  void* const* device() const { return d_table_; }
  int blocks() const { return table_.blocks(); }
  void* block(int i) const { return table_.block(i); }
  size_t bytes_held() const { return table_.bytes_held(); }

 private:
  std::shared_ptr<KvBlockPool> pool_;  // keeps the pool while table_ holds its blocks
  KvBlockTable table_;
  void** d_table_ = nullptr;  // [max_blocks], from the sequence's device memory
};

}  // namespace nextn::cuda
