// The streamed quantized matmul: MLX affine q4 / q8 weights (groups of 32,
// 64 or 128, scales and biases exact in bf16), or the transformers formats'
// FP8 (e4m3) and symmetric int4 weights with fp32 scales, times 1..64 bf16
// token rows, on the HBM floor (docs/kernels.md, docs/cuda-backend.md).
//
// What keeps the weight stream at copy speed:
//  - the weights are repacked once, at load, into tiles of 128 rows x 128 k
//    ("stage units"): each unit is one contiguous run of bytes (the packed
//    weights in the order the lanes read them, then the bf16 (scale, bias)
//    pairs), so one bulk copy (`cp.async.bulk`, Hopper's copy engine) moves
//    a unit into shared memory with no registers held;
//  - a producer warp keeps up to kMaxStages units in flight per block on a
//    ring of mbarrier-guarded stages; the activations of the unit's k range
//    ride along as 16-byte cp.async copies into padded rows (one 256-byte
//    bulk copy per token row measured 0.59 against 0.45 ms at W = 32);
//  - persistent blocks walk a fixed list of (tile, split) items, so the
//    stream does not drain between tiles;
//  - 8 consumer warps: 4 row groups of 32 rows x 2 k halves of each unit;
//    dequantization by bit operations straight into mma.sync fragments
//    (q4: (w >> 4e) & 0x000f000f | 0x43004300 is the bf16 pair 128 + q,
//    one bf16x2 subtract and one bf16x2 fma give round_bf16(s * q + b);
//    q8: the byte under an fp32 exponent, fma in fp32, one rounding to bf16);
//  - split-K partials are reduced in split order by the last block to finish
//    a tile (a counter per tile), not by a second launch.
//
// The scaled formats (FP8, Z4) decode their codes to exact bf16 values (fp8:
// the value itself; z4: q - zero) and multiply each group's MMA sum by its fp32
// scale: the scale is never rounded to bf16, and the decoding stays as
// cheap as q4's (docs/formats.md, "Native codecs").
//
// Batch invariance by construction: tokens sit on the MMA's N side; every
// token column runs through the same instructions in the same k order for
// any token count (the units, the k halves, the split boundaries and the
// order of the final sums depend on the matrix shape only); the pipeline
// depth and the grid, which do depend on the token count, change only which
// block computes an item and when, never how.
//
// In-unit k order: lane (g, c) of a consumer warp with k half kh reads the
// 8-element pieces j = 2kh, 2kh + 1 at k = 32j + 8c; elements 4h + {0, 1}
// of a piece fill MMA k slots {2c, 2c + 1} and 4h + {2, 3} the slots
// {2c + 8, 2c + 9} of MMA (j, h), for weights and activations alike.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_stream.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/stream_layout.cuh"

namespace nextn::cuda {
namespace {

using namespace stream;

constexpr int kWarps = 8;           // consumer warps
constexpr int kThreads = (kWarps + 1) * 32;
constexpr int kXStride = 320;       // bytes per activation row in a stage: 256 + 64, conflict-free 16-byte reads
constexpr int kMaxStages = 12;
constexpr int kCounterSlots = 4096; // split-K tile counters at the start of the scratch
constexpr int kWorkers = 132;       // H200 multiprocessors: the split choice's model (a constant: same bits anywhere)

enum Epi : int { kOut = 0, kArgmax = 1 };

struct StreamParams {
  const uint8_t* packed;
  int rows, cols, splits, per;   // per: chunks per split
  int tiles, chunks, gpc, gshift, unit_bytes;
  int stages, stage_smem;
  const bf16* x;
  int ldx, T;
  float* y;
  int ldy, accumulate;
  float* partial;                // [splits][T][rows]
  int* counters;                 // [tiles], zero between calls
  ArgMax* pairs;                 // [T][tiles]
  const int* stop;
  HeadTally tally;               // the LM head's counters (null elsewhere)
};

// ---- mbarrier and bulk copy (sm_90) ----
__device__ __forceinline__ void mbar_init(uint64_t* b, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}
// cp_async_arrive makes `bar` count one arrival once all of this thread's
// earlier cp.async (mma.cuh) have landed.
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
// Named barriers of the consumer warps (the producer warp never joins):
// 1: all 256 consumer threads; 2: the 128 of k half 0; 3: "the k-half
// buffer is read" (k half 0 arrives, k half 1 waits before refilling it).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }
__device__ __forceinline__ void half0_sync() { asm volatile("bar.sync 2, 128;\n" ::: "memory"); }
__device__ __forceinline__ void red_read_arrive() { asm volatile("bar.arrive 3, 256;\n" ::: "memory"); }
__device__ __forceinline__ void red_read_wait() { asm volatile("bar.sync 3, 256;\n" ::: "memory"); }

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

// A consumer lane's byte offsets inside a stage, fixed for the whole
// kernel, so that the loop over stages adds only immediates.
struct LaneOffsets {
  int w, sb, x;
};
template <int FMT>
__device__ __forceinline__ LaneOffsets lane_offsets(const StreamParams& p, int kh, int rg, int lane) {
  constexpr int BITS = fmt_bits(FMT);
  const int g = lane >> 2, c = lane & 3;
  LaneOffsets o;
  o.w = (kh * 4 + rg) * 4 * 32 * lane_bytes(BITS) + lane * lane_bytes(BITS);
  // (row, group) entry of row rg*32 + g, group of piece 2kh
  o.sb = unit_weight_bytes(BITS) + ((rg * 32 + g) * p.gpc + ((64 * kh) >> p.gshift)) * group_entry_bytes(FMT);
  o.x = p.unit_bytes + g * kXStride + 16 * c + 128 * kh;  // token g, piece 2kh
  return o;
}

// One stage unit for one consumer warp: pieces 2kh, 2kh + 1 of rows
// rg * 32 + 16m + 8h + g, all token fragments. GPC: groups per unit row
// (4: g32, the two pieces in different groups; 2: g64; 1: g128). A scaled
// format sums each group's MMAs apart and adds them times the group's scale.
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

template <int FMT, int NF, int EPI, int MINB>
__global__ void __launch_bounds__(kThreads, MINB) stream_kernel(const StreamParams p) {
  constexpr int BITS = fmt_bits(FMT);
  pdl_prologue();
  if constexpr (EPI == kArgmax) {
    if (p.stop != nullptr && *p.stop != 0) return;
  }
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ ArgMax best[4][kMaxRows];
  __shared__ int last;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int i = 0; i < p.stages; ++i) {
      mbar_init(&full[i], 1 + 32);  // the weights' expect_tx + each producer lane's cp.async arrival
      mbar_init(&empty[i], kWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int items = p.tiles * p.splits;

  if (warp == kWarps) {  // producer: the ring of stage units
    int stage = 0;
    uint32_t phase = 0;
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const int tile = item / p.splits, s = item % p.splits;
      const int c0 = s * p.per, c1 = min(p.chunks, c0 + p.per);
      for (int ch = c0; ch < c1; ++ch) {
        mbar_wait(&empty[stage], phase ^ 1u);
        uint8_t* dst = smem + stage * p.stage_smem;
        if (lane == 0) {
          mbar_expect_tx(&full[stage], uint32_t(p.unit_bytes));
          bulk_copy(dst, p.packed + (size_t(tile) * p.chunks + ch) * p.unit_bytes, uint32_t(p.unit_bytes),
                    &full[stage]);
        }
        for (int i = lane; i < p.T * 16; i += 32) {  // 16 pieces of 16 bytes per token row
          const int t = i >> 4, q = i & 15;
          cp_async16(dst + p.unit_bytes + t * kXStride + 16 * q, p.x + size_t(t) * p.ldx + size_t(ch) * kK + 8 * q);
        }
        cp_async_arrive(&full[stage]);
        if (++stage == p.stages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
    return;
  }

  // Consumers: 4 row groups (rg) x 2 k halves (kh).
  const int kh = warp >> 2, rg = warp & 3, g = lane >> 2, c = lane & 3;
  float* red = reinterpret_cast<float*>(smem + p.stages * p.stage_smem);  // [rg][2 * NF * 4][32]
  const LaneOffsets off = lane_offsets<FMT>(p, kh, rg, lane);
  bool tok[NF];  // this lane's token row of fragment f exists
#pragma unroll
  for (int f = 0; f < NF; ++f) tok[f] = 8 * f + g < p.T;
  const int gpc = p.gpc, stage_smem = p.stage_smem, stages = p.stages;
  int stage = 0;
  uint32_t phase = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int tile = item / p.splits, s = item % p.splits;
    const int c0 = s * p.per, c1 = min(p.chunks, c0 + p.per);
    float acc[2][NF][4];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int f = 0; f < NF; ++f) acc[m][f][0] = acc[m][f][1] = acc[m][f][2] = acc[m][f][3] = 0.0f;
    for (int ch = c0; ch < c1; ++ch) {
      mbar_wait(&full[stage], phase);
      const uint8_t* st = smem + stage * stage_smem;
      if constexpr (FMT == kFp8A8) {
        if (gpc == 2)
          unit_compute_a8<NF, 2>(st, off, tok, acc, lane);
        else if (gpc == 1)
          unit_compute_a8<NF, 1>(st, off, tok, acc, lane);
        else
          unit_compute_a8<NF, 4>(st, off, tok, acc, lane);
      } else if (gpc == 2)
        unit_compute<FMT, NF, 2>(st, off, tok, acc);
      else if (gpc == 1)
        unit_compute<FMT, NF, 1>(st, off, tok, acc);
      else
        unit_compute<FMT, NF, 4>(st, off, tok, acc);
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[stage]);
      if (++stage == stages) {
        stage = 0;
        phase ^= 1u;
      }
    }
    if (threadIdx.x == 0 && p.tally.counters != nullptr) {  // the item's units are consumed (head: never split)
      const unsigned long long rows = unsigned(min(kRows, p.rows - tile * kRows));
      tally_block(p.tally, item == 0, p.T, (unsigned long long)(c1 - c0) * unsigned(p.unit_bytes),
                  EPI == kOut ? rows * unsigned(p.T) * 4ull : 0ull);
    }

    // The two k halves: sum = half 0 + half 1.
    const bool first_item = item == int(blockIdx.x), last_item = item + int(gridDim.x) >= items;
    float* my_red = red + rg * (2 * NF * 4) * 32;
    if (kh == 1) {
      if (!first_item) red_read_wait();  // half 0 has read the previous item's sums
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int f = 0; f < NF; ++f)
#pragma unroll
          for (int i = 0; i < 4; ++i) my_red[((m * NF + f) * 4 + i) * 32 + lane] = acc[m][f][i];
    }
    consumers_sync();
    const int row0 = tile * kRows + rg * 32;
    if (kh == 0) {
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int f = 0; f < NF; ++f)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[m][f][i] = add_rn(acc[m][f][i], my_red[((m * NF + f) * 4 + i) * 32 + lane]);
      if (!last_item) red_read_arrive();
      if constexpr (EPI == kArgmax) {
#pragma unroll
        for (int f = 0; f < NF; ++f)
#pragma unroll
          for (int hc = 0; hc < 2; ++hc) {  // token column 8f + 2c + hc
            ArgMax a{-INFINITY, p.rows};
#pragma unroll
            for (int m = 0; m < 2; ++m) {
              const int ra = row0 + 16 * m + g, rb = ra + 8;
              if (ra < p.rows && argmax_better(acc[m][f][hc], ra, a.v, a.i)) a = {acc[m][f][hc], ra};
              if (rb < p.rows && argmax_better(acc[m][f][2 + hc], rb, a.v, a.i)) a = {acc[m][f][2 + hc], rb};
            }
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {  // across g: lanes with the same c
              const float v = __shfl_xor_sync(0xffffffffu, a.v, o);
              const int i = __shfl_xor_sync(0xffffffffu, a.i, o);
              if (argmax_better(v, i, a.v, a.i)) a = {v, i};
            }
            if (g == 0) best[rg][8 * f + 2 * c + hc] = a;
          }
      } else {
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int f = 0; f < NF; ++f)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int r = row0 + 16 * m + g + (i >= 2 ? 8 : 0);
              const int t = 8 * f + 2 * c + (i & 1);
              if (r >= p.rows || t >= p.T) continue;
              if (p.splits > 1) {
                p.partial[(size_t(s) * p.T + t) * p.rows + r] = acc[m][f][i];
              } else {
                float* dst = p.y + size_t(t) * p.ldy + r;
                *dst = p.accumulate ? add_rn(*dst, acc[m][f][i]) : acc[m][f][i];
              }
            }
        if (p.splits > 1) __threadfence();
      }
      if constexpr (EPI == kArgmax) {
        half0_sync();  // best is complete (its readers are k-half-0 threads: no later writer passes them)
        const int t = threadIdx.x;
        if (t < p.T) {
          ArgMax a = best[0][t];
          for (int w = 1; w < 4; ++w)
            if (argmax_better(best[w][t].v, best[w][t].i, a.v, a.i)) a = best[w][t];
          p.pairs[size_t(t) * p.tiles + tile] = a;
        }
      }
    }

    if (EPI == kOut && p.splits > 1) {
      // The last of the tile's splits to finish sums the partials in split order.
      consumers_sync();  // this item's partials are written
      if (threadIdx.x == 0) last = atomicAdd(&p.counters[tile], 1) == p.splits - 1;
      consumers_sync();
      if (last) {
        __threadfence();
        // Each thread sums kSumRows outputs, loading kSumSplits partials of
        // each before adding any: the loads are in flight together (a loop
        // that added as it loaded waited one L2 round trip per partial, which
        // cost gate_up at 32 rows more than its weights). The sums run in
        // split order as before, so the bits are the same.
        constexpr int kSumRows = 2, kSumSplits = 4, kStride = kWarps * 32;
        for (int base = threadIdx.x; base < p.T * kRows; base += kSumRows * kStride) {
          float v[kSumRows], part[kSumRows][kSumSplits];
          for (int k0 = 0; k0 < p.splits; k0 += kSumSplits) {
#pragma unroll
            for (int i = 0; i < kSumRows; ++i) {
              const int idx = base + i * kStride, t = idx / kRows, r = tile * kRows + idx % kRows;
              const bool real = idx < p.T * kRows && r < p.rows;
#pragma unroll
              for (int j = 0; j < kSumSplits; ++j)
                part[i][j] = real && k0 + j < p.splits ? __ldcg(p.partial + (size_t(k0 + j) * p.T + t) * p.rows + r) : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < kSumRows; ++i)
#pragma unroll
              for (int j = 0; j < kSumSplits; ++j) {
                if (k0 + j >= p.splits) break;
                v[i] = k0 + j == 0 ? part[i][j] : add_rn(v[i], part[i][j]);
              }
          }
#pragma unroll
          for (int i = 0; i < kSumRows; ++i) {
            const int idx = base + i * kStride, t = idx / kRows, r = tile * kRows + idx % kRows;
            if (idx >= p.T * kRows || r >= p.rows) continue;
            float* dst = p.y + size_t(t) * p.ldy + r;
            *dst = p.accumulate ? add_rn(*dst, v[i]) : v[i];
          }
        }
        if (threadIdx.x == 0) p.counters[tile] = 0;
      }
    }
  }
}

// ---- host side ----
int g_sms = 0;

using KernelFn = void (*)(StreamParams);

// Blocks per SM the register budget allows (launch bounds), by fragment count.
constexpr int max_per_sm(int nf) { return nf <= 3 ? 3 : nf == 4 ? 2 : 1; }

template <int FMT, int EPI>
KernelFn kernel_for(int nf) {
  switch (nf) {
    case 1: return stream_kernel<FMT, 1, EPI, 3>;
    case 2: return stream_kernel<FMT, 2, EPI, 3>;
    case 3: return stream_kernel<FMT, 3, EPI, 3>;
    case 4: return stream_kernel<FMT, 4, EPI, 2>;
    case 5: return stream_kernel<FMT, 5, EPI, 1>;
    case 6: return stream_kernel<FMT, 6, EPI, 1>;
    case 7: return stream_kernel<FMT, 7, EPI, 1>;
    default: return stream_kernel<FMT, 8, EPI, 1>;
  }
}
template <int FMT>
KernelFn kernel_for(int epi, int nf) {
  return epi == kArgmax ? kernel_for<FMT, kArgmax>(nf) : kernel_for<FMT, kOut>(nf);
}
KernelFn kernel_for(int fmt, int epi, int nf) {
  switch (fmt) {
    case kQ4: return kernel_for<kQ4>(epi, nf);
    case kQ8: return kernel_for<kQ8>(epi, nf);
    case kFp8: return kernel_for<kFp8>(epi, nf);
    case kFp8A8: return kernel_for<kFp8A8>(epi, nf);
    default: return kernel_for<kZ4>(epi, nf);
  }
}

// Dynamic shared memory per SM for the blocks it hosts (228 KB less each
// block's static part and reserve).
constexpr int kSmemPerSM = 222 * 1024;
constexpr int kSmemMaxBlock = 220 * 1024;
// Tuning caps (set_stream_caps: `nextn bench projection` only; speed only,
// the bits do not depend on them): blocks per SM and the ring's depth.
int g_cap_per_sm = 3, g_cap_stages = kMaxStages;

void launch(const DevMatrix& W, int epi, StreamParams p, cudaStream_t s) {
  if (g_sms == 0) init_kernels();
  const uintptr_t xa = reinterpret_cast<uintptr_t>(p.x);
  if (xa % 16 != 0 || p.ldx % 8 != 0)
    fail("matmul: activations must be 16-byte aligned with a row stride that is a multiple of 8 (got stride {})",
         p.ldx);
  const int fmt = compute_fmt_of(W), nf = ceil_div(p.T, 8);
  p.tiles = ceil_div(W.rows, kRows);
  p.chunks = W.cols / kK;
  p.gpc = kK / W.group;
  p.gshift = W.group == 32 ? 5 : W.group == 64 ? 6 : 7;
  p.unit_bytes = unit_bytes_of(W);
  p.per = ceil_div(p.chunks, p.splits);
  p.stage_smem = (p.unit_bytes + p.T * kXStride + 127) / 128 * 128;
  const int red = 4 * 2 * nf * 4 * 32 * 4;
  // As many blocks per SM as registers allow while each keeps four stages
  // (more warps to dequantize); else fewer blocks with deeper rings.
  int per_sm = std::min(max_per_sm(nf), g_cap_per_sm), budget = 0;
  for (; per_sm > 1; --per_sm)
    if (4 * p.stage_smem + red <= kSmemPerSM / per_sm - 2048) break;
  budget = per_sm == 1 ? kSmemMaxBlock : kSmemPerSM / per_sm - 2048;
  p.stages = std::min(g_cap_stages, (budget - red) / p.stage_smem);
  if (p.stages < 2) fail("matmul: stage of {} bytes does not fit in shared memory", p.stage_smem);
  const int smem = p.stages * p.stage_smem + red;
  const int items = p.tiles * p.splits;
  const int grid = std::min(items, g_sms * per_sm);
  CUDA_CHECK(launch_kernel(kernel_for(fmt, epi, nf), grid, kThreads, size_t(smem), s, p));
  CUDA_CHECK_LAUNCH("stream_kernel");
}

StreamParams base_params(const DevMatrix& W, const void* x, int T, int ldx) {
  if (T < 1 || T > kMaxRows) fail("matmul: {} rows outside [1, {}]", T, kMaxRows);
  StreamParams p{};
  p.packed = static_cast<const uint8_t*>(W.packed);
  p.rows = W.rows;
  p.cols = W.cols;
  p.splits = W.splits;
  p.x = static_cast<const bf16*>(x);
  p.ldx = ldx;
  p.T = T;
  return p;
}

}  // namespace

void init_kernels() {
  if (g_sms != 0) return;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev));
  for (int fmt : {kQ4, kQ8, kFp8, kZ4, kFp8A8})
    for (int epi : {int(kOut), int(kArgmax)})
      for (int nf = 1; nf <= 8; ++nf)
        CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel_for(fmt, epi, nf)),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemMaxBlock));
}

void set_stream_caps(int per_sm, int stages) {
  g_cap_per_sm = per_sm > 0 ? std::clamp(per_sm, 1, 3) : 3;
  g_cap_stages = stages > 0 ? std::clamp(stages, 2, kMaxStages) : kMaxStages;
}

int stream_splits(int rows, int cols) {
  // Minimise the chunks the busiest multiprocessor streams (items are dealt
  // round robin), charging each item of a split matrix four chunks for its
  // partial sums, the reduction and the barriers. Fitted to the 27B trunk
  // shapes at 1 to 32 rows (docs/benchmark_results/trunk-h200-2026-12-03.md):
  // the partials grow with the rows, and gate_up (272 tiles x 40 chunks)
  // took 72 us unsplit against 95 us in 4 splits at 32 rows, 44 against 42
  // at one row; down and o (40 tiles) stay split.
  const int tiles = ceil_div(rows, kRows), chunks = cols / kK;
  int best = 1;
  double best_cost = double(ceil_div(tiles, kWorkers)) * chunks;
  for (int s = 2; s <= std::min(32, chunks); ++s) {
    const int per = ceil_div(chunks, s);
    if (ceil_div(chunks, per) != s) continue;  // every split non-empty, no duplicate shapes
    const double cost = double(ceil_div(tiles * s, kWorkers)) * (per + 4.0);
    if (cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

int64_t stream_counter_floats() { return kCounterSlots; }

void stream_matmul(const DevMatrix& W, const void* x, int T, int ldx, float* y, int ldy, bool accumulate,
                   float* scratch, cudaStream_t s, const HeadTally& tally) {
  StreamParams p = base_params(W, x, T, ldx);
  p.tally = tally;
  p.y = y;
  p.ldy = ldy;
  p.accumulate = accumulate ? 1 : 0;
  if (p.splits > 1) {
    if (scratch == nullptr) fail("matmul: split-K matrix without scratch");
    if (stream_tiles(W) > kCounterSlots) fail("matmul: {} tiles exceed the split-K counters", stream_tiles(W));
    p.counters = reinterpret_cast<int*>(scratch);
    p.partial = scratch + kCounterSlots;
  }
  launch(W, kOut, p, s);
}

void stream_matmul_argmax(const DevMatrix& W, const void* x, int T, int ldx, void* pairs, const int* stop,
                          cudaStream_t s, const HeadTally& tally) {
  StreamParams p = base_params(W, x, T, ldx);
  p.tally = tally;
  p.splits = 1;
  p.pairs = static_cast<ArgMax*>(pairs);
  p.stop = stop;
  launch(W, kArgmax, p, s);
}

}  // namespace nextn::cuda
