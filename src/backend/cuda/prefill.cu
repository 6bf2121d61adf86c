// PrefillGemm (prefill.h): bf16 expansion of the streamed q4/q8 layout, then
// one cuBLAS GEMM with fp32 accumulation and fp32 output.
#include "backend/cuda/prefill.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matmul_stream.h"
#include "backend/cuda/stream_layout.cuh"
#include "core/error.h"

namespace nextn::cuda {
namespace {

// The streamed layout (matmul_stream.cu): tiles of 128 rows x 128 k ("units"),
// each unit 1024 lane entries of packed weights, then the bf16 (scale, bias)
// pairs [128 rows][128 / group]. Lane entry u of unit (tile, chunk) holds, for
// jj = 0, 1, the 8 elements of row `row` at k = 128 chunk + 32 (2 kh + jj) + 8 c.
constexpr int kUnitRows = 128, kUnitK = 128, kLanes = 1024;
constexpr int64_t kExpandBytes = int64_t(64) << 20;  // bf16 scratch per GEMM block

// Expands tiles [tile0, tile0 + tiles) into out, row tile0 * 128 first. A
// SwiGLU-paired matrix (half > 0: its layout interleaves gate and up rows,
// stream_layout.cuh) is written back in the checkpoint's order within the
// block: its block_rows / 2 gate rows, then its up rows.
// Element (row, k) rounded to bf16 once from its exact fp32 value: s * q + b
// (affine Q4 / Q8, the bf16 pair), fp8 * s or s * (q - zero) (FP8, Z4: fp32 s).
template <WKind WK>
__global__ void __launch_bounds__(256) expand_stream_kernel(const uint8_t* packed, int rows, int cols, int group,
                                                            int tile0, int tiles, int chunks, int unit_bytes, int half,
                                                            int block_rows, bf16* out) {
  pdl_prologue();
  constexpr int BITS = WK == WKind::Q4 || WK == WKind::Z4 ? 4 : 8;
  constexpr int LB = BITS == 4 ? 8 : 16;  // bytes per lane entry
  const int gpc = kUnitK / group;
  const size_t total = size_t(tiles) * chunks * kLanes;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t tc = size_t(tile0) * chunks + i / kLanes;
    const int u = int(i % kLanes);
    const int tile = int(tc / chunks), ch = int(tc % chunks);
    const int lane = u & 31, mh = (u >> 5) & 3, wg = u >> 7;
    const int kh = wg >> 2, rg = wg & 3, g = lane >> 2, c = lane & 3;
    const int r = rg * 32 + 16 * (mh >> 1) + 8 * (mh & 1) + g;  // row within the tile
    const int row = tile * kUnitRows + r;
    if (row >= rows) continue;
    const int out_row = half == 0 ? row - tile0 * kUnitRows : stream::source_row(row - tile0 * kUnitRows, block_rows / 2);
    const uint8_t* base = packed + tc * size_t(unit_bytes);
    const uint32_t* v = reinterpret_cast<const uint32_t*>(base + size_t(u) * LB);
    const uint32_t* sbs = reinterpret_cast<const uint32_t*>(base + kUnitRows * kUnitK * BITS / 8);
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int kk = 32 * (2 * kh + jj) + 8 * c;
      constexpr int kEntryWords = WK == WKind::Z4 ? 2 : 1;  // Z4: scale, then (128 + zero) x 2
      const uint32_t sb = sbs[(r * gpc + kk / group) * kEntryWords];
      const uint16_t s16 = uint16_t(sb & 0xffffu), b16 = uint16_t(sb >> 16);
      const bool scaled = WK == WKind::FP8 || WK == WKind::Z4;
      const float s = scaled ? __uint_as_float(sb) : __bfloat162float(*reinterpret_cast<const bf16*>(&s16));
      const float b = scaled ? 0.0f : __bfloat162float(*reinterpret_cast<const bf16*>(&b16));
      alignas(16) bf16 e8[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        uint32_t q;
        if constexpr (BITS == 4) q = (v[jj] >> q4_bit(e)) & 0xfu;
        else q = (v[2 * jj + e / 4] >> (8 * (e % 4))) & 0xffu;
        if constexpr (WK == WKind::FP8) {
          const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(q), __NV_E4M3);
          e8[e] = __float2bfloat16_rn(__half2float(__half(h)) * s);
        } else if constexpr (WK == WKind::Z4) {
          const uint32_t zp = sbs[(r * gpc + kk / group) * kEntryWords + kEntryWords - 1] & 0xffffu;
          const float zero = __bfloat162float(*reinterpret_cast<const bf16*>(&zp)) - 128.0f;
          e8[e] = __float2bfloat16_rn(s * (float(q) - zero));
        } else {
          e8[e] = __float2bfloat16_rn(fmaf(s, float(q), b));
        }
      }
      *reinterpret_cast<uint4*>(out + size_t(out_row) * cols + size_t(ch) * kUnitK + kk) =
          *reinterpret_cast<const uint4*>(e8);
    }
  }
}

const char* cublas_status_text(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
  }
}

void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("--backend cuda: cuBLAS {} failed: {} ({})", what, cublas_status_text(s), int(s));
}

}  // namespace

PrefillGemm::PrefillGemm(cudaStream_t s) : stream_(s) {
  cublasHandle_t h = nullptr;
  cublas_check(cublasCreate(&h), "cublasCreate");
  handle_ = h;
  const cublasStatus_t st = cublasSetStream(h, s);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
    handle_ = nullptr;
    cublas_check(st, "cublasSetStream");
  }
}

PrefillGemm::~PrefillGemm() {
  if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

bool PrefillGemm::supported(const DevMatrix& W) {
  return W.kind == WKind::BF16 ||
         ((W.kind == WKind::Q4 || W.kind == WKind::Q8 || scaled_kind(W.kind)) && W.packed != nullptr);
}

// Tiles expanded per GEMM: as many as fit kExpandBytes (at least one), so
// the scratch stays small next to the weights (the 27B's MLP gate/up would
// take 340 MiB in bf16 at once).
static int expand_block_tiles(const DevMatrix& W) {
  const int64_t per_tile = int64_t(kUnitRows) * W.cols * 2;
  return int(std::clamp<int64_t>(kExpandBytes / per_tile, 1, stream_tiles(W)));
}

int64_t PrefillGemm::scratch_bytes(const DevMatrix& W) {
  if (W.kind == WKind::BF16) return 0;
  return int64_t(std::min(W.rows, expand_block_tiles(W) * kUnitRows)) * W.cols * 2;
}

void PrefillGemm::matmul(const DevMatrix& W, const void* X, int T, int ldx, float* Y, int ldy, bool accumulate,
                         void* scratch) {
  if (!supported(W)) fail("prefill: matrix kind {} without the streamed layout", int(W.kind));
  if (T < 1) fail("prefill: {} rows", T);
  // Column-major view: Y^T [rows x T] = W [rows x cols] . X^T [cols x T].
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  auto gemm = [&](const void* w, int row0, int rows) {
    cublas_check(cublasGemmEx(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, rows, T, W.cols, &alpha,
                              w, CUDA_R_16BF, W.cols, X, CUDA_R_16BF, ldx, &beta, Y + row0, CUDA_R_32F, ldy,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  };
  if (W.kind == WKind::BF16) return gemm(W.w, 0, W.rows);
  // Quantized: blocks of rows expanded into the scratch, one GEMM each (the
  // blocks depend on the matrix shape only, so a prompt is prefilled the
  // same way every time).
  const int tiles = stream_tiles(W), chunks = W.cols / kUnitK, block = expand_block_tiles(W);
  const int unit_bytes = int(stream_layout_bytes(W) / (int64_t(tiles) * chunks));
  const auto* packed = static_cast<const uint8_t*>(W.packed);
  auto* out = static_cast<bf16*>(scratch);
  const int half = paired_half(W);
  for (int tile0 = 0; tile0 < tiles; tile0 += block) {
    const int n = std::min(block, tiles - tile0);
    const int row0 = tile0 * kUnitRows, block_rows = std::min(W.rows, (tile0 + n) * kUnitRows) - row0;
    const size_t total = size_t(n) * chunks * kLanes;
    const unsigned blocks = unsigned(std::min<size_t>(16384, (total + 255) / 256));
    auto expand = [&](auto kernel) {
      CUDA_CHECK(launch_kernel(kernel, blocks, 256, 0, stream_, packed, W.rows, W.cols, W.group, tile0, n, chunks,
                               unit_bytes, half, block_rows, out));
    };
    switch (W.kind) {
      case WKind::Q4: expand(expand_stream_kernel<WKind::Q4>); break;
      case WKind::Q8: expand(expand_stream_kernel<WKind::Q8>); break;
      case WKind::FP8: expand(expand_stream_kernel<WKind::FP8>); break;
      default: expand(expand_stream_kernel<WKind::Z4>); break;
    }
    if (half == 0) {
      gemm(out, row0, block_rows);
    } else {  // the block's gate rows, then its up rows (row0 and block_rows are multiples of 16)
      gemm(out, row0 / 2, block_rows / 2);
      gemm(out + size_t(block_rows / 2) * W.cols, half + row0 / 2, block_rows / 2);
    }
  }
}

}  // namespace nextn::cuda
