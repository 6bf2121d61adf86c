// Gated full attention over the KV cache (model-spec A.5), for 1..64 queries.
//
// attn_prepare: per (head, token) RMSNorm of q and k, partial rotate-half
// RoPE at the token's absolute position, K/V stored into the cache.
// attention: keys split at fixed 256-key boundaries counted from key 0, one
// partial (max, sum, weighted values) per split computed in a fixed order,
// then the splits combined in split order by the last of the query's blocks
// to finish (one launch). A query's result depends only on its position and
// the cache, never on how many queries share the launch.
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/kernels.h"
#include "core/error.h"

namespace nextn::cuda {
namespace {

constexpr int kMaxHeadDim = 256;
// The split kernel: 8 warps; lane l of a warp owns dims [8l, 8l + 8) of a
// key or value row (one 16-byte load in bf16). A warp takes every 8th key
// of the split, kKeyBatch (scores) or kValueBatch (values) of them per
// memory round trip, loaded before any is used. At short contexts a split
// is one block per (head, query), so its latency is the kernel's: the
// first form (4 warps, a key per round trip) took 68 us per 0.8B decode
// call at 144 keys.
constexpr int kAttnThreads = 256;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kLaneDims = 8;
constexpr int kKeyBatch = 8;
constexpr int kValueBatch = 8;
static_assert(32 * kLaneDims == kMaxHeadDim);
constexpr unsigned kGroupAttnSlots = 16;  // split slots per (head, token) in a group pass (the solo cap)

// Head h of token t: rows of proj and qout from the slice's first row on.
template <typename TX>
__device__ void attn_prepare_at(const AttnShape& a, const float* proj, int ld, const float* q_norm,
                                const float* k_norm, const float* inv_freq, int pos0, float* qout, KvBlocks kv,
                                int h, int t) {
  __shared__ float scratch[32];
  __shared__ float xn[kMaxHeadDim];
  const int d = threadIdx.x, hd = a.hd;
  const int pos = pos0 + t;
  const bool is_q = h < a.Hq;
  const float* row = proj + size_t(t) * ld;
  const float* src = is_q ? row + size_t(h) * 2 * hd : row + size_t(a.Hq) * 2 * hd + size_t(h - a.Hq) * hd;
  const float v = src[d];
  const float ss = block_sum(mul_rn(v, v), scratch);
  const float inv = rms_inverse(ss, hd, a.eps);
  xn[d] = mul_rn(mul_rn(v, inv), (is_q ? q_norm : k_norm)[d]);
  __syncthreads();
  float out = xn[d];
  const int half = a.rd / 2;
  if (d < a.rd) {  // rotate-half inside the first rd dims: pairs (i, i + rd/2)
    const int i = d < half ? d : d - half;
    const float angle = mul_rn(inv_freq[i], float(pos));
    const float c = cosf(angle), s = sinf(angle);
    out = d < half ? __fsub_rn(mul_rn(xn[d], c), mul_rn(xn[d + half], s))
                   : add_rn(mul_rn(xn[d], c), mul_rn(xn[d - half], s));
  }
  if (is_q) {
    qout[(size_t(t) * a.Hq + h) * hd + d] = out;
  } else {
    const int j = h - a.Hq;
    const int kv_elems = a.Hkv * hd;
    kv_row<TX>(kv, 0, pos, kv_elems)[j * hd + d] = from_f32<TX>(out);
    kv_row<TX>(kv, 1, pos, kv_elems)[j * hd + d] =
        from_f32<TX>(row[size_t(a.Hq) * 2 * hd + size_t(a.Hkv) * hd + size_t(j) * hd + d]);
  }
}

template <typename TX>
__global__ void __launch_bounds__(kMaxHeadDim) attn_prepare_kernel(AttnShape a, const float* proj, int ld,
                                                                   const float* q_norm, const float* k_norm,
                                                                   const float* inv_freq, const int* pos0,
                                                                   float* qout, KvBlocks kv) {
  pdl_prologue();
  attn_prepare_at<TX>(a, proj, ld, q_norm, k_norm, inv_freq, *pos0, qout, kv, blockIdx.x, blockIdx.y);
}

// The group pass: block (head, token, entry), each entry its own cache and position.
template <typename TX>
__global__ void __launch_bounds__(kMaxHeadDim) attn_prepare_group_kernel(AttnShape a, const GroupEntry* entries,
                                                                         int kv_layer, const float* proj, int ld,
                                                                         const float* q_norm, const float* k_norm,
                                                                         const float* inv_freq, float* qout) {
  pdl_prologue();
  const GroupEntry& e = entries[blockIdx.z];
  if (int(blockIdx.y) >= e.T) return;
  attn_prepare_at<TX>(a, proj + size_t(e.row) * ld, ld, q_norm, k_norm, inv_freq, *e.pos,
                      qout + size_t(e.row) * a.Hq * a.hd, KvBlocks{e.kv_blocks, kv_layer}, blockIdx.x, blockIdx.y);
}

// Eight consecutive elements of a K or V row, as loaded (one bf16 uint4, or
// two fp32 float4), then as floats.
template <typename TX>
struct Row8;
template <>
struct Row8<bf16> {
  uint4 v;
  __device__ __forceinline__ void load(const bf16* p) { v = *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ void zero() { v = make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ float at(int i) const {
    const uint32_t w = (&v.x)[i >> 1];
    return __uint_as_float((i & 1) ? (w & 0xffff0000u) : (w << 16));
  }
};
template <>
struct Row8<float> {
  float4 a, b;
  __device__ __forceinline__ void load(const float* p) {
    a = reinterpret_cast<const float4*>(p)[0];
    b = reinterpret_cast<const float4*>(p)[1];
  }
  __device__ __forceinline__ void zero() { a = b = make_float4(0, 0, 0, 0); }
  __device__ __forceinline__ float at(int i) const { return i < 4 ? (&a.x)[i] : (&b.x)[i - 4]; }
};

// Row j of a split's keys (which 0) or values (1): the split's keys lie in
// kSplitBlocks cache blocks (a split starts on a block boundary), whose
// addresses the block reads once per split, so a batch of rows costs one
// memory round trip, not two (kv_row reads the block table per row).
constexpr int kSplitBlocks = kAttnSplit / kKvBlockTokens;
static_assert(kAttnSplit % kKvBlockTokens == 0);
template <typename TX>
__device__ __forceinline__ const TX* split_row(void* const* blocks, const KvBlocks& kv, int which, int j, int row) {
  return static_cast<const TX*>(blocks[j / kKvBlockTokens]) +
         (size_t(kv.layer * 2 + which) * kKvBlockTokens + size_t(j % kKvBlockTokens)) * size_t(row);
}

// Head h of token t, dim d = threadIdx.x: combine the splits in split order,
// divide, gate. The partials come from other blocks: read through L2.
template <typename TX>
__device__ void attn_combine_at(const AttnShape& a, const float* partial, int max_splits, const float* proj, int ld,
                                int pos0, TX* out, int h, int t) {
  const int d = threadIdx.x, hd = a.hd;
  const int nk = pos0 + t + 1;
  const int nsplit = (nk + kAttnSplit - 1) / kAttnSplit;
  const float* base = partial + (size_t(t) * a.Hq + h) * max_splits * (hd + 2);
  float M = -INFINITY;
  for (int s = 0; s < nsplit; ++s) M = fmaxf(M, __ldcg(base + size_t(s) * (hd + 2)));
  float L = 0.0f, O = 0.0f;
  for (int s = 0; s < nsplit; ++s) {
    const float* p = base + size_t(s) * (hd + 2);
    const float e = expf(__fsub_rn(__ldcg(p), M));
    L = add_rn(L, mul_rn(__ldcg(p + 1), e));
    O = add_rn(O, mul_rn(__ldcg(p + 2 + d), e));
  }
  const float gate = proj[size_t(t) * ld + size_t(h) * 2 * hd + hd + d];
  out[size_t(t) * a.Hq * hd + size_t(h) * hd + d] = from_f32<TX>(mul_rn(__fdiv_rn(O, L), sigmoid(gate)));
}

// The partial buffer: a counter per (token, head) first (kMaxRows x Hq ints,
// zero between calls), then the partials [T][Hq][max_splits][hd + 2].
__host__ __device__ constexpr int counter_floats(const AttnShape& a) { return (kMaxRows * a.Hq + 31) / 32 * 32; }

// One split of query (h, t)'s keys, in a fixed order whatever the number of
// queries: score j = scale * (the warp's butterfly over its lanes of each
// lane's 8 products in dim order); the softmax over the split; each warp's
// weighted values over its keys (j = w, w + 8, ... in order), then the warps'
// sums in warp order.
//
// Then the block counts itself in at (t, h)'s counter; the last of the
// query's working blocks (slots < nsplit do no split) combines the splits
// into out, row t (attn_combine_at), and zeroes the counter.
template <typename TX>
__device__ void attn_split_at(const AttnShape& a, const float* q, KvBlocks kv, int pos0, int max_splits, float scale,
                              float* buffer, int slot, int slots, int h, int t, const float* proj, int ld, TX* out) {
  __shared__ int last;
  int* counter = reinterpret_cast<int*>(buffer) + t * a.Hq + h;
  float* partial = buffer + counter_floats(a);
  __shared__ float qs[kMaxHeadDim];
  __shared__ float sc[kAttnSplit];
  __shared__ float part[kAttnWarps][kMaxHeadDim];
  __shared__ float scratch[32];
  __shared__ void* blocks[kSplitBlocks];
  const int hd = a.hd;
  const int kvh = h / (a.Hq / a.Hkv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kv_elems = a.Hkv * hd;
  const int nk = pos0 + t + 1;
  const int nsplit = (nk + kAttnSplit - 1) / kAttnSplit;
  if (slot >= nsplit) return;
  const int d0 = kLaneDims * lane;
  const bool dims = d0 < hd;  // this lane's 8 dims exist
  for (int d = threadIdx.x; d < hd; d += kAttnThreads) qs[d] = q[(size_t(t) * a.Hq + h) * hd + d];
  __syncthreads();
  float qv[kLaneDims];
#pragma unroll
  for (int i = 0; i < kLaneDims; ++i) qv[i] = dims ? qs[d0 + i] : 0.0f;
  for (int s = slot; s < nsplit; s += slots) {
    const int k0 = s * kAttnSplit, n = min(kAttnSplit, nk - k0);
    __syncthreads();  // sc, part and blocks free from the previous split
    if (threadIdx.x < kSplitBlocks && int(threadIdx.x) * kKvBlockTokens < n)
      blocks[threadIdx.x] = kv.table[k0 / kKvBlockTokens + threadIdx.x];
    __syncthreads();
    for (int j0 = warp; j0 < n; j0 += kAttnWarps * kKeyBatch) {
      Row8<TX> kx[kKeyBatch];
#pragma unroll
      for (int b = 0; b < kKeyBatch; ++b) {
        const int j = j0 + b * kAttnWarps;
        if (j < n && dims) kx[b].load(split_row<TX>(blocks, kv, 0, j, kv_elems) + kvh * hd + d0);
        else kx[b].zero();
      }
#pragma unroll
      for (int b = 0; b < kKeyBatch; ++b) {
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < kLaneDims; ++i) acc = add_rn(acc, mul_rn(qv[i], kx[b].at(i)));
        acc = warp_sum(acc);
        const int j = j0 + b * kAttnWarps;
        if (lane == 0 && j < n) sc[j] = mul_rn(acc, scale);
      }
    }
    __syncthreads();
    float m = -INFINITY;
    for (int j = threadIdx.x; j < n; j += kAttnThreads) m = fmaxf(m, sc[j]);
    m = block_max(m, scratch);
    float l = 0.0f;
    for (int j = threadIdx.x; j < n; j += kAttnThreads) {
      const float p = expf(__fsub_rn(sc[j], m));
      sc[j] = p;
      l = add_rn(l, p);
    }
    l = block_sum(l, scratch);  // its barriers also publish sc
    float* mine = partial + ((size_t(t) * a.Hq + h) * max_splits + s) * (hd + 2);
    if (threadIdx.x == 0) {
      mine[0] = m;
      mine[1] = l;
    }
    float acc[kLaneDims] = {};
    for (int j0 = warp; j0 < n; j0 += kAttnWarps * kValueBatch) {
      Row8<TX> vx[kValueBatch];
#pragma unroll
      for (int b = 0; b < kValueBatch; ++b) {
        const int j = j0 + b * kAttnWarps;
        if (j < n && dims) vx[b].load(split_row<TX>(blocks, kv, 1, j, kv_elems) + kvh * hd + d0);
        else vx[b].zero();
      }
#pragma unroll
      for (int b = 0; b < kValueBatch; ++b) {
        const int j = j0 + b * kAttnWarps;
        if (j < n)
#pragma unroll
          for (int i = 0; i < kLaneDims; ++i) acc[i] = add_rn(acc[i], mul_rn(sc[j], vx[b].at(i)));
      }
    }
    if (dims)
#pragma unroll
      for (int i = 0; i < kLaneDims; ++i) part[warp][d0 + i] = acc[i];
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += kAttnThreads) {
      float o = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) o = add_rn(o, part[w][d]);
      mine[2 + d] = o;
    }
  }
  __threadfence();  // this block's partials, before its count
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == min(slots, nsplit) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (int(threadIdx.x) < hd) attn_combine_at<TX>(a, partial, max_splits, proj, ld, pos0, out, h, t);
  if (threadIdx.x == 0) *counter = 0;
}

// Block (slot, head, token) handles splits slot, slot + gridDim.x, ... of
// that query's keys [0, pos + t]; each split is computed whole by one block,
// so the number of slots changes no bits. Partial layout:
// [T][Hq][max_splits][hd + 2] = (max, sum, acc[hd]).
template <typename TX>
__global__ void __launch_bounds__(kAttnThreads)
    attn_split_kernel(AttnShape a, const float* q, KvBlocks kv, const int* pos0, int max_splits, float scale,
                      float* partial, const float* proj, int ld, TX* out) {
  pdl_prologue();
  attn_split_at<TX>(a, q, kv, *pos0, max_splits, scale, partial, blockIdx.x, gridDim.x, blockIdx.y, blockIdx.z, proj,
                    ld, out);
}

// The group pass: z = entry * max_T + token; each entry its own cache,
// position and partial buffer.
template <typename TX>
__global__ void __launch_bounds__(kAttnThreads)
    attn_split_group_kernel(AttnShape a, const GroupEntry* entries, int max_T, int kv_layer, const float* q,
                            float scale, const float* proj, int ld, TX* out) {
  pdl_prologue();
  const GroupEntry& e = entries[blockIdx.z / max_T];
  const int t = blockIdx.z % max_T;
  if (t >= e.T) return;
  attn_split_at<TX>(a, q + size_t(e.row) * a.Hq * a.hd, KvBlocks{e.kv_blocks, kv_layer}, *e.pos, e.max_splits,
                    scale, e.attn_partial, blockIdx.x, gridDim.x, blockIdx.y, t, proj + size_t(e.row) * ld, ld,
                    out + size_t(e.row) * a.Hq * a.hd);
}

int max_splits_for(int max_tokens) { return ceil_div(max_tokens, kAttnSplit); }

// attn_prepare runs a block of hd threads with whole-warp sums; the split
// kernel's lanes own 8 dims each.
void check_head_dim(const AttnShape& a) {
  if (a.hd < 32 || a.hd > kMaxHeadDim || a.hd % 32 != 0)
    fail("attention: head dim {} is not a multiple of 32 in [32, {}]", a.hd, kMaxHeadDim);
}

}  // namespace

int64_t attn_partial_floats(const AttnShape& a, int max_tokens, int max_rows) {
  return counter_floats(a) + int64_t(max_rows) * a.Hq * max_splits_for(max_tokens) * (a.hd + 2);
}

int64_t attn_counter_bytes(const AttnShape& a) { return int64_t(counter_floats(a)) * 4; }

void attn_prepare(const AttnShape& a, const float* proj, int ld, int T, const float* q_norm, const float* k_norm,
                  const float* inv_freq, const int* pos, float* qout, KvBlocks kv, Act act, cudaStream_t s) {
  check_head_dim(a);
  const dim3 grid(unsigned(a.Hq + a.Hkv), unsigned(T));
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(attn_prepare_kernel<bf16>, grid, a.hd, 0, s, a, proj, ld, q_norm, k_norm, inv_freq, pos,
                             qout, kv));
  else
    CUDA_CHECK(launch_kernel(attn_prepare_kernel<float>, grid, a.hd, 0, s, a, proj, ld, q_norm, k_norm, inv_freq, pos,
                             qout, kv));
  CUDA_CHECK_LAUNCH("attn_prepare_kernel");
}

void attention(const AttnShape& a, const float* q, KvBlocks kv, Act act, const float* proj, int ld, int T,
               const int* pos, int max_tokens, float* partial, void* out, cudaStream_t s) {
  check_head_dim(a);
  if (T < 1 || T > kMaxRows) fail("attention: {} queries outside [1, {}]", T, kMaxRows);
  const int max_splits = max_splits_for(max_tokens);
  // Slots per (head, token): a function of the cache size only.
  const dim3 grid(unsigned(std::min(max_splits, 16)), unsigned(a.Hq), unsigned(T));
  const float scale = 1.0f / sqrtf(float(a.hd));
  if (act == Act::BF16)
    CUDA_CHECK(launch_kernel(attn_split_kernel<bf16>, grid, kAttnThreads, 0, s, a, q, kv, pos, max_splits, scale,
                             partial, proj, ld, static_cast<bf16*>(out)));
  else
    CUDA_CHECK(launch_kernel(attn_split_kernel<float>, grid, kAttnThreads, 0, s, a, q, kv, pos, max_splits, scale,
                             partial, proj, ld, static_cast<float*>(out)));
  CUDA_CHECK_LAUNCH("attn_split_kernel");
}

void attention_group(const AttnShape& a, const GroupEntry* entries, int n_entries, int max_T, int kv_layer,
                     const float* proj, int ld, const float* q_norm, const float* k_norm, const float* inv_freq,
                     float* q, void* out, Act act, cudaStream_t s) {
  check_head_dim(a);
  const unsigned n = unsigned(n_entries), mt = unsigned(max_T);
  const dim3 prep(unsigned(a.Hq + a.Hkv), mt, n);
  const dim3 split(kGroupAttnSlots, unsigned(a.Hq), n * mt);
  const float scale = 1.0f / sqrtf(float(a.hd));
  if (act == Act::BF16) {
    CUDA_CHECK(launch_kernel(attn_prepare_group_kernel<bf16>, prep, a.hd, 0, s, a, entries, kv_layer, proj, ld, q_norm,
                             k_norm, inv_freq, q));
    CUDA_CHECK(launch_kernel(attn_split_group_kernel<bf16>, split, kAttnThreads, 0, s, a, entries, max_T, kv_layer,
                             static_cast<const float*>(q), scale, proj, ld, static_cast<bf16*>(out)));
  } else {
    CUDA_CHECK(launch_kernel(attn_prepare_group_kernel<float>, prep, a.hd, 0, s, a, entries, kv_layer, proj, ld,
                             q_norm, k_norm, inv_freq, q));
    CUDA_CHECK(launch_kernel(attn_split_group_kernel<float>, split, kAttnThreads, 0, s, a, entries, max_T, kv_layer,
                             static_cast<const float*>(q), scale, proj, ld, static_cast<float*>(out)));
  }
  CUDA_CHECK_LAUNCH("attention_group");
}

}  // namespace nextn::cuda
