// Gated causal attention for a prefill chunk (many query rows) on tensor
// cores, bf16 mode only: the same result as attention() (attention.cu) up to
// bf16 rounding of q and of the softmax weights, in one launch instead of one
// per 64 queries, and with mma.sync instead of scalar dot products.
//
// Block (64-query tile, q head), 4 warps of 16 query rows. The block walks the
// head's keys in tiles of 64 from key 0 to the tile's last visible key:
// S = Q K^T (m16n8k16, bf16 in, fp32 accumulation), the causal mask (query at
// absolute position pos0 + t sees keys [0, pos0 + t]), an online softmax in
// fp32 (running max and sum per row, exp2 with the scale folded in), then
// O += P V with P rounded to bf16. Fragments come from shared memory through
// ldmatrix (rows padded by 16 bytes: no bank conflicts). K and V tiles come in through cp.async,
// the next K tile while this one's P V runs. The end: O / sum * sigmoid(gate).
// Not batch-invariant in the decode kernel's sense (another summation order),
// which prefill does not need: greedy and speculative decoding run the same
// prefill.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"

namespace nextn::cuda {
namespace {

constexpr int kQTile = 64;   // query rows per block (16 per warp)
constexpr int kKTile = 64;   // keys per shared-memory tile
constexpr int kThreads = 128;
constexpr int kPad = 8;      // bf16 elements of row padding: rows 16 bytes off banks, no ldmatrix conflicts

template <int HD>
constexpr int row_stride() { return HD + kPad; }
template <int HD>
constexpr size_t smem_bytes() { return size_t(3) * kQTile * row_stride<HD>() * sizeof(bf16); }  // Q, K, V tiles

// Keys (which 0) or values (1) [key0, key0 + 64) of one kv head into `dst`
// ([64][HD + kPad]): one KV block, key0 a multiple of 64; rows at or past nk
// become zeros (a masked key must still have finite V: P = 0 times NaN
// would be NaN), and a tile wholly past nk reads no block.
static_assert(kKTile == kKvBlockTokens, "a key tile is one KV block");
template <int HD>
__device__ __forceinline__ void load_kv_tile(bf16* dst, const KvBlocks& kv, int which, int Hkv, int kvh, int key0,
                                             int nk) {
  constexpr int chunks = HD / 8;  // 16-byte pieces per row
  const bf16* block = key0 < nk ? kv_row<bf16>(kv, which, key0, Hkv * HD) : nullptr;
  for (int i = threadIdx.x; i < kKTile * chunks; i += kThreads) {
    const int r = i / chunks, c = i % chunks, key = key0 + r;
    bf16* d = dst + r * row_stride<HD>() + c * 8;
    if (key < nk)
      cp_async16(d, block + (size_t(r) * Hkv + kvh) * HD + c * 8);
    else
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
  }
}

// q: fp32 [T][Hq][HD] (after attn_prepare); caches bf16 in KV blocks (kernels.h, KvBlocks);
// proj: fp32 [T][ld], the gate of head h at h * 2 HD + HD; out: bf16
// [T][Hq * HD]. pos0: the absolute position of row 0.
template <int HD>
__global__ void __launch_bounds__(kThreads) attn_prefill_kernel(AttnShape a, const float* q, KvBlocks kv,
                                                                const float* proj, int ld, int T,
                                                                const int* pos0_ptr, float scale_log2, bf16* out) {
  pdl_prologue();
  constexpr int S = row_stride<HD>();
  constexpr int NT = HD / 8;  // n-tiles of the output row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* Ks = Qs + kQTile * S;
  bf16* Vs = Ks + kKTile * S;

  const int h = blockIdx.y, kvh = h / (a.Hq / a.Hkv);
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kQTile;  // the longest tiles first
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int mi = lane >> 3, mr = lane & 7;  // ldmatrix: the matrix and row this lane addresses
  const int pos0 = *pos0_ptr;
  const int rows = min(kQTile, T - q0);
  const int nk = pos0 + q0 + rows;  // keys the tile's last row sees
  const int ntiles = (nk + kKTile - 1) / kKTile;

  // Q tile to bf16 (rows past T as zeros; their outputs are not written).
  for (int i = threadIdx.x; i < kQTile * HD / 2; i += kThreads) {
    const int r = i / (HD / 2), d = (i % (HD / 2)) * 2;
    float2 v = make_float2(0.0f, 0.0f);
    if (r < rows) v = *reinterpret_cast<const float2*>(q + (size_t(q0 + r) * a.Hq + h) * HD + d);
    *reinterpret_cast<__nv_bfloat162*>(Qs + r * S + d) = __floats2bfloat162_rn(v.x, v.y);
  }
  load_kv_tile<HD>(Ks, kv, 0, a.Hkv, kvh, 0, nk);
  cp_async_commit();
  load_kv_tile<HD>(Vs, kv, 1, a.Hkv, kvh, 0, nk);
  cp_async_commit();

  const int r0 = warp * 16;
  const int qp_lo = pos0 + q0 + r0 + g, qp_hi = qp_lo + 8;  // absolute positions of rows g and g + 8
  const int warp_last = pos0 + q0 + r0 + 15;                // the warp's last visible key
  float O[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) O[n][0] = O[n][1] = O[n][2] = O[n][3] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;  // l: this lane's part of the row sum

  for (int kt = 0; kt < ntiles; ++kt) {
    const int k0 = kt * kKTile;
    cp_async_wait<1>();  // K tile kt has landed (V tile kt may still be in flight)
    __syncthreads();
    const bool active = k0 <= warp_last;  // else every key of the tile is masked for this warp
    float Sacc[8][4];
    if (active) {
#pragma unroll
      for (int n = 0; n < 8; ++n) Sacc[n][0] = Sacc[n][1] = Sacc[n][2] = Sacc[n][3] = 0.0f;
#pragma unroll 4
      for (int ks = 0; ks < HD / 16; ++ks) {
        uint32_t qa[4];  // A fragment: rows r0.. r0 + 15, dims ks * 16 ..
        ldmatrix_x4(qa, Qs + (r0 + mr + (mi & 1) * 8) * S + ks * 16 + (mi >> 1) * 8);
#pragma unroll
        for (int np = 0; np < 4; ++np) {  // B fragments of key n-tiles 2 np, 2 np + 1
          uint32_t kb[4];
          ldmatrix_x4(kb, Ks + ((2 * np + (mi >> 1)) * 8 + mr) * S + ks * 16 + (mi & 1) * 8);
          mma_bf16(Sacc[2 * np], qa[0], qa[1], qa[2], qa[3], kb[0], kb[1]);
          mma_bf16(Sacc[2 * np + 1], qa[0], qa[1], qa[2], qa[3], kb[2], kb[3]);
        }
      }
    }
    cp_async_wait<0>();  // V tile kt has landed
    __syncthreads();     // and every warp is done with Ks
    if (kt + 1 < ntiles) {
      load_kv_tile<HD>(Ks, kv, 0, a.Hkv, kvh, k0 + kKTile, nk);
      cp_async_commit();
    }
    if (active) {
      // Scale (log2 domain), mask, row max over the tile.
      float mt_lo = -INFINITY, mt_hi = -INFINITY;
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + n * 8 + 2 * c + (e & 1);
          const bool hi = e >= 2;
          float s = Sacc[n][e] * scale_log2;
          if (key > (hi ? qp_hi : qp_lo)) s = -INFINITY;
          Sacc[n][e] = s;
          if (hi) mt_hi = fmaxf(mt_hi, s);
          else mt_lo = fmaxf(mt_lo, s);
        }
#pragma unroll
      for (int off = 1; off < 4; off <<= 1) {
        mt_lo = fmaxf(mt_lo, __shfl_xor_sync(0xffffffffu, mt_lo, off));
        mt_hi = fmaxf(mt_hi, __shfl_xor_sync(0xffffffffu, mt_hi, off));
      }
      // Key 0 is in tile 0 and visible to every row, so the maxima are finite from tile 0 on.
      const float mn_lo = fmaxf(m_lo, mt_lo), mn_hi = fmaxf(m_hi, mt_hi);
      const float al_lo = exp2f(m_lo - mn_lo), al_hi = exp2f(m_hi - mn_hi);  // 0 at tile 0
      m_lo = mn_lo;
      m_hi = mn_hi;
      float ps_lo = 0.0f, ps_hi = 0.0f;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        Sacc[n][0] = exp2f(Sacc[n][0] - mn_lo);
        Sacc[n][1] = exp2f(Sacc[n][1] - mn_lo);
        Sacc[n][2] = exp2f(Sacc[n][2] - mn_hi);
        Sacc[n][3] = exp2f(Sacc[n][3] - mn_hi);
        ps_lo += Sacc[n][0] + Sacc[n][1];
        ps_hi += Sacc[n][2] + Sacc[n][3];
      }
      l_lo = l_lo * al_lo + ps_lo;
      l_hi = l_hi * al_hi + ps_hi;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        O[n][0] *= al_lo;
        O[n][1] *= al_lo;
        O[n][2] *= al_hi;
        O[n][3] *= al_hi;
      }
      // O += P V: the S accumulators of key n-tiles 2j, 2j + 1 are the A
      // fragment of k-step j; V's B fragments through ldmatrix.trans.
#pragma unroll
      for (int j = 0; j < kKTile / 16; ++j) {
        const uint32_t p0 = pack_bf16(Sacc[2 * j][0], Sacc[2 * j][1]), p1 = pack_bf16(Sacc[2 * j][2], Sacc[2 * j][3]);
        const uint32_t p2 = pack_bf16(Sacc[2 * j + 1][0], Sacc[2 * j + 1][1]);
        const uint32_t p3 = pack_bf16(Sacc[2 * j + 1][2], Sacc[2 * j + 1][3]);
        const bf16* vrow = Vs + (j * 16 + mr + (mi & 1) * 8) * S + (mi >> 1) * 8;
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vrow + np * 16);
          mma_bf16(O[2 * np], p0, p1, p2, p3, b[0], b[1]);
          mma_bf16(O[2 * np + 1], p0, p1, p2, p3, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with Vs
    if (kt + 1 < ntiles) {
      load_kv_tile<HD>(Vs, kv, 1, a.Hkv, kvh, k0 + kKTile, nk);
      cp_async_commit();
    }
  }

#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int t = q0 + r0 + g + half * 8;
    if (t >= T) continue;
    const float inv = half ? inv_hi : inv_lo;
    const float* gate = proj + size_t(t) * ld + size_t(h) * 2 * HD + HD;
    bf16* o = out + (size_t(t) * a.Hq + h) * HD;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int d = n * 8 + 2 * c;
      const float v0 = O[n][2 * half] * inv * sigmoid(gate[d]);
      const float v1 = O[n][2 * half + 1] * inv * sigmoid(gate[d + 1]);
      *reinterpret_cast<__nv_bfloat162*>(o + d) = __floats2bfloat162_rn(v0, v1);
    }
  }
}

template <int HD>
void launch_prefill(const AttnShape& a, const float* q, KvBlocks kv, const float* proj, int ld, int T, const int* pos,
                    void* out, cudaStream_t s) {
  constexpr size_t smem = smem_bytes<HD>();
  CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(unsigned(ceil_div(T, kQTile)), unsigned(a.Hq));
  const float scale_log2 = 1.4426950408889634f / sqrtf(float(HD));  // log2(e) / sqrt(hd)
  CUDA_CHECK(launch_kernel(attn_prefill_kernel<HD>, grid, kThreads, smem, s, a, q, kv, proj, ld, T, pos, scale_log2,
                           static_cast<bf16*>(out)));
  CUDA_CHECK_LAUNCH("attn_prefill_kernel");
}

}  // namespace

bool attention_prefill_supports(const AttnShape& a) {
  return (a.hd == 64 || a.hd == 128 || a.hd == 256) && a.Hkv > 0 && a.Hq % a.Hkv == 0;
}

void attention_prefill(const AttnShape& a, const float* q, KvBlocks kv, const float* proj, int ld, int T,
                       const int* pos, void* out, cudaStream_t s) {
  if (T <= 0) return;
  switch (a.hd) {
    case 64: launch_prefill<64>(a, q, kv, proj, ld, T, pos, out, s); break;
    case 128: launch_prefill<128>(a, q, kv, proj, ld, T, pos, out, s); break;
    case 256: launch_prefill<256>(a, q, kv, proj, ld, T, pos, out, s); break;
    default: fail("attention_prefill: head_dim {} unsupported (64, 128 or 256)", a.hd);
  }
}

}  // namespace nextn::cuda
