// The kernels only the CUDA Gemma 4 assistant needs (gemma4_kernels.h): its
// input row, and its centroid-masked head (backend/cpu/gemma4_assistant.cpp
// has the formulas): the top-k centroids' tokens as candidates, their
// scores against the final-norm row, and the argmax or the logits row.
// The input rows are one per chain of a pass; the head's kernels take one row.
#include <cmath>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemma4_kernels.h"
#include "backend/cuda/launch.cuh"

namespace nextn::cuda {
namespace {

constexpr int kPickThreads = 1024;

// Row blockIdx.y: out[r] = embedding[r] | hidden[r] (rows of n, out rows of 2n).
template <typename TO, typename TH>
__global__ void __launch_bounds__(256) input_kernel(const float* embedding, const TH* hidden, int n, TO* out) {
  pdl_prologue();
  const size_t r = blockIdx.y;
  const int i = threadIdx.x + blockIdx.x * blockDim.x;
  if (i >= n) return;
  out[r * 2 * n + i] = from_f32<TO>(embedding[r * n + i]);
  out[r * 2 * n + n + i] = from_f32<TO>(to_f32(hidden[r * n + i]));
}

// Centroid c's rank: how many centroids come before it when sorted by logit,
// highest first, ties by index (std::stable_sort's order on the CPU).
__global__ void __launch_bounds__(kPickThreads) pick_kernel(const float* centroid_logits, int C, int k, int per,
                                                            const int32_t* ordering, int32_t* candidates) {
  pdl_prologue();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = centroid_logits[c];
    int rank = 0;
    for (int j = 0; j < C; ++j) {
      const float w = centroid_logits[j];
      rank += (w > v || (w == v && j < c)) ? 1 : 0;
    }
    if (rank < k)
      for (int j = 0; j < per; ++j) candidates[rank * per + j] = ordering[size_t(c) * per + j];
  }
}

// One warp per candidate: its row of the tied head (fp32, dequantized) . d.
template <typename TI>
__global__ void __launch_bounds__(256) score_kernel(const float* rows, int n, int H, const TI* d, float* scores) {
  pdl_prologue();
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (warp >= n) return;
  const float* r = rows + size_t(warp) * H;
  float s = 0.0f;
  for (int i = lane; i < H; i += 32) s = fmaf(r[i], to_f32(d[i]), s);
  s = warp_sum(s);
  if (lane == 0) scores[warp] = s;
}

// The best candidate: highest score, lowest token id among equal scores.
__global__ void __launch_bounds__(kPickThreads) best_kernel(const float* scores, const int32_t* candidates, int n,
                                                            int32_t* out) {
  pdl_prologue();
  __shared__ ArgMax part[kPickThreads / 32];
  ArgMax a{-INFINITY, 0x7fffffff};
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (argmax_better(scores[i], candidates[i], a.v, a.i)) a = {scores[i], candidates[i]};
  a = warp_argmax(a);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = a;
  __syncthreads();
  if (threadIdx.x < 32) {
    a = threadIdx.x < kPickThreads / 32 ? part[threadIdx.x] : ArgMax{-INFINITY, 0x7fffffff};
    a = warp_argmax(a);
    if (threadIdx.x == 0) *out = a.i;
  }
}

// logits[v] = -inf for every v, then the candidates' softcapped scores.
__global__ void __launch_bounds__(256) fill_kernel(float* logits, int V) {
  pdl_prologue();
  for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < V; i += blockDim.x * gridDim.x) logits[i] = -INFINITY;
}
__global__ void __launch_bounds__(256) scatter_kernel(const float* scores, const int32_t* candidates, int n, float cap,
                                                      float* logits) {
  pdl_prologue();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float s = scores[i];
  logits[candidates[i]] = cap > 0.0f ? mul_rn(tanhf(__fdiv_rn(s, cap)), cap) : s;
}

}  // namespace

void gemma4_assistant_input(const float* embedding, const void* hidden, Act hidden_act, int rows, int n, void* out,
                            Act act, cudaStream_t s) {
  const dim3 blocks(unsigned(ceil_div(n, 256)), unsigned(rows));
  if (act == Act::BF16 && hidden_act == Act::BF16)
    CUDA_CHECK(launch_kernel(input_kernel<bf16, bf16>, blocks, 256, 0, s, embedding, static_cast<const bf16*>(hidden),
                             n, static_cast<bf16*>(out)));
  else if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(input_kernel<bf16, float>, blocks, 256, 0, s, embedding,
                             static_cast<const float*>(hidden), n, static_cast<bf16*>(out)));
  else if (hidden_act == Act::BF16)
    CUDA_CHECK(launch_kernel(input_kernel<float, bf16>, blocks, 256, 0, s, embedding,
                             static_cast<const bf16*>(hidden), n, static_cast<float*>(out)));
  else
    CUDA_CHECK(launch_kernel(input_kernel<float, float>, blocks, 256, 0, s, embedding,
                             static_cast<const float*>(hidden), n, static_cast<float*>(out)));
  CUDA_CHECK_LAUNCH("gemma4 assistant input_kernel");
}

void gemma4_pick_candidates(const float* centroid_logits, int C, int k, int per, const int32_t* ordering,
                            int32_t* candidates, cudaStream_t s) {
  CUDA_CHECK(launch_kernel(pick_kernel, 1, kPickThreads, 0, s, centroid_logits, C, k, per, ordering, candidates));
  CUDA_CHECK_LAUNCH("gemma4 assistant pick_kernel");
}

void gemma4_score_candidates(const float* rows, int n, int H, const void* d, Act act, float* scores,
                             cudaStream_t s) {
  const unsigned blocks = unsigned(ceil_div(n * 32, 256));
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(score_kernel<bf16>, blocks, 256, 0, s, rows, n, H, static_cast<const bf16*>(d), scores));
  else
    CUDA_CHECK(launch_kernel(score_kernel<float>, blocks, 256, 0, s, rows, n, H, static_cast<const float*>(d), scores));
  CUDA_CHECK_LAUNCH("gemma4 assistant score_kernel");
}

void gemma4_best_candidate(const float* scores, const int32_t* candidates, int n, int32_t* out, cudaStream_t s) {
  CUDA_CHECK(launch_kernel(best_kernel, 1, kPickThreads, 0, s, scores, candidates, n, out));
  CUDA_CHECK_LAUNCH("gemma4 assistant best_kernel");
}

void gemma4_candidate_logits(const float* scores, const int32_t* candidates, int n, float cap, float* logits, int V,
                             cudaStream_t s) {
  CUDA_CHECK(launch_kernel(fill_kernel, unsigned(std::min(4096, ceil_div(V, 256))), 256, 0, s, logits, V));
  CUDA_CHECK(launch_kernel(scatter_kernel, unsigned(ceil_div(n, 256)), 256, 0, s, scores, candidates, n, cap, logits));
  CUDA_CHECK_LAUNCH("gemma4 assistant scatter_kernel");
}

}  // namespace nextn::cuda
