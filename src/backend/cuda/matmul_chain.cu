// A chain of folded streamed projections in one launch (matmul_chain.h).
//
// Each link is a phase: its items are walked by the blocks as in
// stream_kernel (matmul_stream.cu), and the consumers run the same item code
// (stream_item.cuh), the producer the same folds (stream_fold.cuh), so each
// link's outputs carry stream_matmul_normed's or stream_matmul_swiglu's bits.
//
// Link i + 1 reads what link i wrote (a norm reads the whole residual rows,
// a SwiGLU the gate_up rows). The block that finishes one of link i's tiles
// (its only item, or its last split) adds one to done[i] with a release;
// whoever reads link i + 1's inputs first waits, with an acquire, for
// done[i] to reach link i's tile count: the producer before its first
// activation slice of the link, the consumers before the link's norm
// multipliers and its outputs. While it waits, the producer fills the
// free stages of its ring with the next link's weights, which depend on
// nothing: the weight stream does not drain at the link boundary.
//
// Waiting on other blocks needs them resident: the grid is at most the
// blocks the device holds at once (checked with the occupancy API), and a
// wait that exceeds kSpinLimit traps instead of hanging. The last block to
// finish puts the counters back to zero for the next launch.
#include "backend/cuda/matmul_chain.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matmul_stream.h"
#include "backend/cuda/stream_fold.cuh"
#include "backend/cuda/stream_item.cuh"
#include "backend/cuda/stream_layout.cuh"
#include "backend/cuda/stream_ring.cuh"
#include "backend/cuda/stream_unit.cuh"
#include "core/error.h"

namespace nextn::cuda {

// One link as the kernel reads it.
struct ChainPhase {
  const uint8_t* packed;
  int rows, cols, splits, per, tiles, chunks;
  int fold;  // kNoFold (bf16 rows copied) | kFoldNorm | kFoldSwiglu
  stream::FoldArgs f;
  const bf16* act;  // kNoFold: bf16 rows [T][ld_act]
  int ld_act;
  float* y;
  int ldy, accumulate;
};

namespace {

using namespace stream;

constexpr int kMaxStagesChain = 12;
constexpr int kMaxChainLinks = kChainMaxLinks;
constexpr long long kSpinLimit = 4000000000ll;  // cycles, about 2 s


// The links travel in the kernel's parameters (up to 32 KB since CUDA
// 12.1): read through the constant bank by index, they cost the consumers
// no registers (a table in global memory did: 76 bytes of spills).
struct ChainParams {
  ChainPhase phases[kMaxChainLinks];
  int n, T, gpc, gshift, unit_bytes, stages, stage_smem;
  float* partial;  // split-K partials, shared by the links (one ends before the next writes)
  int* counters;   // split-K tile counters, zero between items' tiles
  int* done;       // [n] tiles finished per link, then [n] the blocks finished
};

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// Until *count >= target; traps after kSpinLimit cycles (a grid not
// resident at once would otherwise hang).
__device__ void wait_count(const int* count, int target) {
  const long long t0 = clock64();
  while (load_acquire(count) < target) {
    __nanosleep(32);
    if (clock64() - t0 > kSpinLimit) __trap();
  }
}

// The producer's walk over its stages: (link, item, chunk) in the order the
// consumers take them. The link's shape is read from the table when needed
// (few registers: the producer shares the consumers' budget).
struct Cursor {
  int link = -1, item = 0, ch = 0, c1 = 0;
};
__device__ void cursor_item(const ChainPhase& ph, Cursor& c) {
  const int s = c.item % ph.splits;
  c.ch = s * ph.per;
  c.c1 = min(ph.chunks, c.ch + ph.per);
}
__device__ void cursor_next_link(const ChainParams& p, Cursor& c) {
  for (++c.link; c.link < p.n; ++c.link) {
    const ChainPhase& ph = p.phases[c.link];
    if (int(blockIdx.x) >= ph.tiles * ph.splits) continue;
    c.item = blockIdx.x;
    cursor_item(ph, c);
    return;
  }
}
__device__ void cursor_next(const ChainParams& p, Cursor& c) {
  if (++c.ch < c.c1) return;
  const ChainPhase& ph = p.phases[c.link];
  c.item += gridDim.x;
  if (c.item < ph.tiles * ph.splits) cursor_item(ph, c);
  else cursor_next_link(p, c);
}

template <int FMT>
__global__ void __launch_bounds__(kThreads, 3) chain_kernel(const __grid_constant__ ChainParams p) {
  pdl_prologue();
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxStagesChain], empty[kMaxStagesChain];
  __shared__ int last;
  __shared__ float fold_scratch[kMaxFoldRows * kWarps];
  __shared__ float row_inv[kMaxFoldRows];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  ring_init(full, empty, p.stages, kWarps);
  __syncthreads();

  if (warp == kWarps) {  // producer
    Cursor w, a;         // the next stage to get weights, the next to get activations
    cursor_next_link(p, w);
    cursor_next_link(p, a);
    int w_stage = 0, a_stage = 0, ahead = 0, ready = -1;
    uint32_t w_parity = 0;
    auto issue_weights = [&] {
      mbar_wait(&empty[w_stage], w_parity ^ 1u);
      if (lane == 0) {
        const ChainPhase& ph = p.phases[w.link];
        const size_t unit = size_t(w.item / ph.splits) * ph.chunks + w.ch;  // (tile, chunk)
        mbar_expect_tx(&full[w_stage], uint32_t(p.unit_bytes));
        bulk_copy(smem + w_stage * p.stage_smem, ph.packed + unit * p.unit_bytes, uint32_t(p.unit_bytes),
                  &full[w_stage]);
      }
      if (++w_stage == p.stages) {
        w_stage = 0;
        w_parity ^= 1u;
      }
      ++ahead;
      cursor_next(p, w);
    };
    while (a.link < p.n) {
      if (a.link != ready) {
        // A new link: its weights first, as far as the ring goes, then wait
        // for its inputs (the previous link's tiles; a norm's multipliers).
        while (w.link < p.n && ahead < p.stages) issue_weights();
        if (a.link > 0) wait_count(&p.done[a.link - 1], p.phases[a.link - 1].tiles);
        __syncwarp();
        if (p.phases[a.link].fold == kFoldNorm) inverses_wait();
        ready = a.link;
      }
      if (ahead == 0) issue_weights();  // in a link, the weights go just before their activations
      uint8_t* dst = smem + a_stage * p.stage_smem + p.unit_bytes;
      const ChainPhase& ph = p.phases[a.link];
      if (ph.fold == kNoFold) {  // stream_kernel's copy: 16 pieces of 16 bytes per token row
#pragma unroll 1
        for (int i = lane; i < p.T * 16; i += 32) {
          const int t = i >> 4, q = i & 15;
          cp_async16(dst + t * kXStride + 16 * q, ph.act + size_t(t) * ph.ld_act + size_t(a.ch) * kK + 8 * q);
        }
        cp_async_arrive(&full[a_stage]);
      } else {
        SliceRegs<kSliceRows> slice;
        for (int t0 = 0; t0 < p.T; t0 += kSliceRows) {
          if (ph.fold == kFoldNorm) {
            slice_load<kFoldNorm>(ph.f, p.T, t0, a.ch * kK, lane, slice);
            slice_store<kFoldNorm>(slice, p.T, t0, row_inv, dst, kXStride, lane);
          } else {
            slice_load<kFoldSwiglu>(ph.f, p.T, t0, a.ch * kK, lane, slice);
            slice_store<kFoldSwiglu>(slice, p.T, t0, row_inv, dst, kXStride, lane);
          }
        }
        mbar_arrive(&full[a_stage]);
      }
      if (++a_stage == p.stages) a_stage = 0;
      --ahead;
      cursor_next(p, a);
    }
    return;
  }

  // Consumers: 4 row groups (rg) x 2 k halves (kh), link after link.
  const int kh = warp >> 2, rg = warp & 3, g = lane >> 2;
  float* red = reinterpret_cast<float*>(smem + p.stages * p.stage_smem);  // [rg][2 * 4][32]
  const LaneOffsets off = lane_offsets<FMT>(p.gpc, p.gshift, p.unit_bytes, kh, rg, lane);
  const bool tok[1] = {g < p.T};
  int last_link = -1;  // this block's last link with an item (for the k-half buffer's hand-over)
  for (int i = 0; i < p.n; ++i)
    if (int(blockIdx.x) < p.phases[i].tiles * p.phases[i].splits) last_link = i;
  int stage = 0;
  uint32_t parity = 0;
  bool first_item = true;
  for (int i = 0; i < p.n; ++i) {
    const ChainPhase& ph = p.phases[i];
    const int items = ph.tiles * ph.splits;
    if (int(blockIdx.x) >= items) continue;
    if (i > 0) {  // the previous link's outputs are complete (this link's norm reads them; down adds to x)
      if (threadIdx.x == 0) wait_count(&p.done[i - 1], p.phases[i - 1].tiles);
      consumers_sync();
    }
    if (ph.fold == kFoldNorm) fold_inverses(ph.f, p.T, ph.cols, row_inv, fold_scratch);
    const ItemOutput out{ph.y, ph.ldy, ph.accumulate, p.partial, ph.rows, p.T, ph.splits};
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
      const int tile = item / ph.splits, s = item % ph.splits;
      const int c0 = s * ph.per, c1 = min(ph.chunks, c0 + ph.per);
      float acc[2][1][4] = {};
      consume_units<FMT, 1>(smem, full, empty, p.stage_smem, p.stages, stage, parity, c0, c1, p.gpc, off, tok, acc,
                            lane);
      const bool last_item = i == last_link && item + int(gridDim.x) >= items;
      sum_k_halves<1>(acc, red, rg, kh, lane, first_item, last_item);
      first_item = false;
      if (kh == 0) store_item<1>(out, acc, tile * kRows + rg * 32, s, lane);
      const bool tile_done = ph.splits == 1 || reduce_splits(out, p.counters, tile, &last);
      if (tile_done) {
        __threadfence();
        consumers_sync();  // every thread's outputs of the tile are written
        if (threadIdx.x == 0) add_release(&p.done[i], 1);
      }
    }
  }
  // The last block out resets the counters (every wait on them has passed).
  // The fences order this block's count increments before its arrival, and
  // the arrivals before the reset.
  consumers_sync();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&p.done[p.n], 1) == int(gridDim.x) - 1) {
      __threadfence();
      for (int i = 0; i <= p.n; ++i) p.done[i] = 0;
    }
  }
}

using ChainFn = void (*)(ChainParams);
ChainFn chain_kernel_for(int fmt) { return fmt == kQ4 ? chain_kernel<kQ4> : chain_kernel<kQ8>; }

}  // namespace

StreamChain::~StreamChain() = default;

StreamChain::StreamChain(const std::vector<ChainLink>& links, int T) : n_(int(links.size())), T_(T) {
  if (links.empty() || n_ > kChainMaxLinks) fail("chain: {} links outside [1, {}]", n_, kChainMaxLinks);
  if (T < 1 || T > kFoldedRows) fail("chain: {} rows outside [1, {}]", T, kFoldedRows);
  init_kernels();
  const DevMatrix& W0 = *links[0].W;
  fmt_ = compute_fmt_of(W0);
  int max_items = 0;
  for (const auto& l : links) {
    const DevMatrix& W = *l.W;
    if (W.packed == nullptr || (compute_fmt_of(W) != kQ4 && compute_fmt_of(W) != kQ8))
      fail("chain: every link must be a streamed q4 or q8 matrix");
    if (compute_fmt_of(W) != fmt_ || W.group != W0.group)
      fail("chain: the links' formats differ (their stage units must match)");
    if (l.input == ChainInput::Swiglu && l.up < W.cols)
      fail("chain: a SwiGLU link's up half starts at column {}, inside the gate's {}", l.up, W.cols);
    if (stream_tiles(W) > stream_counter_floats()) fail("chain: {} tiles exceed the split-K counters", stream_tiles(W));
    ChainPhase ph{};
    ph.packed = static_cast<const uint8_t*>(W.packed);
    ph.rows = W.rows;
    ph.cols = W.cols;
    ph.splits = W.splits;
    ph.chunks = W.cols / kK;
    ph.per = ceil_div(ph.chunks, ph.splits);
    if (ceil_div(ph.chunks, ph.per) != ph.splits) fail("chain: split-K {} of {} chunks leaves a split empty", ph.splits, ph.chunks);
    ph.tiles = ceil_div(W.rows, kRows);
    ph.fold = l.input == ChainInput::Norm ? kFoldNorm : l.input == ChainInput::Swiglu ? kFoldSwiglu : kNoFold;
    ph.act = static_cast<const bf16*>(l.rows);
    ph.ld_act = l.ldx;
    if (l.input == ChainInput::Rows &&
        (l.rows == nullptr || reinterpret_cast<uintptr_t>(l.rows) % 16 != 0 || l.ldx % 8 != 0 || l.ldx < W.cols))
      fail("chain: a link's bf16 rows must be 16-byte aligned, at least {} wide, with a stride that is a multiple of 8 "
           "(got {})", W.cols, l.ldx);
    ph.f.x = l.x;
    ph.f.ld = l.ldx;
    ph.f.gamma = l.gamma;
    ph.f.eps = l.eps;
    ph.f.up = l.up;
    ph.y = l.y;
    ph.ldy = l.ldy;
    ph.accumulate = l.accumulate ? 1 : 0;
    phases_.push_back(ph);
    max_items = std::max(max_items, ph.tiles * ph.splits);
    scratch_floats_ = std::max(scratch_floats_, splitk_scratch_floats(W));
  }
  gpc_ = kK / W0.group;
  gshift_ = W0.group == 32 ? 5 : W0.group == 64 ? 6 : 7;
  unit_bytes_ = unit_bytes_of(W0);
  const StreamRing ring = stream_ring(W0, T);
  stage_smem_ = ring.stage_smem;
  stages_ = std::min(ring.stages, kMaxStagesChain);
  smem_ = ring.smem - (ring.stages - stages_) * stage_smem_;
  const ChainFn kernel = chain_kernel_for(fmt_);
  // The most any chain takes (one chain's own size would refuse a larger later one).
  CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kStreamSmemMaxBlock));
  int per_sm = 0, sms = 0, dev = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, size_t(smem_)));
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if (per_sm < 1) fail("chain: the kernel does not fit on a multiprocessor");
  // Every block resident at once: the waits rely on it.
  grid_ = std::min(max_items, sms * std::min(per_sm, ring.per_sm));
  counters_ = make_device_buffer(size_t(n_ + 1) * sizeof(int));
  CUDA_CHECK(cudaMemset(counters_.get(), 0, size_t(n_ + 1) * sizeof(int)));
  CUDA_CHECK(cudaDeviceSynchronize());  // the zeroed counters before a launch on any stream
}

void StreamChain::launch(float* scratch, cudaStream_t s) const {
  ChainParams p{};
  std::copy(phases_.begin(), phases_.end(), p.phases);
  p.n = n_;
  p.T = T_;
  p.gpc = gpc_;
  p.gshift = gshift_;
  p.unit_bytes = unit_bytes_;
  p.stages = stages_;
  p.stage_smem = stage_smem_;
  p.counters = reinterpret_cast<int*>(scratch);
  p.partial = scratch != nullptr ? scratch + stream_counter_floats() : nullptr;
  if (scratch == nullptr && scratch_floats_ > 0) fail("chain: a split-K link without scratch");
  p.done = static_cast<int*>(counters_.get());
  CUDA_CHECK(launch_kernel(chain_kernel_for(fmt_), grid_, kThreads, size_t(smem_), s, p));
  CUDA_CHECK_LAUNCH("chain_kernel");
}

}  // namespace nextn::cuda
