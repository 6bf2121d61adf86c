// Gated DeltaNet (model-spec A.4), decode and verify: token by token.
//
// gdn_conv: the causal depthwise conv over [conv state ; this step's pre-conv
// rows], SiLU, then per key head the l2 norm of q and k (q also scaled by
// dk^-1/2); and the new conv state (the last K-1 pre-conv rows).
// gdn_recurrence: one block per value head, the fp32 state column of each
// thread in registers, tokens in order; then the gated RMSNorm per head.
// gdn_step: both in one launch for decode widths (T <= kGdnStepRows): each
// value head's block convolves the channels it reads (its key head's q and
// k, its own v) into shared memory, then runs the recurrence from there.
// Same arithmetic, same bits; one launch and its gap fewer per GDN layer.
//
// State buffers come in pairs: a step reads buffer (*parity ^ invert) and
// writes the other, so the state before a verify step survives it untouched
// and a rollback replays the accepted tokens from it (invert = 1) with the
// very same arithmetic (model-spec B, option 2, without a snapshot copy).
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/kernels.h"

namespace nextn::cuda {
namespace {

constexpr int kMaxDk = 128;
constexpr int kGdnThreads = 128;  // >= dk and >= dv: conv segments, state columns

// Row j of [conv state (K-1 rows) ; this step's pre-conv rows], channel ch.
__device__ __forceinline__ float conv_row(const GdnLayer& L, const float* st, int cd, int K, int ch, int j) {
  return j < K - 1 ? st[size_t(j) * cd + ch] : L.proj[size_t(j - (K - 1)) * L.proj_ld + ch];
}
// Channel ch of token t after the causal conv and SiLU. The taps are
// loaded a batch at a time before they are summed (in tap order): Qwen3.5's
// 4 taps are one memory round trip, not four.
constexpr int kTapBatch = 4;
__device__ __forceinline__ float conv_channel(const GdnLayer& L, const float* st, int cd, int K, int ch, int t) {
  const float* w = L.conv_w + size_t(ch) * K;
  float s = 0.0f;
  for (int i0 = 0; i0 < K; i0 += kTapBatch) {
    float wv[kTapBatch], xv[kTapBatch];
#pragma unroll
    for (int j = 0; j < kTapBatch; ++j) {
      const bool tap = i0 + j < K;
      wv[j] = tap ? w[i0 + j] : 0.0f;
      xv[j] = tap ? conv_row(L, st, cd, K, ch, t + i0 + j) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kTapBatch; ++j)
      if (i0 + j < K) s = add_rn(s, mul_rn(wv[j], xv[j]));
  }
  return silu(s);
}
// A q or k channel's l2 norm over its head (eps 1e-6) from the head's sum
// of squares ss; q is also scaled by dk^-1/2.
__device__ __forceinline__ float qk_normed(float c, float ss, bool is_q, int dk) {
  c = mul_rn(c, __fdiv_rn(1.0f, __fsqrt_rn(add_rn(ss, 1e-6f))));
  return is_q ? mul_rn(c, __fdiv_rn(1.0f, __fsqrt_rn(float(dk)))) : c;
}

// Block (segment, y, layer): segments are the Hk q heads, the Hk k heads,
// then v in chunks of 128 channels; y < T is token y, y == T writes the new
// conv state.
__device__ void gdn_conv_at(const GdnShape& g, const GdnLayer& L, int T, int parity, int skip_out, int seg, int y) {
  __shared__ float scratch[32];
  const int cd = g.conv_dim(), kd = g.Hk * g.dk, K = g.K;
  const int p = parity & 1;
  const float* st = L.conv_state + size_t(p) * (K - 1) * cd;
  float* nst = L.conv_state + size_t(1 - p) * (K - 1) * cd;
  int ch0, nch, kind;  // kind 0: q, 1: k, 2: v
  if (seg < g.Hk) {
    ch0 = seg * g.dk, nch = g.dk, kind = 0;
  } else if (seg < 2 * g.Hk) {
    ch0 = kd + (seg - g.Hk) * g.dk, nch = g.dk, kind = 1;
  } else {
    ch0 = 2 * kd + (seg - 2 * g.Hk) * kGdnThreads, nch = min(kGdnThreads, cd - ch0), kind = 2;
  }
  const int ch = ch0 + threadIdx.x;
  const bool active = int(threadIdx.x) < nch;
  if (y == T) {
    if (active)
      for (int r = 0; r < K - 1; ++r) nst[size_t(r) * cd + ch] = conv_row(L, st, cd, K, ch, T + r);
    return;
  }
  if (skip_out) return;
  const int t = y;
  const float c = active ? conv_channel(L, st, cd, K, ch, t) : 0.0f;
  const float out = kind == 2 ? c : qk_normed(c, block_sum(mul_rn(c, c), scratch), kind == 0, g.dk);
  if (active) L.conv_out[size_t(t) * cd + ch] = out;
}

__global__ void __launch_bounds__(kGdnThreads) gdn_conv_kernel(GdnShape g, const GdnLayer* table, int layer0, int T,
                                                               const int* parity, int invert, int skip_out) {
  pdl_prologue();
  const GdnLayer L = table[layer0 + blockIdx.z];  // the pointers in registers
  gdn_conv_at(g, L, T, *parity ^ invert, skip_out, blockIdx.x, blockIdx.y);
}

// The group pass: block (segment, y, entry), each entry its own table and
// parity; its GDN in-projection rows already in its own proj rows.
__global__ void __launch_bounds__(kGdnThreads) gdn_conv_group_kernel(GdnShape g, const GroupEntry* entries,
                                                                     int layer) {
  pdl_prologue();
  const GroupEntry& e = entries[blockIdx.z];
  if (e.T == 0 || int(blockIdx.y) > e.T) return;
  const GdnLayer L = e.gdn[layer];
  gdn_conv_at(g, L, e.T, *e.parity, 0, blockIdx.x, blockIdx.y);
}

// Block (value head, layer); thread (part, j) owns rows [64 part, 64 part + 64)
// of column j of S = [dk][dv] in registers (two threads per column keep the
// register count under the limit):
//   S <- exp(g) S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T q
// then y = rmsnorm(o) * w * silu(z) (unless replay). The two halves of each
// column sum combine as (part 0) + (part 1).
constexpr int kRecThreads = 256;
constexpr int kRowsPerPart = kMaxDk / 2;

// The recurrence's post-conv inputs of one value head: token t's q, k
// (its key head's) and v (its own) at q[t * stride + i], ...: conv_out rows
// in global memory, or gdn_step's rows in shared memory.
struct ConvRows {
  const float *q, *k, *v;
  int stride;
};
__device__ __forceinline__ ConvRows conv_out_rows(const GdnShape& g, const GdnLayer& L, int h) {
  const int kd = g.Hk * g.dk, hk = h / (g.Hv / g.Hk);
  return {L.conv_out + hk * g.dk, L.conv_out + kd + hk * g.dk, L.conv_out + 2 * kd + h * g.dv, g.conv_dim()};
}

// y_rows: where token t's gated-norm output goes (row t, [rows][Hv*dv]).
// HD: the head dims when they are compile-time (kFullHead: dk = dv = 128
// and a conv of kFullConv taps, every Qwen3.5 size), else 0 (read from g).
// The arithmetic is the same; fixed dims turn each state row's address into
// an immediate offset and drop the per-row bounds tests, which were most of
// the instructions (ncu: about 3,500 per warp for a one-token step at 0.8B,
// four in five integer), and a fixed tap count unrolls the step's conv.
constexpr int kFullHead = 128, kFullConv = 4;
static_assert(kFullHead == kMaxDk && kFullHead == kGdnThreads, "a full head fills the rows and the columns");
template <typename TX, int HD>
__device__ void gdn_recurrence_at(const GdnShape& g, const GdnLayer& L, const ConvRows& rows, int T, int parity,
                                  int replay, TX* y_rows, int h) {
  __shared__ float qs[kMaxDk], ks[kMaxDk];
  __shared__ float red_mem[2][kGdnThreads], red_o[2][kGdnThreads];
  __shared__ float scratch[32];
  const int dk = HD ? HD : g.dk, dv = HD ? HD : g.dv;
  const int cd = g.conv_dim(), vd = g.Hv * dv;
  const int j = threadIdx.x % kGdnThreads, part = threadIdx.x / kGdnThreads, i0 = part * kRowsPerPart;
  const bool active = HD == kGdnThreads || j < dv;
  const int p = parity & 1;
  const size_t state = size_t(g.Hv) * dk * dv;
  // Column j of this thread's rows: row i0 + ii at [ii * dv].
  const float* src = L.S + size_t(p) * state + size_t(h) * dk * dv + size_t(i0) * dv + j;
  float* dst = L.S + size_t(1 - p) * state + size_t(h) * dk * dv + size_t(i0) * dv + j;
  // Row i0 + ii exists (always, for a full head: i0 + ii < 2 * kRowsPerPart = dk).
  auto has_row = [&](int ii) { return HD == kMaxDk || i0 + ii < dk; };

  float s[kRowsPerPart];
#pragma unroll
  for (int ii = 0; ii < kRowsPerPart; ++ii) s[ii] = (has_row(ii) && active) ? src[ii * dv] : 0.0f;
  const float neg_a = -expf(L.a_log[h]), dt_bias = L.dt_bias[h];

  // Token t's inputs are loaded while token t - 1 computes (their global
  // latency is otherwise on the sequential path of every token); the
  // arithmetic is unchanged.
  const bool loads_qk = int(threadIdx.x) < dk;
  float nq = 0.0f, nk = 0.0f, nv = 0.0f, nb = 0.0f, ng = 0.0f, nz = 0.0f;
  auto load = [&](int t) {
    const size_t r = size_t(t) * rows.stride;
    const float* pr = L.proj + size_t(t) * L.proj_ld;
    if (loads_qk) {
      nq = rows.q[r + threadIdx.x];
      nk = rows.k[r + threadIdx.x];
    }
    nv = active ? rows.v[r + j] : 0.0f;
    nb = pr[cd + vd + h];
    ng = pr[cd + vd + g.Hv + h];
    nz = active ? pr[cd + h * dv + j] : 0.0f;
  };
  if (T > 0) load(0);

  for (int t = 0; t < T; ++t) {
    __syncthreads();  // qs/ks/red of the previous token consumed
    if (loads_qk) {
      qs[threadIdx.x] = nq;
      ks[threadIdx.x] = nk;
    }
    const float v = nv, beta_in = nb, gate_in = ng, z = nz;
    if (t + 1 < T) load(t + 1);
    __syncthreads();
    const float beta = sigmoid(beta_in);
    const float decay = expf(mul_rn(neg_a, softplus(add_rn(gate_in, dt_bias))));
    float mem = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kRowsPerPart; ++ii) {
      if (has_row(ii)) {
        s[ii] = mul_rn(s[ii], decay);
        mem = add_rn(mem, mul_rn(s[ii], ks[i0 + ii]));
      }
    }
    red_mem[part][j] = mem;
    __syncthreads();
    mem = add_rn(red_mem[0][j], red_mem[1][j]);
    const float u = mul_rn(__fsub_rn(v, mem), beta);
    float o = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kRowsPerPart; ++ii) {
      if (has_row(ii)) {
        s[ii] = add_rn(s[ii], mul_rn(ks[i0 + ii], u));
        o = add_rn(o, mul_rn(s[ii], qs[i0 + ii]));
      }
    }
    if (replay) continue;
    red_o[part][j] = o;
    __syncthreads();
    o = add_rn(red_o[0][j], red_o[1][j]);
    const bool writer = active && part == 0;
    const float ss = block_sum(writer ? mul_rn(o, o) : 0.0f, scratch);
    const float inv = rms_inverse(ss, dv, g.eps);
    if (writer) {
      const float y = mul_rn(mul_rn(mul_rn(o, inv), L.norm_w[j]), silu(z));
      y_rows[size_t(t) * vd + h * dv + j] = from_f32<TX>(y);
    }
  }
  if (active) {
#pragma unroll
    for (int ii = 0; ii < kRowsPerPart; ++ii)
      if (has_row(ii)) dst[ii * dv] = s[ii];
  }
}


template <typename TX, int HD>
__global__ void __launch_bounds__(kRecThreads, HD ? 2 : 1)
    gdn_recurrence_kernel(GdnShape g, const GdnLayer* table, int layer0, int T, const int* parity, int invert,
                          int replay) {
  pdl_prologue();
  const GdnLayer L = table[layer0 + blockIdx.y];  // the pointers in registers
  gdn_recurrence_at<TX, HD>(g, L, conv_out_rows(g, L, blockIdx.x), T, *parity ^ invert, replay,
                            static_cast<TX*>(L.y), blockIdx.x);
}

// The group pass: block (value head, entry); y rows beside the other
// entries' in the pass's shared activation rows.
template <typename TX, int HD>
__global__ void __launch_bounds__(kRecThreads, HD ? 2 : 1)
    gdn_recurrence_group_kernel(GdnShape g, const GroupEntry* entries, int layer, TX* y) {
  pdl_prologue();
  const GroupEntry& e = entries[blockIdx.y];
  if (e.T == 0) return;
  const GdnLayer L = e.gdn[layer];
  gdn_recurrence_at<TX, HD>(g, L, conv_out_rows(g, L, blockIdx.x), e.T, *e.parity, 0,
                            y + size_t(e.row) * g.Hv * g.dv, blockIdx.x);
}

// gdn_conv then gdn_recurrence for T <= kGdnStepRows tokens of one layer,
// block (value head). Threads [0, 128) convolve q channel i, threads
// [128, 256) k channel i of the key head, as gdn_conv_at's blocks of 128
// (their l2-norm sums: the 4 warps of each half in order, block_sum's
// shape), and threads [0, dv) the head's v channels. The conv_out rows and
// the new conv state are written as gdn_conv writes them (a key head's
// channels by the first of its value heads), for a later rollback.
constexpr int kStepTaps = 4;  // the step's conv taps at most (Qwen3.5: 4; gdn_step_fits)
constexpr int kStepInputs = kStepTaps - 1 + kGdnStepRows;

// A channel's conv for a step of T tokens. Its inputs, rows [0, K - 1 + T)
// of [conv state; the step's rows], are all loaded before any is used (one
// memory round trip for the whole step, not one per token) into this
// thread's column of shared rows x[kStepInputs][kRecThreads]; its taps stay
// in registers.
struct StepConv {
  float w[kStepTaps];
  float* x;  // this thread's column: row r at x[r * kRecThreads]
  __device__ __forceinline__ void load(const GdnLayer& L, const float* st, int cd, int K, int ch, int T, bool active) {
    float v[kStepInputs];
#pragma unroll
    for (int r = 0; r < kStepInputs; ++r) v[r] = active && r < K - 1 + T ? conv_row(L, st, cd, K, ch, r) : 0.0f;
#pragma unroll
    for (int i = 0; i < kStepTaps; ++i) w[i] = active && i < K ? L.conv_w[size_t(ch) * K + i] : 0.0f;
#pragma unroll
    for (int r = 0; r < kStepInputs; ++r) x[r * kRecThreads] = v[r];
  }
  // Token t's output: conv_channel's arithmetic (the taps in order, then SiLU).
  __device__ __forceinline__ float at(int K, int t) const {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kStepTaps; ++i)
      if (i < K) s = add_rn(s, mul_rn(w[i], x[(t + i) * kRecThreads]));
    return silu(s);
  }
  // The new conv state: input rows [T, T + K - 1).
  __device__ __forceinline__ void store_state(float* nst, int cd, int K, int ch, int T) const {
    for (int r = 0; r < K - 1; ++r) nst[size_t(r) * cd + ch] = x[(T + r) * kRecThreads];
  }
};

template <typename TX, int HD>
__global__ void __launch_bounds__(kRecThreads, 1) gdn_step_kernel(GdnShape g, const GdnLayer* table, int layer, int T,
                                                                  const int* parity) {
  pdl_prologue();
  __shared__ float q_rows[kGdnStepRows][kMaxDk], k_rows[kGdnStepRows][kMaxDk], v_rows[kGdnStepRows][kMaxDk];
  __shared__ float scratch[kRecThreads / 32];
  __shared__ float conv_in[2][kStepInputs][kRecThreads];  // StepConv's rows: q/k channels, v channels
  const GdnLayer L = table[layer];
  const int dk = HD ? HD : g.dk, dv = HD ? HD : g.dv;
  const int h = blockIdx.x, cd = g.conv_dim(), kd = g.Hk * dk, K = HD ? kFullConv : g.K, ratio = g.Hv / g.Hk;
  const int p = *parity & 1;
  const float* st = L.conv_state + size_t(p) * (K - 1) * cd;
  float* nst = L.conv_state + size_t(1 - p) * (K - 1) * cd;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int i = tid % kGdnThreads;
  const bool is_k = tid >= kGdnThreads, qk_active = HD == kMaxDk || i < dk, v_active = tid < dv;
  const bool writes_qk = qk_active && h % ratio == 0;
  const int qk_ch = (is_k ? kd : 0) + (h / ratio) * dk + i, v_ch = 2 * kd + h * dv + tid;
  StepConv qk_conv, v_conv;
  qk_conv.x = &conv_in[0][0][tid];
  v_conv.x = &conv_in[1][0][tid];
  qk_conv.load(L, st, cd, K, qk_ch, T, qk_active);
  v_conv.load(L, st, cd, K, v_ch, T, v_active);
  for (int t = 0; t < T; ++t) {
    const float c = qk_active ? qk_conv.at(K, t) : 0.0f;
    const float v = v_active ? v_conv.at(K, t) : 0.0f;
    const float ss = warp_sum(mul_rn(c, c));
    __syncthreads();  // scratch read for the previous token
    if (lane == 0) scratch[warp] = ss;
    __syncthreads();
    const float head_ss = sum_in_warp_order(scratch + (is_k ? kGdnThreads / 32 : 0), kGdnThreads / 32);
    const float out = qk_normed(c, head_ss, !is_k, dk);
    if (qk_active) (is_k ? k_rows : q_rows)[t][i] = out;
    if (writes_qk) L.conv_out[size_t(t) * cd + qk_ch] = out;
    if (v_active) {
      v_rows[t][tid] = v;
      L.conv_out[size_t(t) * cd + v_ch] = v;
    }
  }
  if (writes_qk) qk_conv.store_state(nst, cd, K, qk_ch, T);
  if (v_active) v_conv.store_state(nst, cd, K, v_ch, T);
  __syncthreads();
  const ConvRows rows{&q_rows[0][0], &k_rows[0][0], &v_rows[0][0], kMaxDk};
  gdn_recurrence_at<TX, HD>(g, L, rows, T, p, 0, static_cast<TX*>(L.y), h);
}

// Rollback of several sequences: block (part, layer, entry); parts
// [0, segs) are the conv-state segments (gdn_conv_kernel's block (seg, T)),
// the rest the value heads of the replayed recurrence. Both read only what
// the verify forward left (the untouched buffers, the chunk's proj and
// conv_out rows), so they run side by side. A round's rollback is many
// waves of latency-bound blocks (48 layers x 48 heads on the 27B): the
// full-head instances of this kernel and the recurrence kernels fit 128
// registers with no spill, so two blocks share a multiprocessor (the step
// kernel's one block per head never fills the GPU: it keeps 1).
template <int HD>
__global__ void __launch_bounds__(kRecThreads, HD ? 2 : 1)
    gdn_rollback_group_kernel(GdnShape g, const GdnReplay* entries, int segs) {
  pdl_prologue();
  const GdnReplay& e = entries[blockIdx.z];
  if (e.T < 0) return;
  const GdnLayer L = e.gdn[blockIdx.y];
  const int parity = *e.parity ^ 1;
  if (int(blockIdx.x) < segs) {
    if (threadIdx.x >= kGdnThreads) return;  // the conv's blocks are kGdnThreads wide; y == T syncs nothing
    gdn_conv_at(g, L, e.T, parity, 1, blockIdx.x, e.T);
  } else {
    const int h = blockIdx.x - segs;
    gdn_recurrence_at<float, HD>(g, L, conv_out_rows(g, L, h), e.T, parity, 1, static_cast<float*>(nullptr), h);
  }
}

// The group pass's GDN in-projection rows of each entry into its own proj
// rows (its conv reads them there; a later rollback replays from them).
// Block (row, entry); the lead's rows are already in place.
__global__ void gdn_scatter_proj_kernel(const GroupEntry* entries, int layer, const float* proj) {
  pdl_prologue();
  const GroupEntry& e = entries[blockIdx.y];
  const int t = blockIdx.x;
  if (t >= e.T) return;
  const GdnLayer& L = e.gdn[layer];
  const float* src = proj + size_t(e.row + t) * L.proj_ld;
  float* dst = const_cast<float*>(L.proj) + size_t(t) * L.proj_ld;
  if (src == dst) return;
  for (int i = threadIdx.x; i < L.proj_ld; i += blockDim.x) dst[i] = src[i];
}

// Whether the kernels' full-head instances (HD = kFullHead) serve g.
bool full_head(const GdnShape& g) { return g.dk == kFullHead && g.dv == kFullHead && g.K == kFullConv; }

// launch(Kernel<TX, HD>::fn), the instance for act and g's head dims.
template <template <typename, int> class Kernel, typename Launch>
void with_instance(const GdnShape& g, Act act, Launch&& launch) {
  const bool full = full_head(g);
  if (act == Act::BF16) full ? launch(Kernel<bf16, kFullHead>::fn) : launch(Kernel<bf16, 0>::fn);
  else full ? launch(Kernel<float, kFullHead>::fn) : launch(Kernel<float, 0>::fn);
}
template <typename TX, int HD> struct RecurrenceKernel { static constexpr auto fn = gdn_recurrence_kernel<TX, HD>; };
template <typename TX, int HD> struct RecurrenceGroupKernel {
  static constexpr auto fn = gdn_recurrence_group_kernel<TX, HD>;
};
template <typename TX, int HD> struct StepKernel { static constexpr auto fn = gdn_step_kernel<TX, HD>; };

}  // namespace

void gdn_conv(const GdnShape& g, const GdnLayer* table, int layer, int n_layers, int T, const int* parity,
              int invert, bool skip_out, cudaStream_t s) {
  if (g.dk > kMaxDk || g.dv > kGdnThreads) fail("gdn: head dims {}x{} above {}", g.dk, g.dv, kMaxDk);
  const int segs = 2 * g.Hk + ceil_div(g.Hv * g.dv, kGdnThreads);
  const dim3 grid(unsigned(segs), unsigned(T + 1), unsigned(n_layers));
  CUDA_CHECK(
      launch_kernel(gdn_conv_kernel, grid, kGdnThreads, 0, s, g, table, layer, T, parity, invert, skip_out ? 1 : 0));
  CUDA_CHECK_LAUNCH("gdn_conv_kernel");
}

void gdn_recurrence(const GdnShape& g, const GdnLayer* table, int layer, int n_layers, int T, const int* parity,
                    int invert, bool replay, Act act, cudaStream_t s) {
  if (g.dk > kMaxDk || g.dv > kGdnThreads) fail("gdn: head dims {}x{} above {}", g.dk, g.dv, kMaxDk);
  const dim3 grid(unsigned(g.Hv), unsigned(n_layers));
  with_instance<RecurrenceKernel>(g, act, [&](auto kernel) {
    CUDA_CHECK(launch_kernel(kernel, grid, kRecThreads, 0, s, g, table, layer, T, parity, invert, replay ? 1 : 0));
  });
  CUDA_CHECK_LAUNCH("gdn_recurrence_kernel");
}

bool gdn_step_fits(const GdnShape& g, int T) {
  return T >= 1 && T <= kGdnStepRows && g.dk <= kMaxDk && g.dv <= kGdnThreads && g.K >= 1 && g.K <= kStepTaps;
}

void gdn_step(const GdnShape& g, const GdnLayer* table, int layer, int T, const int* parity, Act act,
              cudaStream_t s) {
  if (!gdn_step_fits(g, T)) fail("gdn: no one-launch step for {} tokens of head dims {}x{}", T, g.dk, g.dv);
  with_instance<StepKernel>(g, act, [&](auto kernel) {
    CUDA_CHECK(launch_kernel(kernel, dim3(unsigned(g.Hv)), kRecThreads, 0, s, g, table, layer, T, parity));
  });
  CUDA_CHECK_LAUNCH("gdn_step_kernel");
}

void gdn_rollback_group(const GdnShape& g, const GdnReplay* entries, int n_entries, int n_layers, cudaStream_t s) {
  if (g.dk > kMaxDk || g.dv > kGdnThreads) fail("gdn: head dims {}x{} above {}", g.dk, g.dv, kMaxDk);
  const int segs = 2 * g.Hk + ceil_div(g.Hv * g.dv, kGdnThreads);
  const dim3 grid(unsigned(segs + g.Hv), unsigned(n_layers), unsigned(n_entries));
  const auto kernel = full_head(g) ? gdn_rollback_group_kernel<kFullHead> : gdn_rollback_group_kernel<0>;
  CUDA_CHECK(launch_kernel(kernel, grid, kRecThreads, 0, s, g, entries, segs));
  CUDA_CHECK_LAUNCH("gdn_rollback_group_kernel");
}

void gdn_group(const GdnShape& g, const GroupEntry* entries, int n_entries, int max_T, int layer, const float* proj,
               void* y, Act act, cudaStream_t s) {
  if (g.dk > kMaxDk || g.dv > kGdnThreads) fail("gdn: head dims {}x{} above {}", g.dk, g.dv, kMaxDk);
  const unsigned n = unsigned(n_entries);
  CUDA_CHECK(launch_kernel(gdn_scatter_proj_kernel, dim3(unsigned(max_T), n), 256, 0, s, entries, layer, proj));
  const int segs = 2 * g.Hk + ceil_div(g.Hv * g.dv, kGdnThreads);
  CUDA_CHECK(launch_kernel(gdn_conv_group_kernel, dim3(unsigned(segs), unsigned(max_T + 1), n), kGdnThreads, 0, s, g,
                           entries, layer));
  const dim3 grid(unsigned(g.Hv), n);
  with_instance<RecurrenceGroupKernel>(g, act, [&](auto kernel) {
    CUDA_CHECK(launch_kernel(kernel, grid, kRecThreads, 0, s, g, entries, layer, y));  // y: void* to TX*
  });
  CUDA_CHECK_LAUNCH("gdn_group");
}

}  // namespace nextn::cuda
