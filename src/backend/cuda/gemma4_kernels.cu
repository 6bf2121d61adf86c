// The kernels only Gemma 4 needs (gemma4_kernels.h): q/k/v norms + RoPE into
// the KV blocks, sliding-window attention with scale 1.0, GeGLU, the
// sandwich norm into the residual, the MoE block's router input and merge,
// and two elementwise scalings.
//
// Batch invariance: each block computes one (token, head) or one token row
// from that row's inputs, with block-shape-fixed reductions (common.cuh);
// nothing depends on how many rows a launch has. Elementwise arithmetic uses
// the non-contracted mul_rn/add_rn in the CPU reference's order
// (backend/cpu/gemma4*.cpp), so the fp32 mode stays close to it.
#include <algorithm>
#include <cmath>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/gemma4_kernels.h"
#include "backend/cuda/launch.cuh"

namespace nextn::cuda {
namespace {

constexpr int kKeyTile = 32;                           // keys per online-softmax step
constexpr int kAttnThreads = 128;                      // one (token, query head) per block
constexpr int kPerThread = kGemma4MaxHeadDim / kAttnThreads;  // head_dim elements a thread accumulates

// Sum of squares of x[0..n) over the block (fixed shape).
__device__ __forceinline__ float block_sum_sq(const float* x, int n, float* scratch) {
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss = add_rn(ss, mul_rn(x[i], x[i]));
  return block_sum(ss, scratch);
}

// Block (t, h): h < Hq a query head, else KV head h - Hq.
__global__ void __launch_bounds__(128) prepare_kernel(Gemma4AttnShape a, const float* proj, int ld,
                                                      const float* q_norm, const float* k_norm, const float* inv_freq,
                                                      const Gemma4Row* rows, int layer, float* q) {
  pdl_prologue();
  __shared__ float y[kGemma4MaxHeadDim];  // the normed head, before RoPE
  __shared__ float scratch[32];
  const int t = blockIdx.x, h = blockIdx.y, hd = a.hd, half = hd / 2;
  const int p = rows[t].pos;
  const bool is_q = h < a.Hq;
  const Gemma4LayerCache cache = is_q ? Gemma4LayerCache{} : rows[t].caches[layer];  // queries write no cache
  const int kh = h - a.Hq;
  const size_t kv_row = size_t(a.Hkv) * hd;
  const float* row = proj + size_t(t) * ld;
  const float* k_proj = row + size_t(a.Hq) * hd;  // [Hkv][hd]
  const float* src = is_q ? row + size_t(h) * hd : k_proj + size_t(kh) * hd;
  const float* gamma = is_q ? q_norm : k_norm;

  // q / k: RMSNorm with weight, then rotate pairs (i, i + hd/2).
  const float inv = rms_inverse(block_sum_sq(src, hd, scratch), hd, a.eps);
  for (int i = threadIdx.x; i < hd; i += blockDim.x) y[i] = mul_rn(mul_rn(src[i], inv), gamma[i]);
  __syncthreads();
  float* dst = is_q ? q + (size_t(t) * a.Hq + h) * hd : cache.row(cache.k_at, p, kv_row) + size_t(kh) * hd;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = mul_rn(inv_freq[i], float(p));  // inv_freq 0: cos 1, sin 0, the identity
    const float c = cosf(angle), s = sinf(angle);
    const float x0 = y[i], x1 = y[i + half];
    dst[i] = __fsub_rn(mul_rn(x0, c), mul_rn(x1, s));
    dst[i + half] = add_rn(mul_rn(x1, c), mul_rn(x0, s));
  }
  if (is_q) return;  // uniform over the block

  // v: RMSNorm without weight, of the v projection or (K = V) the raw k projection.
  const float* v_src = a.k_eq_v ? src : k_proj + kv_row + size_t(kh) * hd;
  const float v_inv = rms_inverse(block_sum_sq(v_src, hd, scratch), hd, a.eps);
  float* v_dst = cache.row(cache.v_at, p, kv_row) + size_t(kh) * hd;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) v_dst[i] = mul_rn(v_src[i], v_inv);
}

// Block (t, h): query t of head h against its keys, 32 at a time:
//   scores of the tile (one warp per key, lanes over head_dim, butterfly sum)
//   m' = max(m, tile max); weights w_j = exp(s_j - m'); rescale by exp(m - m')
//   l = l * r + sum w_j (key order); acc[d] = acc[d] * r + sum w_j v_j[d] (key order)
// and out = acc / l.
template <typename TO>
__global__ void __launch_bounds__(kAttnThreads) attention_kernel(Gemma4AttnShape a, const float* q,
                                                                 const Gemma4Row* rows, int layer, int window,
                                                                 TO* out) {
  pdl_prologue();
  __shared__ float qs[kGemma4MaxHeadDim];
  __shared__ float w[kKeyTile];  // the tile's scores, then its weights
  const int t = blockIdx.x, h = blockIdx.y, hd = a.hd;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = kAttnThreads / 32;
  const int kh = h / (a.Hq / a.Hkv);
  const size_t kv_row = size_t(a.Hkv) * hd;
  const int p = rows[t].pos;
  const Gemma4LayerCache cache = rows[t].caches[layer];
  const int first = window > 0 ? max(0, p - window + 1) : 0;
  for (int i = threadIdx.x; i < hd; i += kAttnThreads) qs[i] = q[(size_t(t) * a.Hq + h) * hd + i];
  __syncthreads();

  float acc[kPerThread];
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) acc[e] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j0 = first; j0 <= p; j0 += kKeyTile) {
    const int n = min(kKeyTile, p - j0 + 1);
    for (int jj = warp; jj < n; jj += warps) {
      const float* k = cache.row(cache.k_at, j0 + jj, kv_row) + size_t(kh) * hd;
      float d = 0.0f;
      for (int i = lane; i < hd; i += 32) d = add_rn(d, mul_rn(qs[i], k[i]));
      d = warp_sum(d);
      if (lane == 0) w[jj] = d;
    }
    __syncthreads();
    float tile_max = -INFINITY;
    for (int jj = 0; jj < n; ++jj) tile_max = fmaxf(tile_max, w[jj]);
    const float m_new = fmaxf(m, tile_max);
    const float rescale = expf(m - m_new);  // 0 on the first tile (m = -inf)
    __syncthreads();                         // every thread has read the scores
    if (threadIdx.x < n) w[threadIdx.x] = expf(w[threadIdx.x] - m_new);
    __syncthreads();
    float tile_sum = 0.0f;
    for (int jj = 0; jj < n; ++jj) tile_sum = add_rn(tile_sum, w[jj]);
    l = add_rn(mul_rn(l, rescale), tile_sum);
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int i = threadIdx.x + e * kAttnThreads;
      if (i < hd) {
        float s = mul_rn(acc[e], rescale);
        for (int jj = 0; jj < n; ++jj)
          s = add_rn(s, mul_rn(w[jj], cache.row(cache.v_at, j0 + jj, kv_row)[size_t(kh) * hd + i]));
        acc[e] = s;
      }
    }
    m = m_new;
    __syncthreads();  // the next tile rewrites w
  }
  TO* o = out + (size_t(t) * a.Hq + h) * hd;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int i = threadIdx.x + e * kAttnThreads;
    if (i < hd) o[i] = from_f32<TO>(__fdiv_rn(acc[e], l));
  }
}

template <typename TO>
__global__ void __launch_bounds__(256) geglu_kernel(const float* gu, int ld, int I, TO* out, int ldo) {
  pdl_prologue();
  const int t = blockIdx.y;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= I) return;
  const float g = gu[size_t(t) * ld + i], u = gu[size_t(t) * ld + I + i];
  out[size_t(t) * ldo + i] = from_f32<TO>(mul_rn(gelu_tanh(g), u));
}

// One block per row.
__global__ void __launch_bounds__(256) norm_residual_kernel(const float* y, int ldy, const float* gamma, float eps,
                                                            int n, float scale, float* x, int ldx) {
  pdl_prologue();
  __shared__ float scratch[32];
  const float* yr = y + size_t(blockIdx.x) * ldy;
  float* xr = x + size_t(blockIdx.x) * ldx;
  const float inv = rms_inverse(block_sum_sq(yr, n, scratch), n, eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    xr[i] = mul_rn(add_rn(xr[i], mul_rn(mul_rn(yr[i], inv), gamma[i])), scale);
}

// The MoE router's input, one block per row: ((x * inv) * scale[i]) * root,
// the norm without a weight first (as cpu::gemma4_moe_mix).
template <typename TO>
__global__ void __launch_bounds__(256) router_input_kernel(const float* x, int ldx, const float* scale, float root,
                                                           float eps, int n, TO* out, int ldo) {
  pdl_prologue();
  __shared__ float scratch[32];
  const float* xr = x + size_t(blockIdx.x) * ldx;
  const float inv = rms_inverse(block_sum_sq(xr, n, scratch), n, eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    out[size_t(blockIdx.x) * ldo + i] = from_f32<TO>(mul_rn(mul_rn(mul_rn(xr[i], inv), scale[i]), root));
}

// y = rmsnorm(y) * g_mlp + rmsnorm(routed) * g_experts, one block per row
// (in place: both sums of squares are taken before any element is written).
__global__ void __launch_bounds__(256) moe_merge_kernel(float* y, int ldy, const float* routed, int ldr,
                                                        const float* g_mlp, const float* g_experts, float eps, int n) {
  pdl_prologue();
  __shared__ float scratch[32];
  float* yr = y + size_t(blockIdx.x) * ldy;
  const float* rr = routed + size_t(blockIdx.x) * ldr;
  const float inv_y = rms_inverse(block_sum_sq(yr, n, scratch), n, eps);
  const float inv_r = rms_inverse(block_sum_sq(rr, n, scratch), n, eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = add_rn(mul_rn(mul_rn(yr[i], inv_y), g_mlp[i]), mul_rn(mul_rn(rr[i], inv_r), g_experts[i]));
}

__global__ void __launch_bounds__(256) scale_kernel(float* x, int64_t n, float scale) {
  pdl_prologue();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = mul_rn(x[i], scale);
}

__global__ void __launch_bounds__(256) softcap_kernel(float* x, int64_t n, float cap) {
  pdl_prologue();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = mul_rn(tanhf(__fdiv_rn(x[i], cap)), cap);
}

unsigned elementwise_blocks(int64_t n) { return unsigned(std::min<int64_t>(4096, (n + 255) / 256)); }

void check_shape(const Gemma4AttnShape& a) {
  if (a.hd < 2 || a.hd % 2 != 0 || a.hd > kGemma4MaxHeadDim)
    fail("--backend cuda: Gemma 4 head_dim {} (an even number up to {})", a.hd, kGemma4MaxHeadDim);
  if (a.Hkv < 1 || a.Hq % a.Hkv != 0) fail("--backend cuda: {} query heads over {} KV heads", a.Hq, a.Hkv);
}

}  // namespace

void gemma4_attn_prepare(const Gemma4AttnShape& a, const float* proj, int ld, int T, const float* q_norm,
                         const float* k_norm, const float* inv_freq, const Gemma4Row* rows, int layer, float* q,
                         cudaStream_t s) {
  check_shape(a);
  const dim3 grid(unsigned(T), unsigned(a.Hq + a.Hkv));
  CUDA_CHECK(launch_kernel(prepare_kernel, grid, 128, 0, s, a, proj, ld, q_norm, k_norm, inv_freq, rows, layer, q));
  CUDA_CHECK_LAUNCH("gemma4 prepare_kernel");
}

void gemma4_query_prepare(const Gemma4AttnShape& a, const float* proj, int ld, int T, const float* q_norm,
                          const float* inv_freq, const Gemma4Row* rows, float* q, cudaStream_t s) {
  check_shape(a);
  const dim3 grid(unsigned(T), unsigned(a.Hq));  // query heads only: no block writes a cache
  CUDA_CHECK(launch_kernel(prepare_kernel, grid, 128, 0, s, a, proj, ld, q_norm, q_norm, inv_freq, rows, 0, q));
  CUDA_CHECK_LAUNCH("gemma4 prepare_kernel (queries)");
}

void gemma4_attention(const Gemma4AttnShape& a, const float* q, const Gemma4Row* rows, int layer, int T, int window,
                      void* out, Act act, cudaStream_t s) {
  check_shape(a);
  const dim3 grid(unsigned(T), unsigned(a.Hq));
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(attention_kernel<bf16>, grid, kAttnThreads, 0, s, a, q, rows, layer, window,
                             static_cast<bf16*>(out)));
  else
    CUDA_CHECK(launch_kernel(attention_kernel<float>, grid, kAttnThreads, 0, s, a, q, rows, layer, window,
                             static_cast<float*>(out)));
  CUDA_CHECK_LAUNCH("gemma4 attention_kernel");
}

void gemma4_geglu(const float* gu, int ld, int I, int T, void* out, Act act, int ldo, cudaStream_t s) {
  const dim3 grid(unsigned(ceil_div(I, 256)), unsigned(T));
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(geglu_kernel<bf16>, grid, 256, 0, s, gu, ld, I, static_cast<bf16*>(out), ldo));
  else
    CUDA_CHECK(launch_kernel(geglu_kernel<float>, grid, 256, 0, s, gu, ld, I, static_cast<float*>(out), ldo));
  CUDA_CHECK_LAUNCH("gemma4 geglu_kernel");
}

void gemma4_norm_residual(const float* y, int ldy, const float* gamma, float eps, int T, int n, float scale, float* x,
                          int ldx, cudaStream_t s) {
  CUDA_CHECK(launch_kernel(norm_residual_kernel, unsigned(T), 256, 0, s, y, ldy, gamma, eps, n, scale, x, ldx));
  CUDA_CHECK_LAUNCH("gemma4 norm_residual_kernel");
}

void gemma4_router_input(const float* x, int ldx, const float* scale, float root, float eps, int T, int n, void* out,
                         Act act, int ldo, cudaStream_t s) {
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(router_input_kernel<bf16>, unsigned(T), 256, 0, s, x, ldx, scale, root, eps, n,
                             static_cast<bf16*>(out), ldo));
  else
    CUDA_CHECK(launch_kernel(router_input_kernel<float>, unsigned(T), 256, 0, s, x, ldx, scale, root, eps, n,
                             static_cast<float*>(out), ldo));
  CUDA_CHECK_LAUNCH("gemma4 router_input_kernel");
}

void gemma4_moe_merge(float* y, int ldy, const float* routed, int ldr, const float* g_mlp, const float* g_experts,
                      float eps, int T, int n, cudaStream_t s) {
  CUDA_CHECK(launch_kernel(moe_merge_kernel, unsigned(T), 256, 0, s, y, ldy, routed, ldr, g_mlp, g_experts, eps, n));
  CUDA_CHECK_LAUNCH("gemma4 moe_merge_kernel");
}

void scale_floats(float* x, int64_t n, float scale, cudaStream_t s) {
  CUDA_CHECK(launch_kernel(scale_kernel, elementwise_blocks(n), 256, 0, s, x, n, scale));
  CUDA_CHECK_LAUNCH("scale_kernel");
}

void softcap_floats(float* x, int64_t n, float cap, cudaStream_t s) {
  CUDA_CHECK(launch_kernel(softcap_kernel, elementwise_blocks(n), 256, 0, s, x, n, cap));
  CUDA_CHECK_LAUNCH("softcap_kernel");
}

}  // namespace nextn::cuda
