// The Gated DeltaNet recurrence for a prefill chunk (bf16 mode only).
//
// gdn.cu's recurrence is the decode and verify kernel: its arithmetic is the
// CPU's, bit for bit, and a prompt runs through it token by token at about
// 2 us per token and layer (the 27B prefill spent 182 of 508 ms there). Per
// token its time is a dependency chain: 64 separately rounded multiply-adds
// per state column, twice, then a block-wide norm, with five barriers.
// Prefill need not be bitwise equal to decode (greedy and speculative
// decoding share it), so this kernel shortens the chain:
//  - each column's 128 state rows are split into 4 parts of 32, summed
//    part 0 + 1 + 2 + 3 in that order;
//  - a head's columns are split over up to 8 blocks (the recurrence of a
//    column needs no other column), so that the grid fills the GPU;
//  - fused multiply-adds (one rounding per step instead of two);
//  - two barriers per token (double-buffered shared arrays);
//  - the gated RMSNorm leaves the serial loop: the raw output o goes to a
//    scratch buffer and gdn_prefill_norm_kernel normalises every (token,
//    head) in parallel.
// The state is read from S[*parity] and written to S[1 - *parity], as the
// decode kernel does for a forward.
#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/kernels.h"

namespace nextn::cuda {
namespace {

constexpr int kMaxDim = 128;                 // dk and dv at most
constexpr int kParts = 4;                    // row parts per state column
constexpr int kPartRows = kMaxDim / kParts;  // 32
constexpr int kThreads = kMaxDim * kParts;   // 512

// Block (h, c): columns [c cols, c cols + cols) of value head h of one
// layer (a column's recurrence needs no other column; the 27B has 48 value
// heads for 132 multiprocessors, so heads are split into column blocks);
// thread (part, jl) holds rows [32 part, 32 part + 32) of column
// j = c cols + jl of S = [dk][dv] in registers.
__global__ void __launch_bounds__(kThreads) gdn_prefill_recurrence_kernel(GdnShape g, const GdnLayer* table, int layer,
                                                                          int T, const int* parity, float* o_out,
                                                                          int ldo, int cols) {
  pdl_prologue();
  __shared__ float qs[2][kMaxDim], ks[2][kMaxDim];
  __shared__ float red_mem[2][kParts][kMaxDim], red_o[2][kParts][kMaxDim];
  const GdnLayer L = table[layer];
  const int cd = g.conv_dim(), kd = g.Hk * g.dk, vd = g.Hv * g.dv, dk = g.dk, dv = g.dv;
  const int h = blockIdx.x, hk = h / (g.Hv / g.Hk), nthreads = int(blockDim.x);
  const int jl = threadIdx.x % cols, part = threadIdx.x / cols, i0 = part * kPartRows, j = blockIdx.y * cols + jl;
  const bool active = j < dv;
  const int p = *parity & 1;
  const size_t state = size_t(g.Hv) * dk * dv;
  const float* src = L.S + size_t(p) * state + size_t(h) * dk * dv;
  float* dst = L.S + size_t(1 - p) * state + size_t(h) * dk * dv;

  float s[kPartRows];
#pragma unroll
  for (int ii = 0; ii < kPartRows; ++ii) s[ii] = (i0 + ii < dk && active) ? src[size_t(i0 + ii) * dv + j] : 0.0f;
  const float neg_a = -expf(L.a_log[h]), dt_bias = L.dt_bias[h];

  // Token t + 1's inputs load while token t computes; q and k elements
  // threadIdx.x + r nthreads (nthreads >= 64, dk <= 128: r < 2).
  float nq[2] = {}, nk[2] = {}, nv = 0.0f, nb = 0.0f, ng = 0.0f;
  auto load = [&](int t) {
    const float* co = L.conv_out + size_t(t) * cd;
    const float* pr = L.proj + size_t(t) * L.proj_ld;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = int(threadIdx.x) + r * nthreads;
      if (i < dk) {
        nq[r] = co[hk * dk + i];
        nk[r] = co[kd + hk * dk + i];
      }
    }
    nv = active ? co[2 * kd + h * dv + j] : 0.0f;
    nb = pr[cd + vd + h];
    ng = pr[cd + vd + g.Hv + h];
  };
  auto sum_parts = [&](const float (*r)[kMaxDim]) {
    float v = r[0][jl];
#pragma unroll
    for (int q = 1; q < kParts; ++q) v += r[q][jl];
    return v;
  };
  if (T > 0) load(0);

  // Hazards: buffer b = t & 1 of qs/ks/red_* is written at token t and read
  // at tokens t and t + 1 only; the next writer (token t + 2) has passed
  // both barriers of token t + 1, which every reader reaches after its reads.
  for (int t = 0; t < T; ++t) {
    const int b = t & 1;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = int(threadIdx.x) + r * nthreads;
      if (i < dk) {
        qs[b][i] = nq[r];
        ks[b][i] = nk[r];
      }
    }
    const float v = nv;
    const float beta = sigmoid(nb);
    const float decay = expf(neg_a * softplus(ng + dt_bias));
    if (t + 1 < T) load(t + 1);
    __syncthreads();
    if (t > 0 && part == 0 && active) o_out[size_t(t - 1) * ldo + h * dv + j] = sum_parts(red_o[b ^ 1]);
    float mem = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kPartRows; ++ii) {
      if (i0 + ii < dk) {
        s[ii] *= decay;
        mem = fmaf(s[ii], ks[b][i0 + ii], mem);
      }
    }
    red_mem[b][part][jl] = mem;
    __syncthreads();
    const float u = (v - sum_parts(red_mem[b])) * beta;
    float o = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kPartRows; ++ii) {
      if (i0 + ii < dk) {
        s[ii] = fmaf(ks[b][i0 + ii], u, s[ii]);
        o = fmaf(s[ii], qs[b][i0 + ii], o);
      }
    }
    red_o[b][part][jl] = o;
  }
  __syncthreads();
  if (T > 0 && part == 0 && active) o_out[size_t(T - 1) * ldo + h * dv + j] = sum_parts(red_o[(T - 1) & 1]);
  if (active) {
#pragma unroll
    for (int ii = 0; ii < kPartRows; ++ii)
      if (i0 + ii < dk) dst[size_t(i0 + ii) * dv + j] = s[ii];
  }
}

// Block (head, token): y = rmsnorm(o) * w * silu(z), to bf16.
__global__ void __launch_bounds__(kMaxDim) gdn_prefill_norm_kernel(GdnShape g, const GdnLayer* table, int layer,
                                                                   const float* o_in, int ldo) {
  pdl_prologue();
  __shared__ float scratch[32];
  const GdnLayer L = table[layer];
  const int h = blockIdx.x, t = blockIdx.y, j = threadIdx.x, dv = g.dv, vd = g.Hv * g.dv;
  const bool active = j < dv;
  const float o = active ? o_in[size_t(t) * ldo + h * dv + j] : 0.0f;
  const float ss = block_sum(o * o, scratch);
  const float inv = rsqrtf(ss / float(dv) + g.eps);
  if (active) {
    const float z = L.proj[size_t(t) * L.proj_ld + g.conv_dim() + h * dv + j];
    static_cast<bf16*>(L.y)[size_t(t) * vd + h * dv + j] = __float2bfloat16_rn(o * inv * L.norm_w[j] * silu(z));
  }
}

}  // namespace

void gdn_prefill_recurrence(const GdnShape& g, const GdnLayer* table, int layer, int T, const int* parity,
                            float* o_scratch, cudaStream_t s) {
  if (g.dk > kMaxDim || g.dv > kMaxDim) fail("gdn prefill: head dims {}x{} above {}", g.dk, g.dv, kMaxDim);
  if (T < 1) return;
  const int ldo = g.Hv * g.dv;
  // Column blocks per head: as many as keep the grid within one block per
  // multiprocessor, at least 16 columns each (64 threads).
  static const int sms = [] {
    int dev = 0, n = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  int split = 1;
  while (split < 8 && g.Hv * 2 * split <= sms) split *= 2;
  const int cols = std::max(16, (ceil_div(g.dv, split) + 7) / 8 * 8);
  const dim3 grid(unsigned(g.Hv), unsigned(ceil_div(g.dv, cols)));
  CUDA_CHECK(launch_kernel(gdn_prefill_recurrence_kernel, grid, cols * kParts, 0, s, g, table, layer, T, parity,
                           o_scratch, ldo, cols));
  CUDA_CHECK_LAUNCH("gdn_prefill_recurrence_kernel");
  CUDA_CHECK(launch_kernel(gdn_prefill_norm_kernel, dim3(unsigned(g.Hv), unsigned(T)), kMaxDim, 0, s, g, table, layer,
                           static_cast<const float*>(o_scratch), ldo));
  CUDA_CHECK_LAUNCH("gdn_prefill_norm_kernel");
}

}  // namespace nextn::cuda
