// The CPU matrix product for one row or many (decode, verify rows, prefill,
// batched serving): cpu::matmul (ops.h) cuts the output into work items of
// one weight panel x one block of input rows, which the thread pool runs;
// each item runs register tiles over the panel (gemm_tiles.cpp).
//
// Summation order of every output element y = x . w over n columns, fixed
// for a given machine: L = gemm_sum_lanes() partial sums (8 on AVX2 and
// 128-bit targets, 16 on AVX-512), lane l takes columns i with i mod L = l
// (i below n rounded down to L) by multiply-add, the tail columns go into
// lanes 0.. by multiply-add, and the lanes are combined by
// halving (lane l += lane l + L/2 for l < L/2, then L/4, ... to lane 0). Neither the tile, the panel, the
// row count of the call nor the thread changes it: speculative == greedy
// and batched == solo, bit for bit. It differs from cpu::dot (no FMA, always
// 8 lanes) and between instruction sets (docs/cpu-backend.md). The
// multiply-add is fused (one rounding) where the instruction set has FMA
// (AVX2, AVX-512, NEON), else a rounded product then the add (SSE4).
#pragma once
#include <cstdint>

namespace nextn::cpu {

// y[t * ldy + r] = x[t] . w[r] in the order above, for t < T and r < rows:
// fp32 weights, or bf16 weights widened in registers (the same bits as the
// fp32 call on the widened rows).
void gemm_block(const float* x, int64_t ldx, int T, const float* w, int64_t ldw, int rows, int64_t n, float* y,
                int64_t ldy);
void gemm_block(const float* x, int64_t ldx, int T, const uint16_t* w, int64_t ldw, int rows, int64_t n, float* y,
                int64_t ldy);
// As gemm_block with f16 weights (IEEE half bits), widened exactly in registers.
void gemm_block_f16(const float* x, int64_t ldx, int T, const uint16_t* w, int64_t ldw, int rows, int64_t n,
                    float* y, int64_t ldy);

// L of the summation order on this machine (the dispatched instruction set),
// and whether its multiply-add is fused.
int gemm_sum_lanes();
bool gemm_uses_fma();

// Work item shape of cpu::matmul: weight rows per panel (a bf16 panel of a
// few thousand columns stays in L1/L2 while every input block passes over
// it) and input rows per block (bounds the fp32 inputs one item reads).
inline constexpr int kPanelRows = 16;
inline constexpr int kInputBlockRows = 64;

}  // namespace nextn::cpu
