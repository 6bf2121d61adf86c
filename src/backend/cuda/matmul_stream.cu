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
//    a tile (a counter per tile), not by a second launch;
//  - at decode and verify widths (T <= kFoldedRows) the op before a
//    projection is folded in (stream_fold.cuh): the RMSNorm before qkv, GDN
//    in and gate_up, the SwiGLU before down. Instead of copying each
//    stage's bf16 activation slice, the producer computes it from the fp32
//    rows with the replaced kernel's arithmetic (the same bits); for the
//    norm, the consumers first compute each row's multiplier. This saves
//    a launch and its gap, 192 of them per 27B decode token;
//  - a SwiGLU-paired gate_up (DevMatrix::swiglu_pairs: gate and up rows
//    interleaved in the layout, so one lane holds gate j and up j) writes
//    bf16(silu(gate) * up) from its epilogue at those widths (kSwiglu).
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
#include "backend/cuda/stream_fold.cuh"
#include "backend/cuda/stream_item.cuh"
#include "backend/cuda/stream_ring.cuh"
#include "backend/cuda/stream_layout.cuh"
#include "backend/cuda/stream_unit.cuh"

namespace nextn::cuda {
namespace {

using namespace stream;

constexpr int kMaxStages = 12;
constexpr int kCounterSlots = 4096; // split-K tile counters at the start of the scratch
constexpr int kWorkers = 132;       // H200 multiprocessors: the split choice's model (a constant: same bits anywhere)

// kSwiglu: a SwiGLU-paired gate_up writes bf16(silu(gate) * up) (stream_item.cuh).
enum Epi : int { kOut = 0, kArgmax = 1, kSwiglu = 2 };
static_assert(kFoldedRows <= kMaxFoldRows, "the folds run one token fragment");

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
  int half;                      // a SwiGLU-paired matrix's intermediate size, else 0
  bf16* act;                     // kSwiglu: [T][ld_act] bf16, columns [0, rows / 2)
  int ld_act;
  int* counters;                 // [tiles], zero between calls
  ArgMax* pairs;                 // [T][tiles]
  const int* stop;
  HeadTally tally;               // the LM head's counters (null elsewhere)
  FoldArgs fold;                 // a fold's source (x unused)
};

// Registers per thread when MINB blocks of kThreads share a multiprocessor.
// Its 64K registers are four sub-partitions of 16K, and one sub-partition
// holds ceil(MINB * 9 / 4) of the blocks' warps; the allocator hands out
// registers in units of 8 per thread. __launch_bounds__'s minimum-blocks
// form let ptxas stop at 64 for the one-fragment kernels (3 blocks: 72),
// which then recomputed each lane's stage offsets and barrier addresses in
// every unit (cuobjdump: the q4 one-row unit loop 555 -> 484 instructions,
// 215 -> 181 on the group-64 path). A cap past the sub-partitions' (224 at
// one block) fails the launch: too many resources requested.
constexpr int regs_for(int blocks) {
  const int warps_per_partition = (blocks * (kThreads / 32) + 3) / 4;
  const int regs = 16384 / (warps_per_partition * 32) / 8 * 8;
  return regs > 255 ? 255 : regs;
}
static_assert(regs_for(3) == 72 && regs_for(2) == 96 && regs_for(1) == 168, "the register caps");

template <int FMT, int NF, int EPI, int MINB, int FOLD = kNoFold>
__global__ void __launch_bounds__(kThreads) __maxnreg__(regs_for(MINB)) stream_kernel(const StreamParams p) {
  constexpr int BITS = fmt_bits(FMT);
  pdl_prologue();
  if constexpr (EPI == kArgmax) {
    if (p.stop != nullptr && *p.stop != 0) return;
  }
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ ArgMax best[4][kMaxRows];
  __shared__ int last;
  __shared__ float fold_scratch[kMaxFoldRows * kWarps];
  __shared__ float row_inv[kMaxFoldRows];  // the folded norm's row multipliers
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  ring_init(full, empty, p.stages, kWarps);
  __syncthreads();
  const int items = p.tiles * p.splits;

  if (warp == kWarps) {  // producer: the ring of stage units
    int stage = 0;
    uint32_t phase = 0;
    bool have_inverses = FOLD != kFoldNorm;
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const int tile = item / p.splits, s = item % p.splits;
      const int c0 = s * p.per, c1 = min(p.chunks, c0 + p.per);
      for (int ch = c0; ch < c1; ++ch) {
        constexpr int kSlice = slice_rows<FOLD>();
        SliceRegs<kSlice> slice;  // a fold's first rows, in flight while the stage drains
        if constexpr (FOLD != kNoFold) slice_load<FOLD>(p.fold, p.T, 0, ch * kK, lane, slice);
        mbar_wait(&empty[stage], phase ^ 1u);
        uint8_t* dst = smem + stage * p.stage_smem;
        if (lane == 0) {
          mbar_expect_tx(&full[stage], uint32_t(p.unit_bytes));
          bulk_copy(dst, p.packed + (size_t(tile) * p.chunks + ch) * p.unit_bytes, uint32_t(p.unit_bytes),
                    &full[stage]);
        }
        if constexpr (FOLD == kNoFold) {
          for (int i = lane; i < p.T * 16; i += 32) {  // 16 pieces of 16 bytes per token row
            const int t = i >> 4, q = i & 15;
            cp_async16(dst + p.unit_bytes + t * kXStride + 16 * q, p.x + size_t(t) * p.ldx + size_t(ch) * kK + 8 * q);
          }
          cp_async_arrive(&full[stage]);
        } else {
          if (!have_inverses) {
            __syncwarp();
            inverses_wait();
            have_inverses = true;
          }
          slice_store<FOLD>(slice, p.T, 0, row_inv, dst + p.unit_bytes, kXStride, lane);
          for (int t0 = kSlice; t0 < p.T; t0 += kSlice) {
            slice_load<FOLD>(p.fold, p.T, t0, ch * kK, lane, slice);
            slice_store<FOLD>(slice, p.T, t0, row_inv, dst + p.unit_bytes, kXStride, lane);
          }
          mbar_arrive(&full[stage]);
        }
        if (++stage == p.stages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
    if (!have_inverses) {  // (no stage: cannot happen, items have chunks; the barrier must still meet)
      __syncwarp();
      inverses_wait();
    }
    return;
  }

  // Consumers: 4 row groups (rg) x 2 k halves (kh).
  const int kh = warp >> 2, rg = warp & 3, g = lane >> 2, c = lane & 3;
  float* red = reinterpret_cast<float*>(smem + p.stages * p.stage_smem);  // [rg][2 * NF * 4][32]
  const LaneOffsets off = lane_offsets<FMT>(p.gpc, p.gshift, p.unit_bytes, kh, rg, lane);
  bool tok[NF];  // this lane's token row of fragment f exists
#pragma unroll
  for (int f = 0; f < NF; ++f) tok[f] = 8 * f + g < p.T;
  if constexpr (FOLD == kFoldNorm) fold_inverses(p.fold, p.T, p.cols, row_inv, fold_scratch);
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
    consume_units<FMT, NF>(smem, full, empty, stage_smem, stages, stage, phase, c0, c1, gpc, off, tok, acc, lane);
    if (threadIdx.x == 0 && p.tally.counters != nullptr) {  // the item's units are consumed (head: never split)
      const unsigned long long rows = unsigned(min(kRows, p.rows - tile * kRows));
      tally_block(p.tally, item == 0, p.T, (unsigned long long)(c1 - c0) * unsigned(p.unit_bytes),
                  EPI == kOut ? rows * unsigned(p.T) * 4ull : 0ull);
    }

    const bool first_item = item == int(blockIdx.x), last_item = item + int(gridDim.x) >= items;
    sum_k_halves<NF>(acc, red, rg, kh, lane, first_item, last_item);
    const int row0 = tile * kRows + rg * 32;
    const ItemOutput out{p.y, p.ldy, p.accumulate, p.partial, p.rows, p.T, p.splits, p.half};
    if (kh == 0) {
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
      } else if constexpr (EPI == kSwiglu) {
        store_swiglu_item<NF>(p.act, p.ld_act, p.rows, p.T, acc, row0, lane);
      } else {
        store_item<NF>(out, acc, row0, s, lane);
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

    if (EPI == kOut && p.splits > 1) reduce_splits(out, p.counters, tile, &last);
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
// One token fragment (T <= kFoldedRows): the folds' kernels (outputs), and
// the SwiGLU epilogue's, with the norm folded or not.
template <int EPI, int FOLD>
KernelFn one_fragment_kernel(int fmt) {
  switch (fmt) {
    case kQ4: return stream_kernel<kQ4, 1, EPI, 3, FOLD>;
    case kQ8: return stream_kernel<kQ8, 1, EPI, 3, FOLD>;
    case kFp8: return stream_kernel<kFp8, 1, EPI, 3, FOLD>;
    default: return stream_kernel<kZ4, 1, EPI, 3, FOLD>;
  }
}
KernelFn fold_kernel_for(int fold, int fmt) {
  return fold == kFoldNorm ? one_fragment_kernel<kOut, kFoldNorm>(fmt) : one_fragment_kernel<kOut, kFoldSwiglu>(fmt);
}
KernelFn swiglu_kernel_for(int fold, int fmt) {
  return fold == kFoldNorm ? one_fragment_kernel<kSwiglu, kFoldNorm>(fmt) : one_fragment_kernel<kSwiglu, kNoFold>(fmt);
}

// Dynamic shared memory per SM for the blocks it hosts (228 KB less each
// block's static part and reserve).
constexpr int kSmemPerSM = 222 * 1024;
constexpr int kSmemMaxBlock = kStreamSmemMaxBlock;
// Tuning caps (set_stream_caps: `nextn bench projection` only; speed only,
// the bits do not depend on them): blocks per SM and the ring's depth.
int g_cap_per_sm = 3, g_cap_stages = kMaxStages;

// Shared-memory sizes that launch() lays out: a stage (a unit, then the
// activation rows of its k range, copied or computed by a fold) and the
// k-half reduction buffer.
int stage_bytes(const DevMatrix& W, int T) { return (unit_bytes_of(W) + T * kXStride + 127) / 128 * 128; }
constexpr int reduction_bytes(int nf) { return 4 * 2 * nf * 4 * 32 * 4; }

void launch(const DevMatrix& W, int epi, int fold, StreamParams p, cudaStream_t s) {
  if (g_sms == 0) init_kernels();
  const uintptr_t xa = reinterpret_cast<uintptr_t>(p.x);
  if (fold == kNoFold && (xa % 16 != 0 || p.ldx % 8 != 0))
    fail("matmul: activations must be 16-byte aligned with a row stride that is a multiple of 8 (got stride {})",
         p.ldx);
  const int fmt = compute_fmt_of(W), nf = ceil_div(p.T, 8);
  p.tiles = ceil_div(W.rows, kRows);
  p.chunks = W.cols / kK;
  p.gpc = kK / W.group;
  p.gshift = W.group == 32 ? 5 : W.group == 64 ? 6 : 7;
  p.unit_bytes = unit_bytes_of(W);
  p.per = ceil_div(p.chunks, p.splits);
  const StreamRing ring = stream_ring(W, p.T);
  p.stage_smem = ring.stage_smem;
  p.stages = ring.stages;
  p.half = paired_half(W);
  if (epi == kSwiglu && (p.half == 0 || nf != 1)) fail("matmul: SwiGLU epilogue on an unpaired matrix or past {} rows", kFoldedRows);
  const int items = p.tiles * p.splits;
  const int grid = std::min(items, g_sms * ring.per_sm);
  const KernelFn kernel = epi == kSwiglu   ? swiglu_kernel_for(fold, fmt)
                          : fold != kNoFold ? fold_kernel_for(fold, fmt)
                                            : kernel_for(fmt, epi, nf);
  CUDA_CHECK(launch_kernel(kernel, grid, kThreads, size_t(ring.smem), s, p));
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

// The output and, for a split matrix, the split-K scratch (tile counters, then the partials).
void set_output(const DevMatrix& W, StreamParams& p, float* y, int ldy, bool accumulate, float* scratch) {
  p.y = y;
  p.ldy = ldy;
  p.accumulate = accumulate ? 1 : 0;
  if (p.splits > 1) {
    if (scratch == nullptr) fail("matmul: split-K matrix without scratch");
    if (stream_tiles(W) > kCounterSlots) fail("matmul: {} tiles exceed the split-K counters", stream_tiles(W));
    p.counters = reinterpret_cast<int*>(scratch);
    p.partial = scratch + kCounterSlots;
  }
}

// The folds' kernels run one token fragment; W8A8 quantizes its
// activations to int8 on the way in, which no fold computes.
bool fold_fits(const DevMatrix& W, int T) {
  return W.packed != nullptr && compute_fmt_of(W) != kFp8A8 && T >= 1 && T <= kFoldedRows;
}

}  // namespace

StreamRing stream_ring(const DevMatrix& W, int T) {
  StreamRing r;
  const int nf = ceil_div(T, 8);
  r.stage_smem = stage_bytes(W, T);
  const int red = reduction_bytes(nf);
  // As many blocks per SM as registers allow while each keeps four stages
  // (more warps to dequantize); else fewer blocks with deeper rings.
  r.per_sm = std::min(max_per_sm(nf), g_cap_per_sm);
  for (; r.per_sm > 1; --r.per_sm)
    if (4 * r.stage_smem + red <= kSmemPerSM / r.per_sm - 2048) break;
  const int budget = r.per_sm == 1 ? kSmemMaxBlock : kSmemPerSM / r.per_sm - 2048;
  r.stages = std::min(g_cap_stages, (budget - red) / r.stage_smem);
  if (r.stages < 2) fail("matmul: stage of {} bytes does not fit in shared memory", r.stage_smem);
  r.smem = r.stages * r.stage_smem + red;
  return r;
}

void init_kernels() {
  if (g_sms != 0) return;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev));
  for (int fmt : {kQ4, kQ8, kFp8, kZ4, kFp8A8}) {
    for (int epi : {int(kOut), int(kArgmax)})
      for (int nf = 1; nf <= 8; ++nf)
        CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel_for(fmt, epi, nf)),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemMaxBlock));
    if (fmt != kFp8A8) {
      for (int fold : {int(kFoldNorm), int(kFoldSwiglu)})
        CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(fold_kernel_for(fold, fmt)),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemMaxBlock));
      for (int fold : {int(kNoFold), int(kFoldNorm)})
        CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(swiglu_kernel_for(fold, fmt)),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemMaxBlock));
    }
  }
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
  set_output(W, p, y, ldy, accumulate, scratch);
  launch(W, kOut, kNoFold, p, s);
}

bool stream_folds_norm(const DevMatrix& W, int T) { return fold_fits(W, T); }

void stream_matmul_normed(const DevMatrix& W, const float* x, int ldx, const float* gamma, float eps, int T, float* y,
                          int ldy, bool accumulate, float* scratch, cudaStream_t s) {
  if (!stream_folds_norm(W, T)) fail("matmul: no folded norm for this matrix at {} rows", T);
  StreamParams p = base_params(W, nullptr, T, 0);
  p.fold.x = x;
  p.fold.ld = ldx;
  p.fold.gamma = gamma;
  p.fold.eps = eps;
  set_output(W, p, y, ldy, accumulate, scratch);
  launch(W, kOut, kFoldNorm, p, s);
}

bool stream_folds_swiglu(const DevMatrix& W, int T) { return fold_fits(W, T); }

void stream_matmul_swiglu(const DevMatrix& W, const float* gate_up, int ld, int up, int T, float* y, int ldy,
                          bool accumulate, float* scratch, cudaStream_t s) {
  if (!stream_folds_swiglu(W, T)) fail("matmul: no folded SwiGLU for this matrix at {} rows", T);
  if (up < W.cols) fail("matmul: folded SwiGLU's up half starts at column {}, inside the gate's {}", up, W.cols);
  StreamParams p = base_params(W, nullptr, T, 0);
  p.fold.x = gate_up;
  p.fold.ld = ld;
  p.fold.up = up;
  set_output(W, p, y, ldy, accumulate, scratch);
  launch(W, kOut, kFoldSwiglu, p, s);
}

bool stream_fuses_swiglu(const DevMatrix& W, int T) { return W.swiglu_pairs && fold_fits(W, T); }

void stream_gate_up_swiglu(const DevMatrix& W, const void* x, int T, int ldx, void* act, int ld_act, cudaStream_t s) {
  if (!stream_fuses_swiglu(W, T)) fail("matmul: no SwiGLU epilogue for this matrix at {} rows", T);
  StreamParams p = base_params(W, x, T, ldx);
  p.act = static_cast<bf16*>(act);
  p.ld_act = ld_act;
  launch(W, kSwiglu, kNoFold, p, s);
}

void stream_gate_up_swiglu_normed(const DevMatrix& W, const float* x, int ldx, const float* gamma, float eps, int T,
                                  void* act, int ld_act, cudaStream_t s) {
  if (!stream_fuses_swiglu(W, T) || !stream_folds_norm(W, T))
    fail("matmul: no SwiGLU epilogue with a folded norm for this matrix at {} rows", T);
  StreamParams p = base_params(W, nullptr, T, 0);
  p.fold.x = x;
  p.fold.ld = ldx;
  p.fold.gamma = gamma;
  p.fold.eps = eps;
  p.act = static_cast<bf16*>(act);
  p.ld_act = ld_act;
  launch(W, kSwiglu, kFoldNorm, p, s);
}

void stream_matmul_argmax(const DevMatrix& W, const void* x, int T, int ldx, void* pairs, const int* stop,
                          cudaStream_t s, const HeadTally& tally) {
  StreamParams p = base_params(W, x, T, ldx);
  p.tally = tally;
  p.splits = 1;
  p.pairs = static_cast<ArgMax*>(pairs);
  p.stop = stop;
  launch(W, kArgmax, kNoFold, p, s);
}

}  // namespace nextn::cuda
