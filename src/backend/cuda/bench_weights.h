// Synthetic weights and inputs for the device benches (`nextn bench
// projection`, `nextn bench chain`): hash-filled, so no host copy and no
// file; packed as the runtime packs them. CUDA builds only.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/kernels.h"

namespace nextn::cuda {

// A matrix shaped as `proto` (kind Q4, Q8 or FP8; rows, cols, group,
// splits, fp8_activations): MLX-like groups (scale of either sign, bias
// near -scale * qmax / 2) or FP8 codes about normal with one fp32 scale per
// 128 x 128 block. `keep` receives the buffers the matrix reads.
DevMatrix synthetic_matrix(const DevMatrix& proto, uint32_t seed, std::vector<DeviceBuffer>& keep);
// Bytes a projection through m must read: the packed weights and one bf16
// (scale, bias) pair, or FP8's fp32 scale, per group.
double synthetic_weight_bytes(const DevMatrix& m);
// n fp32 values uniform in [offset - 1, offset + 1) (device memory).
void fill_uniform(float* x, size_t n, float offset, uint32_t seed);
// n bf16 values uniform in [-1, 1) (device memory).
void fill_activations(void* x, size_t n, uint32_t seed);
// The device copy bandwidth, the benches' anchor: 1 GiB device to device,
// 10 timed copies after 2 warm-ups, (read + write) / median time.
struct CopyAnchor {
  int64_t bytes = 0;
  double ms = 0, gbs = 0;
};
CopyAnchor measure_copy_bandwidth();
// One replay of graph g on s between two events, in ms (waits for it).
double time_replay(cudaGraphExec_t g, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1);
// The median of a sample (the benches' summary).
double sample_median(std::vector<double> v);

}  // namespace nextn::cuda
