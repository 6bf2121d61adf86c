// Row gathers: the embedding lookup (dense or quantized rows, dequantized
// to the fp32 residual stream) and copies of hidden rows into a matmul
// input with zero padding; the same copies over a group pass's entries.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matmul_stream.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/weights.cuh"

namespace nextn::cuda {
namespace {

template <WKind WK>
__global__ void __launch_bounds__(256) embed_kernel(DevMatrix E, const int32_t* tokens, float* x, int ldx) {
  pdl_prologue();
  const int t = blockIdx.x;
  const int tok = tokens[t];
  for (int c = threadIdx.x; c < E.cols; c += blockDim.x)
    x[size_t(t) * ldx + c] = weight_at<WK>(E.w, E.scales, E.biases, E.cols, E.group, tok, c);
}

template <typename T>
__global__ void __launch_bounds__(256) gather_kernel(const T* src, int n, const int* first, const int* n_real, T* dst) {
  pdl_prologue();
  const int r = blockIdx.x;
  const bool real = r < *n_real;
  const T* s = src + size_t(*first + (real ? r : 0)) * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x) dst[size_t(r) * n + c] = real ? s[c] : from_f32<T>(0.0f);
}

// The group passes: block (row, entry). Gather: the entry's rows [row, row
// + T) of dst from its `in` rows *first_row.. (zeros past *n_real), as
// gather_kernel gives them. Scatter: its rows of src into its `out` rows
// from *out_row on.
template <typename TX>
__global__ void __launch_bounds__(256) gather_group_kernel(const GroupEntry* entries, int n, TX* dst) {
  pdl_prologue();
  const GroupEntry& e = entries[blockIdx.y];
  const int r = blockIdx.x;
  if (r >= e.T) return;
  const bool real = r < *e.n_real;
  const TX* s = static_cast<const TX*>(e.in) + size_t(*e.first_row + (real ? r : 0)) * n;
  TX* d = dst + size_t(e.row + r) * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x) d[c] = real ? s[c] : from_f32<TX>(0.0f);
}

template <typename TX>
__global__ void __launch_bounds__(256) scatter_group_kernel(const GroupEntry* entries, int n, const TX* src) {
  pdl_prologue();
  const GroupEntry& e = entries[blockIdx.y];
  const int r = blockIdx.x;
  if (r >= e.T) return;
  const TX* s = src + size_t(e.row + r) * n;
  TX* d = static_cast<TX*>(e.out) + size_t(*e.out_row + r) * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x) d[c] = s[c];
}

}  // namespace

void gather_rows_group(const GroupEntry* entries, int n_entries, int max_T, int n, void* dst, Act act,
                       cudaStream_t s) {
  const dim3 grid{unsigned(max_T), unsigned(n_entries)};
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(gather_group_kernel<bf16>, grid, 256, 0, s, entries, n, static_cast<bf16*>(dst)));
  else
    CUDA_CHECK(launch_kernel(gather_group_kernel<float>, grid, 256, 0, s, entries, n, static_cast<float*>(dst)));
  CUDA_CHECK_LAUNCH("gather_group_kernel");
}

void scatter_rows_group(const GroupEntry* entries, int n_entries, int max_T, int n, const void* src, Act act,
                        cudaStream_t s) {
  const dim3 grid{unsigned(max_T), unsigned(n_entries)};
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(scatter_group_kernel<bf16>, grid, 256, 0, s, entries, n, static_cast<const bf16*>(src)));
  else
    CUDA_CHECK(launch_kernel(scatter_group_kernel<float>, grid, 256, 0, s, entries, n, static_cast<const float*>(src)));
  CUDA_CHECK_LAUNCH("scatter_group_kernel");
}

void embed_rows(const DevMatrix& E, const int32_t* tokens, int T, float* x, int ldx, cudaStream_t s) {
  if (E.packed != nullptr) return stream_embed_rows(E, tokens, T, x, ldx, s);  // the same values (matmul_stream.h)
  switch (E.kind) {
    case WKind::F32: CUDA_CHECK(launch_kernel(embed_kernel<WKind::F32>, T, 256, 0, s, E, tokens, x, ldx)); break;
    case WKind::BF16: CUDA_CHECK(launch_kernel(embed_kernel<WKind::BF16>, T, 256, 0, s, E, tokens, x, ldx)); break;
    case WKind::Q4: CUDA_CHECK(launch_kernel(embed_kernel<WKind::Q4>, T, 256, 0, s, E, tokens, x, ldx)); break;
    case WKind::Q8: CUDA_CHECK(launch_kernel(embed_kernel<WKind::Q8>, T, 256, 0, s, E, tokens, x, ldx)); break;
    case WKind::FP8:
    case WKind::Z4: fail("embedding: FP8 / Z4 weights are read by the matmul only");
  }
  CUDA_CHECK_LAUNCH("embed_kernel");
}

void gather_rows(const void* src, int n, const int* first, const int* n_real, int width, void* dst, Act act,
                 cudaStream_t s) {
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(gather_kernel<bf16>, width, 256, 0, s, static_cast<const bf16*>(src), n, first, n_real, static_cast<bf16*>(dst)));
  else
    CUDA_CHECK(launch_kernel(gather_kernel<float>, width, 256, 0, s, static_cast<const float*>(src), n, first, n_real,
                                                static_cast<float*>(dst)));
  CUDA_CHECK_LAUNCH("gather_kernel");
}

}  // namespace nextn::cuda
