// Whole-device measurements for the benchmarks (bench decode): memory in use
// on device 0 and the device-to-device copy bandwidth, measured in the run
// that reports a roofline. Plain C++ header (no CUDA types); built only with
// the CUDA backend (NEXTN_HAVE_CUDA).
#pragma once
#include <cstddef>

namespace nextn::cuda_stats {

// total - free bytes of device 0 (cudaMemGetInfo): every process and context
// on the device, so take differences. Creates the context when needed.
size_t device_memory_used();
size_t device_memory_total();

// cudaMemcpyAsync device to device of `bytes` (buffers allocated and freed
// here), `iters` timed copies after one warm-up, best of them; returns GB/s
// counting read + write (2 * bytes / time), as the brief's copy figure.
double copy_bandwidth_gbs(size_t bytes, int iters);

}  // namespace nextn::cuda_stats
