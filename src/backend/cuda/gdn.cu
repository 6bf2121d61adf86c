// Gated DeltaNet (model-spec A.4), decode and verify: token by token.
//
// gdn_conv: the causal depthwise conv over [conv state ; this step's pre-conv
// rows], SiLU, then per key head the l2 norm of q and k (q also scaled by
// dk^-1/2); and the new conv state (the last K-1 pre-conv rows).
// gdn_recurrence: one block per value head, the fp32 state column of each
// thread in registers, tokens in order; then the gated RMSNorm per head.
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
  auto hist = [&](int j) {  // row j of [state (K-1 rows) ; pre-conv rows of this step]
    return j < K - 1 ? st[size_t(j) * cd + ch] : L.proj[size_t(j - (K - 1)) * L.proj_ld + ch];
  };
  if (y == T) {
    if (active)
      for (int r = 0; r < K - 1; ++r) nst[size_t(r) * cd + ch] = hist(T + r);
    return;
  }
  if (skip_out) return;
  const int t = y;
  float c = 0.0f;
  if (active) {
    const float* w = L.conv_w + size_t(ch) * K;
    float s = 0.0f;
    for (int i = 0; i < K; ++i) s = add_rn(s, mul_rn(w[i], hist(t + i)));
    c = silu(s);
  }
  if (kind != 2) {  // l2 norm over the head (eps 1e-6), q also scaled
    const float ss = block_sum(mul_rn(c, c), scratch);
    c = mul_rn(c, __fdiv_rn(1.0f, __fsqrt_rn(add_rn(ss, 1e-6f))));
    if (kind == 0) c = mul_rn(c, __fdiv_rn(1.0f, __fsqrt_rn(float(g.dk))));
  }
  if (active) L.conv_out[size_t(t) * cd + ch] = c;
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

// y_rows: where token t's gated-norm output goes (row t, [rows][Hv*dv]).
template <typename TX>
__device__ void gdn_recurrence_at(const GdnShape& g, const GdnLayer& L, int T, int parity, int replay, TX* y_rows,
                                  int h) {
  __shared__ float qs[kMaxDk], ks[kMaxDk];
  __shared__ float red_mem[2][kGdnThreads], red_o[2][kGdnThreads];
  __shared__ float scratch[32];
  const int cd = g.conv_dim(), kd = g.Hk * g.dk, vd = g.Hv * g.dv, dk = g.dk, dv = g.dv;
  const int hk = h / (g.Hv / g.Hk);
  const int j = threadIdx.x % kGdnThreads, part = threadIdx.x / kGdnThreads, i0 = part * kRowsPerPart;
  const bool active = j < dv;
  const int p = parity & 1;
  const size_t state = size_t(g.Hv) * dk * dv;
  const float* src = L.S + size_t(p) * state + size_t(h) * dk * dv;
  float* dst = L.S + size_t(1 - p) * state + size_t(h) * dk * dv;

  float s[kRowsPerPart];
#pragma unroll
  for (int ii = 0; ii < kRowsPerPart; ++ii) s[ii] = (i0 + ii < dk && active) ? src[size_t(i0 + ii) * dv + j] : 0.0f;
  const float neg_a = -expf(L.a_log[h]), dt_bias = L.dt_bias[h];

  // Token t's inputs are loaded while token t - 1 computes (their global
  // latency is otherwise on the sequential path of every token); the
  // arithmetic is unchanged.
  const bool loads_qk = int(threadIdx.x) < dk;
  float nq = 0.0f, nk = 0.0f, nv = 0.0f, nb = 0.0f, ng = 0.0f, nz = 0.0f;
  auto load = [&](int t) {
    const float* co = L.conv_out + size_t(t) * cd;
    const float* pr = L.proj + size_t(t) * L.proj_ld;
    if (loads_qk) {
      nq = co[hk * dk + threadIdx.x];
      nk = co[kd + hk * dk + threadIdx.x];
    }
    nv = active ? co[2 * kd + h * dv + j] : 0.0f;
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
      if (i0 + ii < dk) {
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
      if (i0 + ii < dk) {
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
      if (i0 + ii < dk) dst[size_t(i0 + ii) * dv + j] = s[ii];
  }
}


template <typename TX>
__global__ void __launch_bounds__(kRecThreads, 1) gdn_recurrence_kernel(GdnShape g, const GdnLayer* table,
                                                                        int layer0, int T, const int* parity,
                                                                        int invert, int replay) {
  pdl_prologue();
  const GdnLayer L = table[layer0 + blockIdx.y];  // the pointers in registers
  gdn_recurrence_at(g, L, T, *parity ^ invert, replay, static_cast<TX*>(L.y), blockIdx.x);
}

// The group pass: block (value head, entry); y rows beside the other
// entries' in the pass's shared activation rows.
template <typename TX>
__global__ void __launch_bounds__(kRecThreads, 1) gdn_recurrence_group_kernel(GdnShape g, const GroupEntry* entries,
                                                                              int layer, TX* y) {
  pdl_prologue();
  const GroupEntry& e = entries[blockIdx.y];
  if (e.T == 0) return;
  const GdnLayer L = e.gdn[layer];
  gdn_recurrence_at(g, L, e.T, *e.parity, 0, y + size_t(e.row) * g.Hv * g.dv, blockIdx.x);
}

// Rollback of several sequences: block (part, layer, entry); parts
// [0, segs) are the conv-state segments (gdn_conv_kernel's block (seg, T)),
// the rest the value heads of the replayed recurrence. Both read only what
// the verify forward left (the untouched buffers, the chunk's proj and
// conv_out rows), so they run side by side.
__global__ void __launch_bounds__(kRecThreads, 1) gdn_rollback_group_kernel(GdnShape g, const GdnReplay* entries,
                                                                            int segs) {
  pdl_prologue();
  const GdnReplay& e = entries[blockIdx.z];
  if (e.T < 0) return;
  const GdnLayer L = e.gdn[blockIdx.y];
  const int parity = *e.parity ^ 1;
  if (int(blockIdx.x) < segs) {
    if (threadIdx.x >= kGdnThreads) return;  // the conv's blocks are kGdnThreads wide; y == T syncs nothing
    gdn_conv_at(g, L, e.T, parity, 1, blockIdx.x, e.T);
  } else {
    gdn_recurrence_at(g, L, e.T, parity, 1, static_cast<float*>(nullptr), blockIdx.x - segs);
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

}  // namespace

void gdn_conv(const GdnShape& g, const GdnLayer* table, int layer, int n_layers, int T, const int* parity,
              int invert, bool skip_out, cudaStream_t s) {
  if (g.dk > kMaxDk || g.dv > kGdnThreads) fail("gdn: head dims {}x{} above {}", g.dk, g.dv, kMaxDk);
  const int segs = 2 * g.Hk + ceil_div(g.Hv * g.dv, kGdnThreads);
  const dim3 grid(unsigned(segs), unsigned(T + 1), unsigned(n_layers));
  CUDA_CHECK(launch_kernel(gdn_conv_kernel, grid, kGdnThreads, 0, s, g, table, layer, T, parity, invert, skip_out ? 1 : 0));
  CUDA_CHECK_LAUNCH("gdn_conv_kernel");
}

void gdn_recurrence(const GdnShape& g, const GdnLayer* table, int layer, int n_layers, int T, const int* parity,
                    int invert, bool replay, Act act, cudaStream_t s) {
  if (g.dk > kMaxDk || g.dv > kGdnThreads) fail("gdn: head dims {}x{} above {}", g.dk, g.dv, kMaxDk);
  const dim3 grid(unsigned(g.Hv), unsigned(n_layers));
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(gdn_recurrence_kernel<bf16>, grid, kRecThreads, 0, s, g, table, layer, T, parity, invert, replay ? 1 : 0));
  else
    CUDA_CHECK(launch_kernel(gdn_recurrence_kernel<float>, grid, kRecThreads, 0, s, g, table, layer, T, parity, invert, replay ? 1 : 0));
  CUDA_CHECK_LAUNCH("gdn_recurrence_kernel");
}

void gdn_rollback_group(const GdnShape& g, const GdnReplay* entries, int n_entries, int n_layers, cudaStream_t s) {
  if (g.dk > kMaxDk || g.dv > kGdnThreads) fail("gdn: head dims {}x{} above {}", g.dk, g.dv, kMaxDk);
  const int segs = 2 * g.Hk + ceil_div(g.Hv * g.dv, kGdnThreads);
  const dim3 grid(unsigned(segs + g.Hv), unsigned(n_layers), unsigned(n_entries));
  CUDA_CHECK(launch_kernel(gdn_rollback_group_kernel, grid, kRecThreads, 0, s, g, entries, segs));
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
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(gdn_recurrence_group_kernel<bf16>, grid, kRecThreads, 0, s, g, entries, layer,
                             static_cast<bf16*>(y)));
  else
    CUDA_CHECK(launch_kernel(gdn_recurrence_group_kernel<float>, grid, kRecThreads, 0, s, g, entries, layer,
                             static_cast<float*>(y)));
  CUDA_CHECK_LAUNCH("gdn_group");
}

}  // namespace nextn::cuda
