// The CPU matrix product for one row or many (decode, verify rows, prefill,
// batched serving): cpu::matmul (ops.h) cuts the output into work items of
// one weight panel x one block of input rows, which the thread pool runs;
// each item runs register tiles over the panel (gemm_tiles.cpp).
//
// Every output element is computed by exactly cpu::dot's arithmetic over its
// input row and (widened or dequantized) weight row, whatever the tile, the
// panel, the row count of the call or the thread: speculative == greedy and
// batched == solo, bit for bit, and the CUDA fp32 mode can follow the same
// order.
#pragma once
#include <cstdint>

namespace nextn::cpu {

// y[t * ldy + r] = dot(x + t * ldx, w + r * ldw, n) for t < T, r < rows:
// fp32 weights, or bf16 weights widened in registers.
void gemm_block(const float* x, int64_t ldx, int T, const float* w, int64_t ldw, int rows, int64_t n, float* y,
                int64_t ldy);
void gemm_block(const float* x, int64_t ldx, int T, const uint16_t* w, int64_t ldw, int rows, int64_t n, float* y,
                int64_t ldy);

// Work item shape of cpu::matmul: weight rows per panel (a bf16 panel of a
// few thousand columns stays in L1/L2 while every input block passes over
// it) and input rows per block (bounds the fp32 inputs one item reads).
inline constexpr int kPanelRows = 16;
inline constexpr int kInputBlockRows = 64;

}  // namespace nextn::cpu
