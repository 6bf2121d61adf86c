// The matmul family for 1..64 token rows: Y[t][n] = sum_k X[t][k] W[n][k].
//
// One tensor-core kernel (mma.sync m16n8k16, bf16 operands, fp32
// accumulation) for bf16, MLX q4 and MLX q8 weights, plus a CUDA-core fp32
// kernel for the fp32-activation mode. Batch invariance by construction
// (docs/cuda-backend.md):
//  - output features sit on the MMA's M side, tokens on its N side; a token
//    occupies one column of one n8 fragment, and every column's sum runs
//    through the same instructions in the same k order whatever the other
//    columns hold or how many fragments a launch has (NF = ceil(T/8));
//  - the tile (64 features x all tokens), the k step (128, tail 32) and the
//    split-K factor are functions of the matrix shape only;
//  - split-K partials are reduced in split order by a second kernel, never
//    with atomics;
//  - activations are rounded to bf16 by their producer, before the matmul.
//
// Operand layout without shuffles: in one 128-wide k step, lane (g, c)
// (g = lane / 4, c = lane % 4) owns the 32 consecutive k of
// [k0 + 32c, k0 + 32c + 32) for weight rows g and g + 8 and for each token
// row g + 8f. Those 32 k are four 8-element pieces j, each feeding two
// MMAs (h = 0, 1): elements 8j + 4h + {0,1} fill the MMA k-slots {2c, 2c+1}
// and 8j + 4h + {2,3} the slots {2c+8, 2c+9}, for A and B alike. A fixed
// permutation of k inside the step, the same for every launch: each lane
// reads 16-byte runs of weights (or one packed u32 = 8 q4 values) and of
// activations straight into fragment registers.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_stream.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/weights.cuh"

namespace nextn::cuda {
namespace {

struct MMParams {
  const void* w;
  const float* scales;
  const float* biases;
  int rows, cols, group, splits;
  const void* x;
  int ldx, T;
  float* y;
  int ldy;
  float* partial;      // split-K: [splits][T][rows]
  ArgMax* pairs;       // argmax epilogue: [T][gridDim.x]
  const int* stop;     // argmax epilogue: early exit flag
  int mode;            // OutMode for the kOut epilogue
  HeadTally tally;     // the LM head's counters (null elsewhere)
  long long row_bytes; // weight (+ scale/bias) bytes of one row, for the tally
};

// Epilogues: kOut writes the sums (store, accumulate or split-K partial, by
// MMParams::mode); kArgmax reduces them to per-block (max, index) pairs.
enum Epi : int { kOut = 0, kArgmax = 1 };
enum OutMode : int { kStore = 0, kAccumulate = 1, kPartial = 2 };

// Eight q-bit values (element order = bit order) dequantized to 4 bf16 pairs.
// A q4 word in pack_quant's layout (element j at bit q4_bit(j)) to 8 bf16,
// with fp32 scale and bias.
__device__ __forceinline__ uint4 dequant_q4(uint32_t word, float s, float b) {
  uint32_t r[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float lo = fmaf(s, float((word >> q4_bit(2 * e)) & 0xfu), b);
    const float hi = fmaf(s, float((word >> q4_bit(2 * e + 1)) & 0xfu), b);
    r[e] = pack_bf16(lo, hi);
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}
__device__ __forceinline__ uint4 dequant_q8(uint32_t w0, uint32_t w1, float s, float b) {
  uint32_t r[4];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    r[e] = pack_bf16(fmaf(s, float((w0 >> (16 * e)) & 0xffu), b), fmaf(s, float((w0 >> (16 * e + 8)) & 0xffu), b));
    r[2 + e] =
        pack_bf16(fmaf(s, float((w1 >> (16 * e)) & 0xffu), b), fmaf(s, float((w1 >> (16 * e + 8)) & 0xffu), b));
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

// Weight row `row`, k in [kspan, kspan + 8U), as U pieces of 8 bf16.
template <WKind WK, int U>
__device__ __forceinline__ void load_a(const MMParams& p, int row, int kspan, uint4 (&out)[U]) {
  if constexpr (WK == WKind::BF16) {
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.w) + size_t(row) * p.cols + kspan);
#pragma unroll
    for (int j = 0; j < U; ++j) out[j] = __ldg(src + j);
  } else {
    const int gi = row * (p.cols / p.group) + kspan / p.group;  // the 8U elements lie in one group
    const float s = __ldg(p.scales + gi), b = __ldg(p.biases + gi);
    if constexpr (WK == WKind::Q4) {
      const uint32_t* src = static_cast<const uint32_t*>(p.w) + size_t(row) * (p.cols / 8) + kspan / 8;
      if constexpr (U == 4) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
        out[0] = dequant_q4(v.x, s, b);
        out[1] = dequant_q4(v.y, s, b);
        out[2] = dequant_q4(v.z, s, b);
        out[3] = dequant_q4(v.w, s, b);
      } else {
#pragma unroll
        for (int j = 0; j < U; ++j) out[j] = dequant_q4(__ldg(src + j), s, b);
      }
    } else {  // Q8
      const uint32_t* src = static_cast<const uint32_t*>(p.w) + size_t(row) * (p.cols / 4) + kspan / 4;
#pragma unroll
      for (int j = 0; j < U; ++j) {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(src) + j);
        out[j] = dequant_q8(v.x, v.y, s, b);
      }
    }
  }
}

// One k step of 32U: lane (g, c) covers [k0 + 8U c, k0 + 8U c + 8U).
template <WKind WK, int NF, int U>
__device__ __forceinline__ void mm_step(const MMParams& p, int r0, int r1, int k0, int g, int c,
                                        float (&acc)[NF][4]) {
  const int kspan = k0 + 8 * U * c;
  uint4 a0[U], a1[U];
  load_a<WK, U>(p, r0, kspan, a0);
  load_a<WK, U>(p, r1, kspan, a1);
  const bf16* x = static_cast<const bf16*>(p.x);
#pragma unroll
  for (int j = 0; j < U; ++j) {
#pragma unroll
    for (int f = 0; f < NF; ++f) {
      const int t = 8 * f + g;
      uint4 b = make_uint4(0, 0, 0, 0);
      if (t < p.T) b = __ldg(reinterpret_cast<const uint4*>(x + size_t(t) * p.ldx + kspan + 8 * j));
      mma_bf16(acc[f], a0[j].x, a1[j].x, a0[j].y, a1[j].y, b.x, b.y);
      mma_bf16(acc[f], a0[j].z, a1[j].z, a0[j].w, a1[j].w, b.z, b.w);
    }
  }
}

template <WKind WK, int NF, int EPI>
__global__ void __launch_bounds__(128, 1) mm_tc_kernel(MMParams p) {
  pdl_prologue();
  if constexpr (EPI == kArgmax) {
    if (p.stop != nullptr && *p.stop != 0) return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int base = blockIdx.x * kTileM + warp * 16;
  const int r0 = min(base + g, p.rows - 1), r1 = min(base + g + 8, p.rows - 1);

  // This split's k range: whole 128-steps, the 32-steps of the tail go to the last split.
  const int chunks = p.cols / kChunkK;
  const int per = (chunks + p.splits - 1) / p.splits;
  const int s = blockIdx.y;
  const int c_begin = min(chunks, s * per), c_end = min(chunks, (s + 1) * per);

  float acc[NF][4];
#pragma unroll
  for (int f = 0; f < NF; ++f) acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.0f;

  for (int ch = c_begin; ch < c_end; ++ch) mm_step<WK, NF, 4>(p, r0, r1, ch * kChunkK, g, c, acc);
  if (s == p.splits - 1)
    for (int k0 = chunks * kChunkK; k0 < p.cols; k0 += 32) mm_step<WK, NF, 1>(p, r0, r1, k0, g, c, acc);
  if (threadIdx.x == 0 && p.tally.counters != nullptr) {  // the head is never split: one block per tile
    const unsigned long long rows = unsigned(min(kTileM, p.rows - int(blockIdx.x) * kTileM));
    tally_block(p.tally, blockIdx.x == 0, p.T, rows * (unsigned long long)p.row_bytes,
                EPI == kOut ? rows * unsigned(p.T) * 4ull : 0ull);
  }

  if constexpr (EPI == kArgmax) {
    __shared__ ArgMax best[4][kMaxRows];
#pragma unroll
    for (int f = 0; f < NF; ++f) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // token column 8f + 2c + h
        const int ra = base + g, rb = base + g + 8;
        ArgMax a{ra < p.rows ? acc[f][h] : -INFINITY, ra};
        if (rb < p.rows && argmax_better(acc[f][2 + h], rb, a.v, a.i)) a = {acc[f][2 + h], rb};
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {  // across g: lanes with the same c
          const float v = __shfl_xor_sync(0xffffffffu, a.v, o);
          const int i = __shfl_xor_sync(0xffffffffu, a.i, o);
          if (argmax_better(v, i, a.v, a.i)) a = {v, i};
        }
        if (g == 0) best[warp][8 * f + 2 * c + h] = a;
      }
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < p.T) {
      ArgMax a = best[0][t];
      for (int w = 1; w < 4; ++w)
        if (argmax_better(best[w][t].v, best[w][t].i, a.v, a.i)) a = best[w][t];
      p.pairs[size_t(t) * gridDim.x + blockIdx.x] = a;
    }
  } else {
#pragma unroll
    for (int f = 0; f < NF; ++f) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = base + g + (i >= 2 ? 8 : 0);
        const int t = 8 * f + 2 * c + (i & 1);
        if (row >= p.rows || t >= p.T) continue;
        if (p.mode == kPartial)
          p.partial[(size_t(s) * p.T + t) * p.rows + row] = acc[f][i];
        else if (p.mode == kAccumulate)
          p.y[size_t(t) * p.ldy + row] = add_rn(p.y[size_t(t) * p.ldy + row], acc[f][i]);
        else
          p.y[size_t(t) * p.ldy + row] = acc[f][i];
      }
    }
  }
}

// Repack each Q4 word: element j (bits [4j, 4j+4)) to bit q4_bit(j).
__global__ void repack_q4_kernel(uint32_t* w, size_t n) {
  pdl_prologue();
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t v = w[i];
    uint32_t r = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) r |= ((v >> (4 * j)) & 0xfu) << q4_bit(j);
    w[i] = r;
  }
}

// Split-K reduction in split order: Y (+)= ((p0 + p1) + p2) + ...
__global__ void splitk_reduce_kernel(const float* partial, int splits, int T, int rows, float* y, int ldy,
                                     int accumulate) {
  pdl_prologue();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= T * rows) return;
  const int t = i / rows, row = i % rows;
  float v = partial[i];
  for (int s = 1; s < splits; ++s) v = add_rn(v, partial[size_t(s) * T * rows + i]);
  float* dst = y + size_t(t) * ldy + row;
  *dst = accumulate ? add_rn(*dst, v) : v;
}

// ---- fp32-activation mode: CUDA cores, the CPU reference's dot order ----

template <WKind WK>
__device__ __forceinline__ float weight_of(const MMParams& p, int row, int k) {
  return weight_at<WK>(p.w, p.scales, p.biases, p.cols, p.group, row, k);
}

// One warp per output feature; lanes 8q..8q+7 handle token t0 + q. Lane l
// sums k = l, l + 8, ... and the 8 partial sums combine as
// ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)): cpu::dot's order, bit for bit.
template <WKind WK, int EPI>
__global__ void __launch_bounds__(256) mm_fma_kernel(MMParams p) {
  pdl_prologue();
  if constexpr (EPI == kArgmax) {
    if (p.stop != nullptr && *p.stop != 0) return;
  }
  __shared__ float vals[8][kMaxRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int q = lane >> 3, l = lane & 7;
  const int row = blockIdx.x * 8 + warp;
  const int rr = min(row, p.rows - 1);
  const float* x = static_cast<const float*>(p.x);
  if (threadIdx.x == 0 && p.tally.counters != nullptr) {  // counted up front: nothing below returns early
    const unsigned long long rows = unsigned(min(8, p.rows - int(blockIdx.x) * 8));
    tally_block(p.tally, blockIdx.x == 0, p.T, rows * (unsigned long long)p.row_bytes,
                EPI == kOut ? rows * unsigned(p.T) * 4ull : 0ull);
  }
  for (int t0 = 0; t0 < p.T; t0 += 4) {
    const int t = t0 + q, tt = min(t, p.T - 1);
    float acc = 0.0f;
    for (int k = l; k < p.cols; k += 8) acc = add_rn(acc, mul_rn(x[size_t(tt) * p.ldx + k], weight_of<WK>(p, rr, k)));
    acc = add_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 1));
    acc = add_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 2));
    acc = add_rn(acc, __shfl_xor_sync(0xffffffffu, acc, 4));
    if (l != 0 || t >= p.T) continue;
    if constexpr (EPI == kArgmax) {
      vals[warp][t] = acc;
    } else if (row < p.rows) {
      float* dst = p.y + size_t(t) * p.ldy + row;
      *dst = p.mode == kAccumulate ? add_rn(*dst, acc) : acc;
    }
  }
  if constexpr (EPI == kArgmax) {
    __syncthreads();
    const int t = threadIdx.x;
    if (t < p.T) {
      ArgMax a{-INFINITY, p.rows};
      for (int w = 0; w < 8; ++w) {
        const int r = blockIdx.x * 8 + w;
        if (r < p.rows && argmax_better(vals[w][t], r, a.v, a.i)) a = {vals[w][t], r};
      }
      p.pairs[size_t(t) * gridDim.x + blockIdx.x] = a;
    }
  }
}

template <int EPI, WKind WK>
void launch_tc_nf(int nf, dim3 grid, cudaStream_t s, const MMParams& p) {
  switch (nf) {
    case 1: CUDA_CHECK(launch_kernel(mm_tc_kernel<WK, 1, EPI>, grid, 128, 0, s, p)); break;
    case 2: CUDA_CHECK(launch_kernel(mm_tc_kernel<WK, 2, EPI>, grid, 128, 0, s, p)); break;
    case 3: CUDA_CHECK(launch_kernel(mm_tc_kernel<WK, 3, EPI>, grid, 128, 0, s, p)); break;
    case 4: CUDA_CHECK(launch_kernel(mm_tc_kernel<WK, 4, EPI>, grid, 128, 0, s, p)); break;
    case 5: CUDA_CHECK(launch_kernel(mm_tc_kernel<WK, 5, EPI>, grid, 128, 0, s, p)); break;
    case 6: CUDA_CHECK(launch_kernel(mm_tc_kernel<WK, 6, EPI>, grid, 128, 0, s, p)); break;
    case 7: CUDA_CHECK(launch_kernel(mm_tc_kernel<WK, 7, EPI>, grid, 128, 0, s, p)); break;
    default: CUDA_CHECK(launch_kernel(mm_tc_kernel<WK, 8, EPI>, grid, 128, 0, s, p)); break;
  }
}

template <int EPI>
void launch_mm(const DevMatrix& W, Act act, dim3 grid_tc, cudaStream_t s, const MMParams& p) {
  if (act == Act::F32) {
    const dim3 grid(unsigned(ceil_div(W.rows, 8)));
    switch (W.kind) {
      case WKind::F32: CUDA_CHECK(launch_kernel(mm_fma_kernel<WKind::F32, EPI>, grid, 256, 0, s, p)); break;
      case WKind::BF16: CUDA_CHECK(launch_kernel(mm_fma_kernel<WKind::BF16, EPI>, grid, 256, 0, s, p)); break;
      case WKind::Q4: CUDA_CHECK(launch_kernel(mm_fma_kernel<WKind::Q4, EPI>, grid, 256, 0, s, p)); break;
      case WKind::Q8: CUDA_CHECK(launch_kernel(mm_fma_kernel<WKind::Q8, EPI>, grid, 256, 0, s, p)); break;
      case WKind::FP8:
      case WKind::Z4: fail("matmul: FP8 / Z4 weights run in the bf16 mode only");
    }
  } else {
    const int nf = ceil_div(p.T, 8);
    switch (W.kind) {
      case WKind::BF16: launch_tc_nf<EPI, WKind::BF16>(nf, grid_tc, s, p); break;
      case WKind::Q4: launch_tc_nf<EPI, WKind::Q4>(nf, grid_tc, s, p); break;
      case WKind::Q8: launch_tc_nf<EPI, WKind::Q8>(nf, grid_tc, s, p); break;
      case WKind::F32: fail("matmul: fp32 weights need the fp32-activation mode");
      case WKind::FP8:
      case WKind::Z4: fail("matmul: FP8 / Z4 weights without the streamed layout");
    }
  }
  CUDA_CHECK_LAUNCH("matmul kernel");
}

MMParams make_params(const DevMatrix& W, const void* X, int T, int ldx) {
  if (T < 1 || T > kMaxRows) fail("matmul: {} rows outside [1, {}]", T, kMaxRows);
  MMParams p{};
  p.w = W.w;
  p.scales = W.scales;
  p.biases = W.biases;
  if ((W.kind == WKind::Q4 || W.kind == WKind::Q8) && !W.quant_packed)
    fail("matmul: quantized matrix not packed (call pack_quant at load)");
  p.rows = W.rows;
  p.cols = W.cols;
  p.group = W.group;
  p.splits = W.splits;
  p.x = X;
  p.ldx = ldx;
  p.T = T;
  return p;
}

// The streamed kernel serves packed matrices in the bf16 mode: chosen by
// the matrix, never by the token count.
bool streamed(const DevMatrix& W, Act act) { return act == Act::BF16 && W.packed != nullptr; }

// Bytes of one row of W in the generic kernels' layout (fp32 scales and biases).
long long row_read_bytes(const DevMatrix& W) {
  const long long cols = W.cols, groups = W.group > 0 ? cols / W.group : 0;
  switch (W.kind) {
    case WKind::F32: return cols * 4;
    case WKind::BF16: return cols * 2;
    case WKind::Q4: return cols / 2 + groups * 8;
    case WKind::Q8: return cols + groups * 8;
    case WKind::FP8: return cols + groups * 4;
    case WKind::Z4: return cols / 2 + groups * 8;
  }
  return 0;
}

int argmax_blocks(const DevMatrix& W, Act act) {
  return act == Act::F32 ? ceil_div(W.rows, 8) : streamed(W, act) ? stream_tiles(W) : ceil_div(W.rows, kTileM);
}

}  // namespace

int choose_splits(int rows, int cols, WKind kind) {
  if ((kind == WKind::Q4 || kind == WKind::Q8 || scaled_kind(kind)) && cols % kChunkK == 0)
    return stream_splits(rows, cols);
  // Enough blocks for two waves of a 132-SM H200. A constant, not a device
  // query: the same shape gives the same split (and the same bits) anywhere.
  const int kTargetBlocks = 264;
  const int mblocks = ceil_div(rows, kTileM);
  const int chunks = cols / kChunkK;
  if (mblocks >= kTargetBlocks / 2 || chunks < 4) return 1;
  const int want = std::min({ceil_div(kTargetBlocks, mblocks), chunks / 2, 16});
  if (want <= 1) return 1;
  const int per = ceil_div(chunks, want);
  return ceil_div(chunks, per);  // every split non-empty
}

int64_t splitk_scratch_floats(const DevMatrix& m, int max_rows) {
  return m.splits > 1 ? stream_counter_floats() + int64_t(m.splits) * max_rows * m.rows : 0;
}

void check_matrix(const DevMatrix& m, const char* name) {
  if (m.rows < 1 || m.cols < 32 || m.cols % 32 != 0)
    fail("CUDA backend: matrix {} is [{}, {}]; the kernels need at least 32 columns, a multiple of 32", name,
         m.rows, m.cols);
  if ((m.kind == WKind::Q4 || m.kind == WKind::Q8) && (m.group < 32 || m.group % 32 != 0 || m.cols % m.group != 0))
    fail("CUDA backend: matrix {} has quantization group {}; the kernels need a multiple of 32", name, m.group);
  if (scaled_kind(m.kind) && !stream_eligible(m))
    fail("CUDA backend: matrix {} ({} columns, group {}): FP8 / Z4 weights need columns a multiple of {} and "
         "groups of 32, 64 or 128",
         name, m.cols, m.group, kChunkK);
  if (m.splits < 1 || (m.splits > 1 && m.splits > m.cols / kChunkK))
    fail("CUDA backend: matrix {}: bad split-K factor {}", name, m.splits);
}

int64_t head_read_bytes(const DevMatrix& W, Act act) {
  return streamed(W, act) ? stream_layout_bytes(W) : int64_t(W.rows) * row_read_bytes(W);
}

void matmul(const DevMatrix& W, const void* X, Act act, int T, int ldx, float* Y, int ldy, bool accumulate,
            float* scratch, cudaStream_t s, const HeadTally& tally) {
  MMParams p = make_params(W, X, T, ldx);
  if (tally.counters != nullptr && (W.splits != 1 || accumulate)) fail("matmul: a counted head projection is never split");
  if (streamed(W, act)) return stream_matmul(W, X, T, ldx, Y, ldy, accumulate, scratch, s, tally);
  p.tally = tally;
  p.row_bytes = row_read_bytes(W);
  p.y = Y;
  p.ldy = ldy;
  const bool split = act == Act::BF16 && W.splits > 1;
  if (split && scratch == nullptr) fail("matmul: split-K matrix without scratch");
  // The generic kernel's partials go after the streamed kernel's counters.
  p.partial = split ? scratch + stream_counter_floats() : nullptr;
  p.mode = split ? kPartial : accumulate ? kAccumulate : kStore;
  launch_mm<kOut>(W, act, dim3(unsigned(ceil_div(W.rows, kTileM)), unsigned(split ? W.splits : 1)), s, p);
  if (split) {
    const int n = T * W.rows;
    CUDA_CHECK(launch_kernel(splitk_reduce_kernel, ceil_div(n, 256), 256, 0, s, p.partial, W.splits, T, W.rows, Y, ldy, accumulate ? 1 : 0));
    CUDA_CHECK_LAUNCH("splitk_reduce_kernel");
  }
}

int64_t pack_quant_bytes(const DevMatrix& m) { return stream_layout_bytes(m); }

void pack_quant(DevMatrix& m, void* dst, cudaStream_t s) {
  if (m.kind != WKind::Q4 && m.kind != WKind::Q8 && !scaled_kind(m.kind)) return;
  if (m.quant_packed) fail("pack_quant: matrix already packed");
  if (scaled_kind(m.kind) && (!stream_eligible(m) || dst == nullptr))
    fail("pack_quant: FP8 / Z4 weights are read only through the streamed layout");
  if (stream_eligible(m) && dst != nullptr) {  // from MLX's word order: before the in-place repack below
    stream_pack(m, dst, s);
    m.packed = dst;
  }
  if (m.kind == WKind::Q4) {
    const size_t words = size_t(m.rows) * (m.cols / 8);
    CUDA_CHECK(launch_kernel(repack_q4_kernel, unsigned(std::min<size_t>(8192, (words + 255) / 256)), 256, 0, s, static_cast<uint32_t*>(const_cast<void*>(m.w)), words));
    CUDA_CHECK_LAUNCH("repack_q4_kernel");
  }
  m.quant_packed = true;
  CUDA_CHECK(cudaStreamSynchronize(s));
}

int64_t argmax_pairs_bytes(const DevMatrix& W, int max_rows) {
  return int64_t(ceil_div(W.rows, 8)) * max_rows * sizeof(ArgMax);
}

void matmul_argmax(const DevMatrix& W, const void* X, Act act, int T, int ldx, void* pairs, int32_t* out,
                   const int* stop, cudaStream_t s, const HeadTally& tally) {
  if (act == Act::BF16 && W.splits != 1) fail("matmul_argmax: the head must not be split along k");
  MMParams p = make_params(W, X, T, ldx);
  if (streamed(W, act)) {
    stream_matmul_argmax(W, X, T, ldx, pairs, stop, s, tally);
  } else {
    p.pairs = static_cast<ArgMax*>(pairs);
    p.stop = stop;
    p.splits = 1;
    p.tally = tally;
    p.row_bytes = row_read_bytes(W);
    launch_mm<kArgmax>(W, act, dim3(unsigned(ceil_div(W.rows, kTileM))), s, p);
  }
  if (out != nullptr) argmax_pairs(pairs, T, argmax_blocks(W, act), out, stop, s, tally.counters);
}

void walk_compare(const DevMatrix& W, Act act, const void* pairs, int j, const int32_t* drafts, int n_drafts,
                  int32_t* out, int* stop, int* count, cudaStream_t s, HeadCounters* counters) {
  walk_compare_pairs(pairs, argmax_blocks(W, act), j, drafts, n_drafts, out, stop, count, s, counters);
}

void walk_step(const DevMatrix& W, Act act, const void* pairs, int* state, const int32_t* drafts, int n_last,
               int32_t* out, int count_slot, const void* rows, int row_bytes, void* next, HeadCounters* counters,
               cudaGraphConditionalHandle handle, int use_handle, cudaStream_t s) {
  walk_step_pairs(pairs, argmax_blocks(W, act), state, drafts, n_last, out, count_slot, rows, row_bytes, next,
                  counters, handle, use_handle, s);
}

}  // namespace nextn::cuda
