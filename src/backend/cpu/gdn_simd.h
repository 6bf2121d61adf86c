// The Gated DeltaNet recurrence of one value head for one token, vectorized
// over the value dimension (Highway, dynamic dispatch). Every state element
// and output sees the scalar definition's operations in the scalar order
// (separate multiply and add, no FMA, sums over the key dimension in index
// order), so the bits are those of the loops it replaced on every target.
#pragma once
#include <cstdint>

namespace nextn::cpu {

// S [dk][dv] row-major, updated in place:
//   S      = S * decay
//   mem[j] = sum_i S[i][j] * k[i]            (i ascending)
//   mem[j] = (v[j] - mem[j]) * beta
//   S[i][j] = S[i][j] + k[i] * mem[j]
//   o[j]   = sum_i S[i][j] * q[i]            (i ascending, the updated S)
// mem is dv floats of scratch.
void gdn_head_step(float* S, int dk, int dv, const float* q, const float* k, const float* v, float decay, float beta,
                   float* mem, float* o);

}  // namespace nextn::cpu
