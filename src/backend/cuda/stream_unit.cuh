// The streamed matmul's work on one stage unit (matmul_stream.cu runs the
// pipeline around it): each weight format's codes decoded into mma.sync
// fragments, and one consumer warp's MMAs over one unit, for the bf16 kinds
// and for W8A8. The in-unit k order and the lane layout: matmul_stream.cu's
// header comment.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/mma.cuh"
#include "backend/cuda/stream_layout.cuh"

namespace nextn::cuda::stream {

constexpr int kXStride = 320;  // bytes per activation row in a stage: 256 + 64, conflict-free 16-byte reads

// A consumer lane's byte offsets inside a stage, fixed for the whole
// kernel, so that the loop over stages adds only immediates.
struct LaneOffsets {
  int w, sb, x;
};

// ---- dequantization ----
// A q4 piece (8 nibbles, element e at bit q4_bit(e)) -> 4 bf16 pairs of
// round_bf16(s * q + b); sb = bf16 scale | bf16 bias << 16. The scale and
// bias reach the bf16x2 fma as half-broadcast operands (no byte permutes).
__device__ __forceinline__ uint4 dequant_q4(uint32_t w, uint32_t sb) {
  constexpr uint32_t kMagic = 0x43004300u;  // bf16 pair (128, 128)
  const __nv_bfloat162 sbv = *reinterpret_cast<const __nv_bfloat162*>(&sb);
  const __nv_bfloat162 s2 = __low2bfloat162(sbv), b2 = __high2bfloat162(sbv);
  uint32_t r[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t v = bf2_sub(lop3_and_or(w >> (4 * e), 0x000f000fu, kMagic), kMagic);
    const __nv_bfloat162 d = __hfma2(*reinterpret_cast<const __nv_bfloat162*>(&v), s2, b2);
    r[e] = *reinterpret_cast<const uint32_t*>(&d);
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}
// Byte k of w as an exact float: under the exponent of 2^23, minus 2^23.
template <int K>
__device__ __forceinline__ float q8_byte(uint32_t w) {
  return __uint_as_float(__byte_perm(w, 0x4B00u, 0x5440u + K)) - 8388608.0f;
}
// A q8 piece (8 bytes in element order) -> 4 bf16 pairs of round_bf16(s * q + b).
__device__ __forceinline__ uint4 dequant_q8(uint32_t w0, uint32_t w1, uint32_t sb) {
  const float s = __uint_as_float(sb << 16), b = __uint_as_float(sb & 0xffff0000u);
  return make_uint4(pack_bf16(fmaf(s, q8_byte<0>(w0), b), fmaf(s, q8_byte<1>(w0), b)),
                    pack_bf16(fmaf(s, q8_byte<2>(w0), b), fmaf(s, q8_byte<3>(w0), b)),
                    pack_bf16(fmaf(s, q8_byte<0>(w1), b), fmaf(s, q8_byte<1>(w1), b)),
                    pack_bf16(fmaf(s, q8_byte<2>(w1), b), fmaf(s, q8_byte<3>(w1), b)));
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
// Bytes I and J of w, e4m3 codes, -> the bf16 pair of their exact values.
// prmt puts each byte under its sign replicated (byte << 8 | byte); shifted
// by 4 and masked, the sign lands on bit 15 and the 7 exponent and mantissa
// bits on bits 10..4: the bf16 of the value times 2^-120 (e4m3's subnormals
// too), which one exact multiply by 2^120 corrects.
template <int I, int J>
__device__ __forceinline__ uint32_t fp8_pair(uint32_t w) {
  constexpr uint32_t kSel = I | ((8 | I) << 4) | (J << 8) | ((8 | J) << 12);
  const uint32_t v = (prmt(w, 0u, kSel) << 4) & 0x87f087f0u;
  constexpr uint32_t kTwo120 = 0x7b807b80u;  // bf16 pair (2^120, 2^120)
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&v),
                                   *reinterpret_cast<const __nv_bfloat162*>(&kTwo120));
  return *reinterpret_cast<const uint32_t*>(&r);
}
// An fp8 piece (8 bytes in element order) -> 4 bf16 pairs of the exact values.
__device__ __forceinline__ uint4 decode_fp8(uint32_t w0, uint32_t w1) {
  return make_uint4(fp8_pair<0, 1>(w0), fp8_pair<2, 3>(w0), fp8_pair<0, 1>(w1), fp8_pair<2, 3>(w1));
}
// A z4 piece (8 nibbles, element e at bit q4_bit(e)) -> 4 bf16 pairs of
// q - zero: (128 + q) - (128 + zero), exact; zp is the pair (128 + zero) x 2.
__device__ __forceinline__ uint4 decode_z4(uint32_t w, uint32_t zp) {
  constexpr uint32_t kMagic = 0x43004300u;  // bf16 pair (128, 128)
  uint32_t r[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) r[e] = bf2_sub(lop3_and_or(w >> (4 * e), 0x000f000fu, kMagic), zp);
  return make_uint4(r[0], r[1], r[2], r[3]);
}

// One stage unit for one consumer warp: pieces 2kh, 2kh + 1 of rows
// rg * 32 + 16m + 8h + g, all token fragments. GPC: groups per unit row
// (4: g32, the two pieces in different groups; 2: g64; 1: g128). A scaled
// format sums each group's MMAs apart and adds them times the group's scale.
// This lane's activations of the unit (token g, piece 2kh) sit in the
// stage at o.x, token fragment f at o.x + 8 f kXStride.
template <int FMT, int NF, int GPC>
__device__ __forceinline__ void unit_compute(const uint8_t* st, const LaneOffsets& o, const bool (&tok)[NF],
                                             float (&acc)[2][NF][4]) {
  constexpr int BITS = fmt_bits(FMT);
  constexpr bool kScaled = fmt_scaled(FMT);
  constexpr int LB = lane_bytes(BITS);
  constexpr int EW = group_entry_bytes(FMT) / 4;  // words per (row, group) entry
  uint32_t wq[2][2][LB / 4], sbw[2][2][2], zpw[2][2][2];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* wp = st + o.w + (m * 2 + h) * 32 * LB;
      if constexpr (BITS == 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(wp);
        wq[m][h][0] = v.x;
        wq[m][h][1] = v.y;
      } else {
        const uint4 v = *reinterpret_cast<const uint4*>(wp);
        wq[m][h][0] = v.x;
        wq[m][h][1] = v.y;
        wq[m][h][2] = v.z;
        wq[m][h][3] = v.w;
      }
      const uint32_t* sp = reinterpret_cast<const uint32_t*>(st + o.sb + (16 * m + 8 * h) * GPC * 4 * EW);
      sbw[m][h][0] = sp[0];
      sbw[m][h][1] = GPC == 4 ? sp[EW] : sbw[m][h][0];
      if constexpr (FMT == kZ4) {
        zpw[m][h][0] = sp[1];
        zpw[m][h][1] = GPC == 4 ? sp[3] : zpw[m][h][0];
      }
    }
  float part[2][NF][4];  // a scaled format's group sums
#pragma unroll
  for (int jj = 0; jj < 2; ++jj) {
    if constexpr (kScaled) {
      if (jj == 0 || GPC == 4) {
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int f = 0; f < NF; ++f) part[m][f][0] = part[m][f][1] = part[m][f][2] = part[m][f][3] = 0.0f;
      }
    }
    float(&sum)[2][NF][4] = kScaled ? part : acc;
    uint4 a[2][2];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (FMT == kQ4)
          a[m][h] = dequant_q4(wq[m][h][jj], sbw[m][h][jj]);
        else if constexpr (FMT == kQ8)
          a[m][h] = dequant_q8(wq[m][h][2 * jj], wq[m][h][2 * jj + 1], sbw[m][h][jj]);
        else if constexpr (FMT == kFp8)
          a[m][h] = decode_fp8(wq[m][h][2 * jj], wq[m][h][2 * jj + 1]);
        else
          a[m][h] = decode_z4(wq[m][h][jj], zpw[m][h][jj]);
      }
    uint4 b[NF];
#pragma unroll
    for (int f = 0; f < NF; ++f) {
      b[f] = make_uint4(0, 0, 0, 0);
      if (tok[f]) b[f] = *reinterpret_cast<const uint4*>(st + o.x + 8 * f * kXStride + 64 * jj);
    }
    // Both k halves of the piece, each over every (m, f): 2 NF independent
    // MMAs between two that share an accumulator. Per accumulator the order
    // is fixed: piece 2kh, then 2kh + 1; first half, then second.
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int m = 0; m < 2; ++m) mma_bf16(sum[m][f], a[m][0].x, a[m][1].x, a[m][0].y, a[m][1].y, b[f].x, b[f].y);
#pragma unroll
    for (int f = 0; f < NF; ++f)
#pragma unroll
      for (int m = 0; m < 2; ++m) mma_bf16(sum[m][f], a[m][0].z, a[m][1].z, a[m][0].w, a[m][1].w, b[f].z, b[f].w);
    if constexpr (kScaled) {
      if (jj == 1 || GPC == 4) {  // the group's sums are complete: acc += scale * sum (rows g: h 0, g + 8: h 1)
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int f = 0; f < NF; ++f)
#pragma unroll
            for (int i = 0; i < 4; ++i)
              acc[m][f][i] = fmaf(__uint_as_float(sbw[m][i >> 1][jj]), part[m][f][i], acc[m][f][i]);
      }
    }
  }
}

// W8A8 (kFp8A8): the same unit, weights as their e4m3 bytes and each
// token's activations over the warp's 64 columns of the unit (its k half)
// quantized to e4m3 with scale a / 448 (a: the largest |x| of the 64), one
// FP8 MMA per piece; each group's sum is multiplied by the weight scale and
// the token's activation scale. Groups of 64, not the releases' 128: each k
// half quantizes alone, with no exchange between warps (a barrier per unit
// measured 1.7x W8A16's time at one row). A token's codes and scales depend
// on its own row only: batch invariant as the bf16 kinds.
template <int NF, int GPC>
__device__ __forceinline__ void unit_compute_a8(const uint8_t* st, const LaneOffsets& o, const bool (&tok)[NF],
                                                float (&acc)[2][NF][4], int lane) {
  const int c = lane & 3;
  uint32_t wq[2][2][4], ws[2][2][2];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 v = *reinterpret_cast<const uint4*>(st + o.w + (m * 2 + h) * 32 * lane_bytes(8));
      wq[m][h][0] = v.x;
      wq[m][h][1] = v.y;
      wq[m][h][2] = v.z;
      wq[m][h][3] = v.w;
      const uint32_t* sp = reinterpret_cast<const uint32_t*>(st + o.sb + (16 * m + 8 * h) * GPC * 4);
      ws[m][h][0] = sp[0];
      ws[m][h][1] = GPC == 4 ? sp[1] : ws[m][h][0];
    }
  auto load = [&](int f, int jj) {
    return tok[f] ? *reinterpret_cast<const uint4*>(st + o.x + 8 * f * kXStride + 64 * jj) : make_uint4(0, 0, 0, 0);
  };
#pragma unroll
  for (int f = 0; f < NF; ++f) {
    // The largest |x| of token 8f + g over the warp's 64 columns (pieces
    // 2kh, 2kh + 1 of the four lanes c; bf16 abs and max are exact).
    uint32_t m2 = 0;
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const uint4 v = load(f, jj);
      m2 = bf2_max(bf2_max(m2, v.x & 0x7fff7fffu), bf2_max(v.y & 0x7fff7fffu, bf2_max(v.z & 0x7fff7fffu, v.w & 0x7fff7fffu)));
    }
    float a = fmaxf(__uint_as_float(m2 << 16), __uint_as_float(m2 & 0xffff0000u));
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 1));
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 2));
    const float inv = a > 0.0f ? 448.0f * __frcp_rn(a) : 0.0f;  // x * inv <= 448 up to rounding: cvt saturates
    // The scales of this lane's accumulator columns: tokens 8f + 2c and 8f + 2c + 1.
    const float scale = a * (1.0f / 448.0f);
    const float xs0 = __shfl_sync(0xffffffffu, scale, 8 * c), xs1 = __shfl_sync(0xffffffffu, scale, 8 * c + 4);
    float part[2][4];
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const uint4 v = load(f, jj);
      auto lo = [&](uint32_t w) { return __uint_as_float(w << 16) * inv; };
      auto hi = [&](uint32_t w) { return __uint_as_float(w & 0xffff0000u) * inv; };
      const uint32_t b0 = pack_e4m3x4(lo(v.x), hi(v.x), lo(v.y), hi(v.y));
      const uint32_t b1 = pack_e4m3x4(lo(v.z), hi(v.z), lo(v.w), hi(v.w));
      if (jj == 0 || GPC == 4) {
#pragma unroll
        for (int m = 0; m < 2; ++m) part[m][0] = part[m][1] = part[m][2] = part[m][3] = 0.0f;
      }
#pragma unroll
      for (int m = 0; m < 2; ++m)
        mma_fp8(part[m], wq[m][0][2 * jj], wq[m][1][2 * jj], wq[m][0][2 * jj + 1], wq[m][1][2 * jj + 1], b0, b1);
      if (jj == 1 || GPC == 4) {  // acc += weight scale * (activation scale * sum)
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            acc[m][f][i] = fmaf(__uint_as_float(ws[m][i >> 1][jj]), part[m][i] * ((i & 1) ? xs1 : xs0), acc[m][f][i]);
      }
    }
  }
}

}  // namespace nextn::cuda::stream
