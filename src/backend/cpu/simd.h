// Vectorized inner loops of the CPU backend (Highway, dynamic dispatch to the
// best instruction set of the running machine). Every kernel computes bit for
// bit what its scalar definition in ops.cpp computes on every instruction set:
// a fixed 8-lane accumulator layout, separate multiply and add (no FMA), the
// same final reduction order. So results agree across machines too.
#pragma once
#include <cstdint>

namespace nextn::cpu {

// out[r] = dot(x, rows[r], n) for r < nrows (1..4), each exactly as dot().
// Several rows per call keep independent add chains in flight.
void dot_rows(const float* x, const float* const* rows, int nrows, int64_t n, float* out);

// As dot_rows with bf16 rows (widened exactly to fp32 in registers): half
// the bytes of fp32 weights for the same values and the same sums.
void dot_rows_bf16(const float* x, const uint16_t* const* rows, int nrows, int64_t n, float* out);

// One MLX affine row: out[c] = scales[c / group] * float(q[c]) + biases[c / group],
// q[c] the c-th `bits`-wide field of `words` (little end first). bits 4 or 8;
// group a multiple of 32 / bits.
void dequantize_row(const uint32_t* words, const float* scales, const float* biases, int bits, int group,
                    int64_t cols, float* out);

// acc[i] = acc[i] + p * v[i] for i < n: a rounded product, then the add (no
// FMA), so the bits are the scalar loop's on every target. Attention's
// weighted sum of values.
void add_scaled(float* acc, const float* v, float p, int64_t n);

// Name of the instruction set the dispatcher picked (benchmark records).
const char* simd_target_name();

}  // namespace nextn::cpu
