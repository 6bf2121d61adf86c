// Argmax over the vocabulary, on the device: two passes with a total order
// ("greater value, then lower index"; NaN never wins), so the result does
// not depend on how the work is split. Also the walk's compare step.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace nextn::cuda {
namespace {

constexpr int kArgmaxChunk = 4096;  // logits per first-pass block

__device__ ArgMax block_argmax(ArgMax a) {
  __shared__ ArgMax red[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  a = warp_argmax(a);
  __syncthreads();
  if (lane == 0) red[warp] = a;
  __syncthreads();
  ArgMax r = red[0];
  for (int w = 1; w < nwarps; ++w)
    if (argmax_better(red[w].v, red[w].i, r.v, r.i)) r = red[w];
  return r;
}

// First pass: block (chunk, t) -> the best of logits[t][chunk * 4096 ...].
__global__ void __launch_bounds__(256) argmax_chunks_kernel(const float* logits, int V, int ld, ArgMax* pairs) {
  const int t = blockIdx.y, n_chunks = gridDim.x;
  const float* row = logits + size_t(t) * ld;
  const int begin = blockIdx.x * kArgmaxChunk, end = min(V, begin + kArgmaxChunk);
  ArgMax a{-INFINITY, V};
  for (int i = begin + threadIdx.x; i < end; i += blockDim.x)
    if (argmax_better(row[i], i, a.v, a.i)) a = {row[i], i};
  a = block_argmax(a);
  if (threadIdx.x == 0) pairs[size_t(t) * n_chunks + blockIdx.x] = a;
}

__device__ ArgMax reduce_pairs(const ArgMax* pairs, int n) {
  ArgMax a{-INFINITY, 0x7fffffff};
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (argmax_better(pairs[i].v, pairs[i].i, a.v, a.i)) a = pairs[i];
  return block_argmax(a);
}

__global__ void __launch_bounds__(256) argmax_pairs_kernel(const ArgMax* pairs, int n_blocks, int32_t* out,
                                                           const int* stop) {
  if (stop != nullptr && *stop != 0) return;
  const int t = blockIdx.x;
  const ArgMax a = reduce_pairs(pairs + size_t(t) * n_blocks, n_blocks);
  if (threadIdx.x == 0) out[t] = a.i;
}

__global__ void __launch_bounds__(256) walk_compare_kernel(const ArgMax* pairs, int n_blocks, int j,
                                                           const int32_t* drafts, int n_drafts, int32_t* out,
                                                           int* stop, int* count) {
  if (*stop != 0) return;
  const ArgMax a = reduce_pairs(pairs, n_blocks);
  if (threadIdx.x == 0) {
    out[j] = a.i;
    *count += 1;
    if (j >= n_drafts || a.i != drafts[j]) *stop = 1;
  }
}

}  // namespace

int64_t argmax_scratch_bytes(int V) { return int64_t(ceil_div(V, kArgmaxChunk)) * sizeof(ArgMax); }

void argmax_rows(const float* logits, int T, int V, int ld, void* scratch, int32_t* out, cudaStream_t s) {
  const int n_chunks = ceil_div(V, kArgmaxChunk);
  auto* pairs = static_cast<ArgMax*>(scratch);
  argmax_chunks_kernel<<<dim3(unsigned(n_chunks), unsigned(T)), 256, 0, s>>>(logits, V, ld, pairs);
  CUDA_CHECK_LAUNCH("argmax_chunks_kernel");
  argmax_pairs(pairs, T, n_chunks, out, nullptr, s);
}

void argmax_pairs(const void* pairs, int T, int n_blocks, int32_t* out, const int* stop, cudaStream_t s) {
  argmax_pairs_kernel<<<unsigned(T), 256, 0, s>>>(static_cast<const ArgMax*>(pairs), n_blocks, out, stop);
  CUDA_CHECK_LAUNCH("argmax_pairs_kernel");
}

void walk_compare_pairs(const void* pairs, int n_blocks, int j, const int32_t* drafts, int n_drafts, int32_t* out,
                        int* stop, int* count, cudaStream_t s) {
  walk_compare_kernel<<<1, 256, 0, s>>>(static_cast<const ArgMax*>(pairs), n_blocks, j, drafts, n_drafts, out, stop,
                                        count);
  CUDA_CHECK_LAUNCH("walk_compare_kernel");
}

}  // namespace nextn::cuda
