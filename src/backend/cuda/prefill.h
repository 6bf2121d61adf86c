// Prefill matmuls: a prompt chunk of many token rows (up to kPrefillRows)
// against one weight matrix, on cuBLAS's bf16 tensor-core GEMM. Quantized
// matrices are expanded to bf16 (round_bf16(scale * q + bias), as the
// streamed kernel dequantizes) in blocks of 128-row tiles of at most 64 MiB,
// one GEMM per block, so the scratch stays small next to the weights.
//
// Exactness: this path is not batch-invariant with the decode kernels (other
// summation order), so a prompt's caches differ in the last bits from what
// the 64-row decode kernels would give. Greedy and speculative decoding both
// prefill through it, so their outputs stay equal; forwards of at most
// kMaxRows tokens (decode steps, verify blocks, the last chunk of a prompt)
// never take it. Host-callable; everything goes to the given stream.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace nextn::cuda {

constexpr int kPrefillRows = 512;  // token rows per prefill chunk

class PrefillGemm {
 public:
  explicit PrefillGemm(cudaStream_t s);  // throws Error when cuBLAS cannot start
  ~PrefillGemm();
  PrefillGemm(const PrefillGemm&) = delete;
  PrefillGemm& operator=(const PrefillGemm&) = delete;

  // Dense bf16, or quantized in the streamed layout (DevMatrix::packed).
  static bool supported(const DevMatrix& W);
  // bf16 scratch bytes `matmul` needs for W (0: read in place).
  static int64_t scratch_bytes(const DevMatrix& W);

  // Y[t][n] (+)= sum_k X[t][k] * W[n][k] for t < T; X bf16 [T][ldx], Y fp32
  // [T][ldy]; `scratch` holds scratch_bytes(W) bytes.
  void matmul(const DevMatrix& W, const void* X, int T, int ldx, float* Y, int ldy, bool accumulate, void* scratch);

 private:
  void* handle_ = nullptr;  // cublasHandle_t
  cudaStream_t stream_;
};

}  // namespace nextn::cuda
