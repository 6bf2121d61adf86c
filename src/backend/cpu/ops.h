// CPU reference ops, fp32. Every reduction runs in a fixed order that does
// not depend on how many rows (tokens) are processed together, so a row
// computed inside a K-row call equals the same row computed alone, bit for
// bit. These are also the reference the CUDA ops are tested against.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace nextn {
struct WeightRef;
class ThreadPool;
}

namespace nextn::cpu {

// A [rows, cols] weight (out, in): dense fp32, dense bf16 or f16 (kept as
// stored, widened on use: half the memory traffic, the same values), or MLX affine
// packed (bits 4/8, per-group scale and bias) dequantized row by row on use.
class Matrix {
 public:
  static std::shared_ptr<Matrix> load(const WeightRef& w);  // throws Error
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  bool quantized() const { return bits_ != 0; }
  void row(int64_t r, float* out) const;  // dequantized row r
  // Bytes row(r) reads: packed words + fp32 scales and biases, or fp32 values.
  int64_t row_bytes() const;

 private:
  int64_t rows_ = 0, cols_ = 0;
  int bits_ = 0, group_ = 0;
  std::vector<float> dense_;      // fp32 weights
  std::vector<uint16_t> bf16_;    // bf16 weights
  std::vector<uint16_t> f16_;     // f16 weights (IEEE half bits)
  std::vector<uint32_t> packed_;
  std::vector<float> scales_, biases_;
  friend void matmul(const Matrix&, const float*, int, float*, int64_t, int64_t, ThreadPool*, int64_t);
};

// Fixed-order dot product (8 interleaved partial sums, combined pairwise),
// vectorized in simd.cpp with the same arithmetic.
float dot(const float* a, const float* b, int64_t n);

// y[t][o - first] = x[t] . W[o] for t < T and o in [first, first + count).
// x is [T, cols], y is [T, count] (count defaults to all rows). The blocked
// product of gemm.h: with a pool, work items (a panel of weight rows x a
// block of input rows) are split across its threads in chunks of at least
// min_chunk_work multiply-adds; each y element is summed in gemm.h's fixed
// order (FMA, not dot()'s), so the result does not depend on T, the pool,
// its size or the chunking. Defined in gemm.cpp.
void matmul(const Matrix& w, const float* x, int T, float* y, int64_t first = 0, int64_t count = -1,
            ThreadPool* pool = nullptr, int64_t min_chunk_work = int64_t(1) << 16);

// y = x / sqrt(mean(x^2) + eps) * gamma (gamma is the real multiplier).
void rmsnorm(const float* x, const float* gamma, float eps, int64_t n, float* y);
// In place, without weight.
void l2norm(float* x, int64_t n, float eps);

float silu(float x);
float gelu_tanh(float x);  // transformers' gelu_pytorch_tanh (Gemma 4's activation)
float sigmoid(float x);
float softplus(float x);  // torch's: x for x > 20

// Rotate-half RoPE on the first `rotary_dim` dims of one head vector.
void rope(float* head, int rotary_dim, const float* cos, const float* sin);
// cos/sin tables for one position: rotary_dim/2 frequencies each.
void rope_angles(int64_t pos, int rotary_dim, double theta, float* cos, float* sin);

// Index of the max (lowest index among ties; NaN never wins; 0 for an all-NaN row).
int32_t argmax(const float* x, int64_t n);

}  // namespace nextn::cpu
