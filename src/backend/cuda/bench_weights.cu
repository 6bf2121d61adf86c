// Synthetic weights and inputs for the device benches: see bench_weights.h.
#include "backend/cuda/bench_weights.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"

namespace nextn::cuda {
namespace {

__device__ __forceinline__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return uint32_t(x >> 16);
}
__global__ void fill_words(uint32_t* w, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    w[i] = hash32(i, seed);
}
// MLX-like groups: scale of either sign, bias near -scale * qmax / 2.
__global__ void fill_scales(float* s, float* b, size_t n, float mag, float qmax, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u = float(hash32(i, seed) & 0xffffff) / 16777216.0f - 0.5f;
    const float v = float(hash32(i, seed + 7) & 0xffffff) / 16777216.0f - 0.5f;
    const float sc = __bfloat162float(__float2bfloat16_rn(2.0f * u * mag));
    s[i] = sc;
    b[i] = __bfloat162float(__float2bfloat16_rn(-sc * qmax * 0.5f + 0.2f * v * mag * qmax));
  }
}
__global__ void fill_act(bf16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16_rn(float(hash32(i, seed) & 0xffff) / 32768.0f - 1.0f);
}
// FP8 weights as a block-quantized release has them: values about normal
// (the sum of four uniforms) at std 100, at most 346 (e4m3 reaches 448;
// satfinite: never NaN).
__global__ void fill_fp8(uint8_t* w, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = hash32(i, seed);
    const float u = float((h & 0xff) + ((h >> 8) & 0xff) + ((h >> 16) & 0xff) + (h >> 24)) / 255.0f - 2.0f;
    w[i] = uint8_t(__nv_cvt_float_to_fp8(u * 173.0f, __NV_SATFINITE, __NV_E4M3));
  }
}
// One fp32 scale per 128 x 128 block, repeated over the block's rows.
__global__ void fill_fp8_scales(float* s, int rows, int groups, float mag, uint32_t seed) {
  const size_t n = size_t(rows) * groups;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t block = (i / groups / 128) * groups + i % groups;
    s[i] = mag * (0.5f + float(hash32(block, seed) & 0xffff) / 65536.0f);
  }
}
// fp32 rows for the folds' inputs: uniform in [offset - 1, offset + 1).
__global__ void fill_f32(float* x, size_t n, float offset, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = offset + float(hash32(i, seed) & 0xffff) / 32768.0f - 1.0f;
}

}  // namespace

DevMatrix synthetic_matrix(const DevMatrix& proto, uint32_t seed, std::vector<DeviceBuffer>& keep) {
  const bool fp8 = proto.kind == WKind::FP8;
  const int bits = proto.kind == WKind::Q4 ? 4 : 8;
  const size_t words = size_t(proto.rows) * proto.cols * bits / 32, groups = size_t(proto.rows) * (proto.cols / proto.group);
  DeviceBuffer w = make_device_buffer(words * 4), sc = make_device_buffer(groups * 4), bi = make_device_buffer(groups * 4);
  DevMatrix m = proto;
  m.w = w.get();
  m.scales = static_cast<const float*>(sc.get());
  m.biases = static_cast<const float*>(bi.get());
  if (fp8) {
    fill_fp8<<<4096, 256>>>(static_cast<uint8_t*>(w.get()), words * 4, 17u + seed);
    fill_fp8_scales<<<1024, 256>>>(static_cast<float*>(sc.get()), proto.rows, proto.cols / proto.group,
                                   1.0f / (100.0f * std::sqrt(float(proto.cols))), 101u + seed);
    m.biases = nullptr;
  } else {
    fill_words<<<4096, 256>>>(static_cast<uint32_t*>(w.get()), words, 17u + seed);
    fill_scales<<<1024, 256>>>(static_cast<float*>(sc.get()), static_cast<float*>(bi.get()), groups,
                               1.0f / std::sqrt(float(proto.cols)), float((1 << bits) - 1), 101u + seed);
  }
  CUDA_CHECK_LAUNCH("bench fill");
  DeviceBuffer packed = make_device_buffer(size_t(std::max<int64_t>(1, pack_quant_bytes(m))));
  pack_quant(m, packed.get(), nullptr);
  // Keep only what the kernel reads: the streamed layout when the shape
  // takes the streamed kernel, else the MLX words with fp32 scales.
  if (m.packed != nullptr) {
    m.w = nullptr;
    m.scales = m.biases = nullptr;
    keep.push_back(std::move(packed));
  } else {
    keep.push_back(std::move(w));
    keep.push_back(std::move(sc));
    keep.push_back(std::move(bi));
  }
  return m;
}

double synthetic_weight_bytes(const DevMatrix& m) {
  const int bits = m.kind == WKind::Q4 ? 4 : 8;
  return double(m.rows) * m.cols * bits / 8 + double(m.rows) * (m.cols / m.group) * 4;
}

void fill_uniform(float* x, size_t n, float offset, uint32_t seed) {
  fill_f32<<<1024, 256>>>(x, n, offset, seed);
  CUDA_CHECK_LAUNCH("bench fill_f32");
}

void fill_activations(void* x, size_t n, uint32_t seed) {
  fill_act<<<1024, 256>>>(static_cast<bf16*>(x), n, seed);
  CUDA_CHECK_LAUNCH("bench fill_act");
}

CopyAnchor measure_copy_bandwidth() {
  CopyAnchor c;
  c.bytes = int64_t(1) << 30;
  const DeviceBuffer a = make_device_buffer(size_t(c.bytes)), b = make_device_buffer(size_t(c.bytes));
  CUDA_CHECK(cudaMemset(a.get(), 1, size_t(c.bytes)));
  const Event e0 = make_event(), e1 = make_event();
  std::vector<double> t;
  for (int i = 0; i < 12; ++i) {
    CUDA_CHECK(cudaEventRecord(e0));
    CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), size_t(c.bytes), cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) t.push_back(ms);
  }
  c.ms = sample_median(t);
  c.gbs = 2.0 * double(c.bytes) / (c.ms * 1e-3) / 1e9;
  return c;
}

double time_replay(cudaGraphExec_t g, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1) {
  CUDA_CHECK(cudaEventRecord(e0, s));
  CUDA_CHECK(cudaGraphLaunch(g, s));
  CUDA_CHECK(cudaEventRecord(e1, s));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  return ms;
}

double sample_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace nextn::cuda
