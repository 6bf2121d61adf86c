#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/device_handles.h"
#include "backend/cuda/device_stats.h"

namespace nextn::cuda_stats {

size_t device_memory_used() {
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

size_t device_memory_total() {
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b;
}

double copy_bandwidth_gbs(size_t bytes, int iters) {
  // Owned (device_handles.h): a check that throws below releases all of them.
  const cuda::DeviceBuffer a = cuda::make_device_buffer(bytes), b = cuda::make_device_buffer(bytes);
  const cuda::Stream s = cuda::make_stream();
  const cuda::Event e0 = cuda::make_event(), e1 = cuda::make_event();
  CUDA_CHECK(cudaMemsetAsync(a.get(), 1, bytes, s));
  float best = 1e30f;
  for (int i = -1; i < iters; ++i) {
    CUDA_CHECK(cudaEventRecord(e0, s));
    CUDA_CHECK(cudaMemcpyAsync(i % 2 ? a.get() : b.get(), i % 2 ? b.get() : a.get(), bytes, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaEventRecord(e1, s));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 0) best = std::min(best, ms);
  }
  return 2.0 * double(bytes) / (double(best) * 1e-3) / 1e9;
}

}  // namespace nextn::cuda_stats
