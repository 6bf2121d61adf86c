// Argmax over the vocabulary, on the device: two passes with a total order
// ("greater value, then lower index"; NaN never wins), so the result does
// not depend on how the work is split. Also the walk's compare step.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
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
  pdl_prologue();
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
                                                           const int* stop, HeadCounters* calls) {
  pdl_prologue();
  if (stop != nullptr && *stop != 0) return;
  const int t = blockIdx.x;
  const ArgMax a = reduce_pairs(pairs + size_t(t) * n_blocks, n_blocks);
  if (threadIdx.x == 0) {
    out[t] = a.i;
    if (calls != nullptr && t == 0) atomicAdd(&calls->head_calls, 1ull);
  }
}

__global__ void __launch_bounds__(256) walk_compare_kernel(const ArgMax* pairs, int n_blocks, int j,
                                                           const int32_t* drafts, int n_drafts, int32_t* out,
                                                           int* stop, int* count, HeadCounters* counters) {
  pdl_prologue();
  if (*stop != 0) return;
  const ArgMax a = reduce_pairs(pairs, n_blocks);
  if (threadIdx.x == 0) {
    out[j] = a.i;
    *count += 1;
    const bool last = j >= n_drafts || a.i != drafts[j];
    if (last) *stop = 1;
    if (counters != nullptr) {
      atomicAdd(&counters->walk_rows, 1ull);
      if (last) atomicAdd(&counters->head_calls, 1ull);
    }
  }
}

// One row of the while walk (see walk_step in kernels.h). j is read before
// the reduction's barriers and thread 0 writes state[0] after them.
__global__ void __launch_bounds__(256) walk_step_kernel(const ArgMax* pairs, int n_blocks, int* state,
                                                        const int32_t* drafts, int n_last, int32_t* out,
                                                        int count_slot, const uint4* rows, int row_vecs, uint4* next,
                                                        HeadCounters* counters, cudaGraphConditionalHandle handle,
                                                        int use_handle) {
  pdl_prologue();
  __shared__ int go;
  const int j = state[0];
  const ArgMax a = reduce_pairs(pairs, n_blocks);
  if (threadIdx.x == 0) {
    out[j] = a.i;
    out[count_slot] = j + 1;
    const bool stop = j >= n_last || a.i != drafts[j];
    if (stop)
      state[1] = 1;
    else
      state[0] = j + 1;
    if (counters != nullptr) {
      atomicAdd(&counters->walk_rows, 1ull);
      if (stop) atomicAdd(&counters->head_calls, 1ull);
    }
    if (use_handle != 0) cudaGraphSetConditional(handle, stop ? 0u : 1u);
    go = stop ? 0 : 1;
  }
  __syncthreads();
  if (go == 0) return;
  const uint4* src = rows + size_t(j + 1) * row_vecs;
  for (int i = threadIdx.x; i < row_vecs; i += blockDim.x) next[i] = src[i];
}

}  // namespace

int64_t argmax_scratch_bytes(int V) { return int64_t(ceil_div(V, kArgmaxChunk)) * sizeof(ArgMax); }

void argmax_rows(const float* logits, int T, int V, int ld, void* scratch, int32_t* out, cudaStream_t s,
                 HeadCounters* calls) {
  const int n_chunks = ceil_div(V, kArgmaxChunk);
  auto* pairs = static_cast<ArgMax*>(scratch);
  CUDA_CHECK(launch_kernel(argmax_chunks_kernel, dim3(unsigned(n_chunks), unsigned(T)), 256, 0, s, logits, V, ld, pairs));
  CUDA_CHECK_LAUNCH("argmax_chunks_kernel");
  argmax_pairs(pairs, T, n_chunks, out, nullptr, s, calls);
}

void argmax_pairs(const void* pairs, int T, int n_blocks, int32_t* out, const int* stop, cudaStream_t s,
                  HeadCounters* calls) {
  CUDA_CHECK(launch_kernel(argmax_pairs_kernel, unsigned(T), 256, 0, s, static_cast<const ArgMax*>(pairs), n_blocks, out, stop, calls));
  CUDA_CHECK_LAUNCH("argmax_pairs_kernel");
}

void walk_compare_pairs(const void* pairs, int n_blocks, int j, const int32_t* drafts, int n_drafts, int32_t* out,
                        int* stop, int* count, cudaStream_t s, HeadCounters* counters) {
  CUDA_CHECK(launch_kernel(walk_compare_kernel, 1, 256, 0, s, static_cast<const ArgMax*>(pairs), n_blocks, j, drafts, n_drafts, out, stop,
                                        count, counters));
  CUDA_CHECK_LAUNCH("walk_compare_kernel");
}

void walk_step_pairs(const void* pairs, int n_blocks, int* state, const int32_t* drafts, int n_last, int32_t* out,
                     int count_slot, const void* rows, int row_bytes, void* next, HeadCounters* counters,
                     cudaGraphConditionalHandle handle, int use_handle, cudaStream_t s) {
  if (row_bytes % 16 != 0) fail("walk_step: row of {} bytes is not a multiple of 16", row_bytes);
  CUDA_CHECK(launch_kernel(walk_step_kernel, 1, 256, 0, s, static_cast<const ArgMax*>(pairs), n_blocks, state, drafts, n_last, out,
                                     count_slot, static_cast<const uint4*>(rows), row_bytes / 16,
                                     static_cast<uint4*>(next), counters, handle, use_handle));
  CUDA_CHECK_LAUNCH("walk_step_kernel");
}

}  // namespace nextn::cuda
