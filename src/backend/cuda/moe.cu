// The mixture-of-experts kernels (moe.h): the router's top-k, the plan that
// groups a call's (row, slot) pairs by expert, the grouped expert matmul
// (one launch for every expert of a layer, each expert's weights read once
// for all rows routed to it) and the weighted combine.
#include <cub/block/block_scan.cuh>

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/moe.h"
#include "backend/cuda/weights.cuh"
#include "core/error.h"

namespace nextn::cuda {

namespace {

constexpr int kMaxPairs = kMaxRows * kMaxExpertsPerToken;  // (row, slot) pairs the plan's shared memory holds
constexpr int kPlanThreads = 256;
constexpr int kWeightRowsPerWarp = 4;  // weight rows per warp of the grouped matmul
constexpr int kWarps = 8;
constexpr int kRowsPerPass = 2;        // rows one pass over a warp's weights serves

// ---- router and plan ----------------------------------------------------------

// Row t's top-k by warp `lane`s: lane l holds logits l, l + 32, ...; softmax
// with a fixed order (each lane's values in turn, then a butterfly), then k
// rounds of a warp argmax (greater probability, then lower id).
template <int kPerLane>  // router logits a lane holds: at least E / 32
__device__ void route_row(const float* l, int E, int k, const float* expert_scale, int lane, int32_t* chosen,
                          float* weights, int* expert_of) {
  float p[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? l[e] : -INFINITY;
    mx = fmaxf(mx, p[i]);
  }
  mx = warp_max(mx);
  float part = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    p[i] = lane + 32 * i < E ? expf(p[i] - mx) : 0.0f;
    part = add_rn(part, p[i]);
  }
  const float sum = warp_sum(part);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) p[i] = lane + 32 * i < E ? __fdiv_rn(p[i], sum) : -1.0f;
  // Slot j's expert and probability stay in lane j's registers (k <= 32):
  // no global round trip per slot; the lanes write their slots at the end.
  float top_sum = 0.0f, mine_v = 0.0f;
  int mine_i = 0;
  for (int j = 0; j < k; ++j) {
    ArgMax b{-1.0f, E};
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)  // a taken expert's probability is -1, below every real one
      if (p[i] >= 0.0f && argmax_better(p[i], lane + 32 * i, b.v, b.i)) b = {p[i], lane + 32 * i};
    b = warp_argmax(b);
    if (b.i >= E) {  // only NaN probabilities left (NaN logits): the lowest id not taken, weight 0
      b = {0.0f, 0};
      while (__any_sync(0xffffffffu, lane < j && mine_i == b.i)) ++b.i;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i == b.i) p[i] = -1.0f;
    if (lane == j) {
      mine_v = b.v;
      mine_i = b.i;
    }
    top_sum = add_rn(top_sum, b.v);
  }
  if (lane < k) {
    float w = __fdiv_rn(mine_v, top_sum);
    if (expert_scale != nullptr) w = mul_rn(w, expert_scale[mine_i]);
    chosen[lane] = mine_i;
    weights[lane] = w;
    expert_of[lane] = mine_i;
  }
}

// One block: every row's top-k (a warp per row), then the plan of the T * k
// pairs (moe.h). Within an expert the pairs land in any order: each pair's
// result is the same bits in any pass (the grouped matmul is per row).
template <int kPerLane>
__global__ void __launch_bounds__(kPlanThreads) moe_route_plan_kernel(const float* logits, int ld, int T, int E, int k,
                                                                      const float* expert_scale, int32_t* chosen,
                                                                      float* weights, MoePlan plan) {
  pdl_prologue();
  using Scan = cub::BlockScan<int, kPlanThreads>;
  __shared__ typename Scan::TempStorage scan;
  // The plan's scan covers the experts the lanes can hold (32 kPerLane, at
  // least E), blocked: a thread takes kExpertsPerThread consecutive ones.
  constexpr int kExperts = 32 * kPerLane, kExpertsPerThread = kExperts / kPlanThreads;
  static_assert(kExpertsPerThread >= 1 && kExperts <= kMaxExperts, "the scan's experts");
  __shared__ int count[kExperts];
  __shared__ int cursor[kExperts];
  __shared__ int expert_of[kMaxPairs];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, P = T * k;
  for (int e = threadIdx.x; e < kExperts; e += kPlanThreads) count[e] = 0;
  for (int t = warp; t < T; t += kPlanThreads / 32)
    route_row<kPerLane>(logits + size_t(t) * ld, E, k, expert_scale, lane, chosen + size_t(t) * k,
                        weights + size_t(t) * k, expert_of + t * k);
  __syncthreads();
  for (int q = threadIdx.x; q < P; q += kPlanThreads) atomicAdd(&count[expert_of[q]], 1);
  __syncthreads();
  // Experts [kExpertsPerThread * thread, +kExpertsPerThread): active flags and counts, scanned.
  int flag[kExpertsPerThread], n[kExpertsPerThread], slot[kExpertsPerThread], first[kExpertsPerThread];
#pragma unroll
  for (int i = 0; i < kExpertsPerThread; ++i) {
    const int e = kExpertsPerThread * threadIdx.x + i;
    n[i] = e < E ? count[e] : 0;
    flag[i] = n[i] > 0 ? 1 : 0;
  }
  int n_active = 0;
  Scan(scan).ExclusiveSum(flag, slot, n_active);
  __syncthreads();
  Scan(scan).ExclusiveSum(n, first);
#pragma unroll
  for (int i = 0; i < kExpertsPerThread; ++i) {
    const int e = kExpertsPerThread * threadIdx.x + i;
    cursor[e] = first[i];
    if (n[i] > 0) {
      plan.active[slot[i]] = e;
      plan.start[slot[i]] = first[i];
    }
  }
  __syncthreads();
  for (int q = threadIdx.x; q < P; q += kPlanThreads) plan.pairs[atomicAdd(&cursor[expert_of[q]], 1)] = q;
  if (threadIdx.x == 0) {
    *plan.n_active = n_active;
    plan.start[n_active] = P;
  }
}

// ---- grouped matmul -----------------------------------------------------------

// Eight bf16 values (one 16-byte load) in fp32.
__device__ __forceinline__ void bf16x8(const uint4& u, float (&v)[8]) {
  const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(words[i] << 16);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

template <typename TX>
__device__ __forceinline__ void load_x8(const TX* x, float (&v)[8]) {
  if constexpr (sizeof(TX) == 4) {
    const float4 a = reinterpret_cast<const float4*>(x)[0], b = reinterpret_cast<const float4*>(x)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    bf16x8(*reinterpret_cast<const uint4*>(x), v);
  }
}

// Elements per lane per step of the grouped matmul: one 16-byte load of
// the weights (bf16: 8, q8: 16, q4: 32; fp32: two loads of 4).
template <WKind WK>
constexpr int kUnit = WK == WKind::Q4 ? 32 : WK == WKind::Q8 ? 16 : 8;

// A lane's raw weights for one unit of one output feature (and its group's
// scale and bias: a unit never crosses a group, as groups are multiples of 32).
struct WeightUnit {
  uint4 a, b;  // b: fp32's second half
  float s, z;
};

template <WKind WK>
__device__ __forceinline__ WeightUnit load_unit(const void* w, const float* scales, const float* biases,
                                                const uint32_t* sb16, int cols,
                                                int group, int n, int c) {
  WeightUnit u{};
  if constexpr (WK == WKind::F32) {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const float*>(w) + size_t(n) * cols + c);
    u.a = p[0];
    u.b = p[1];
  } else if constexpr (WK == WKind::BF16) {
    u.a = *reinterpret_cast<const uint4*>(static_cast<const bf16*>(w) + size_t(n) * cols + c);
  } else {
    constexpr int per_word = WK == WKind::Q4 ? 8 : 4;
    u.a = *reinterpret_cast<const uint4*>(static_cast<const uint32_t*>(w) + size_t(n) * (cols / per_word) + c / per_word);
    const size_t gi = size_t(n) * (cols / group) + c / group;
    if (sb16 != nullptr) {  // a bf16 (scale, bias) pair, scale in the low half
      u.s = __uint_as_float(sb16[gi] << 16);
      u.z = __uint_as_float(sb16[gi] & 0xffff0000u);
    } else {
      u.s = scales[gi];
      u.z = biases[gi];
    }
  }
  return u;
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Elements [8 sub, 8 sub + 8) of a unit in fp32 (quantized: s * q + b with
// two roundings, as weight_at).
template <WKind WK>
__device__ __forceinline__ void unit_values(const WeightUnit& u, int sub, float (&v)[8]) {
  if constexpr (WK == WKind::F32) {  // kUnit 8: sub is 0
    const uint4 a = u.a, b = u.b;
    v[0] = __uint_as_float(a.x), v[1] = __uint_as_float(a.y), v[2] = __uint_as_float(a.z), v[3] = __uint_as_float(a.w);
    v[4] = __uint_as_float(b.x), v[5] = __uint_as_float(b.y), v[6] = __uint_as_float(b.z), v[7] = __uint_as_float(b.w);
  } else if constexpr (WK == WKind::BF16) {
    bf16x8(u.a, v);
  } else if constexpr (WK == WKind::Q4) {
    const uint32_t wd = word_of(u.a, sub);  // 8 elements per word, pack_quant's order (q4_bit)
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = add_rn(mul_rn(u.s, float((wd >> q4_bit(j)) & 15u)), u.z);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // 4 elements per word, MLX's order
      const uint32_t wd = word_of(u.a, 2 * sub + j / 4);
      v[j] = add_rn(mul_rn(u.s, float((wd >> (8 * (j & 3))) & 255u)), u.z);
    }
  }
}

// Block (u, tile): active expert u's outputs [tile * per_block, +per_block)
// over every pair routed to it, kRowsPerPass pairs at a time; each warp
// reads kWeightRowsPerWarp weight rows: as many outputs, or (GLU) half as
// many, each from its gate row f and up row I + f, stored as
// act(gate) * up in the input's type (swiglu's or gemma4_geglu's formula). Lane l sums the
// units l, l + 32, ... (VEC) or the elements l, l + 32, ...; then a
// butterfly: the same order for a row whatever rows share the pass.
template <WKind WK, typename TX, bool VEC, bool GLU>
__global__ void __launch_bounds__(kWarps * 32, 2) moe_matmul_kernel(DevExperts W, MoePlan plan, int k, const TX* x,
                                                                 int ldx, int x_per_pair, MoeGate gate, void* out,
                                                                 int ldo, unsigned long long* bytes_read) {
  pdl_prologue();
  constexpr int C = kWeightRowsPerWarp, F = GLU ? C / 2 : C;  // weight rows, outputs per warp
  const int u = blockIdx.x;
  const int e = plan.active[u], p0 = plan.start[u], p1 = plan.start[u + 1];  // in bounds; read before the check
  if (u >= *plan.n_active) return;
  // The expert's first tile counts what the expert's blocks read: its
  // weights and scales once per pass (one atomic per active expert).
  if (bytes_read != nullptr && blockIdx.y == 0 && threadIdx.x == 0) {
    const size_t sb_bytes = W.sb16 != nullptr ? 4 : W.scales != nullptr ? 8 : 0;
    atomicAdd(bytes_read, (unsigned long long)((p1 - p0 + kRowsPerPass - 1) / kRowsPerPass) *
                              (unsigned long long)(W.w_stride + W.sb_stride * sb_bytes));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int features = GLU ? W.rows / 2 : W.rows;
  const int f0 = (blockIdx.y * kWarps + warp) * F;
  if (f0 >= features) return;
  const int nf = min(F, features - f0);
  int row[C];
#pragma unroll
  for (int i = 0; i < C; ++i) row[i] = (GLU && i >= F ? features : 0) + f0 + min(i % F, nf - 1);
  const void* w = static_cast<const char*>(W.w) + size_t(e) * W.w_stride;
  const float* sc = W.scales != nullptr ? W.scales + size_t(e) * W.sb_stride : nullptr;
  const float* bi = W.biases != nullptr ? W.biases + size_t(e) * W.sb_stride : nullptr;
  const uint32_t* sb = W.sb16 != nullptr ? W.sb16 + size_t(e) * W.sb_stride : nullptr;
  for (int q0 = p0; q0 < p1; q0 += kRowsPerPass) {
    const int nr = min(kRowsPerPass, p1 - q0);
    int pair[kRowsPerPass];
    const TX* xr[kRowsPerPass];
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) {
      pair[r] = plan.pairs[q0 + min(r, nr - 1)];
      xr[r] = x + size_t(x_per_pair ? pair[r] : pair[r] / k) * ldx;
    }
    float acc[C][kRowsPerPass] = {};
    if constexpr (VEC) {
      constexpr int U = kUnit<WK>;
#pragma unroll 1
      for (int c = lane * U; c < W.cols; c += 32 * U) {
        WeightUnit wu[C];
#pragma unroll
        for (int i = 0; i < C; ++i) wu[i] = load_unit<WK>(w, sc, bi, sb, W.cols, W.group, row[i], c);
#pragma unroll
        for (int sub = 0; sub < U / 8; ++sub) {
          float xv[kRowsPerPass][8];
#pragma unroll
          for (int r = 0; r < kRowsPerPass; ++r)
            if (r < nr) load_x8(xr[r] + c + 8 * sub, xv[r]);
#pragma unroll
          for (int i = 0; i < C; ++i) {
            float wv[8];
            unit_values<WK>(wu[i], sub, wv);
#pragma unroll
            for (int r = 0; r < kRowsPerPass; ++r)
              if (r < nr)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][r] = fmaf(wv[j], xv[r][j], acc[i][r]);
          }
        }
      }
    } else {  // dense only (launch_matmul): a width that is no multiple of the unit
      static_assert(WK == WKind::F32 || WK == WKind::BF16, "quantized experts take the unit loop");
      for (int c = lane; c < W.cols; c += 32)
#pragma unroll
        for (int i = 0; i < C; ++i) {
          const float wv = weight_at<WK>(w, sc, bi, W.cols, W.group, row[i], c);
#pragma unroll
          for (int r = 0; r < kRowsPerPass; ++r)
            if (r < nr) acc[i][r] = fmaf(wv, to_f32(xr[r][c]), acc[i][r]);
        }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r)
      if (r < nr)  // uniform over the warp
#pragma unroll
        for (int i = 0; i < C; ++i) acc[i][r] = warp_sum(acc[i][r]);
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < F; ++i)
#pragma unroll
        for (int r = 0; r < kRowsPerPass; ++r) {
          if (r >= nr || i >= nf) continue;
          const size_t o = size_t(pair[r]) * ldo + f0 + i;
          if constexpr (GLU) {
            const float g = gate == MoeGate::Silu ? silu(acc[i][r]) : gelu_tanh(acc[i][r]);
            static_cast<TX*>(out)[o] = from_f32<TX>(mul_rn(g, acc[F + i][r]));
          }
          else static_cast<float*>(out)[o] = acc[i][r];
        }
  }
}

template <WKind WK, typename TX, bool GLU>
void launch_matmul(const DevExperts& W, const MoePlan& plan, int T, int k, const void* x, int ldx, bool x_per_pair,
                   MoeGate gate, void* out, int ldo, unsigned long long* bytes_read, cudaStream_t s) {
  constexpr int per_block = kWarps * (GLU ? kWeightRowsPerWarp / 2 : kWeightRowsPerWarp);
  const dim3 grid(unsigned(moe_active_bound(T, k, W.E)), unsigned(ceil_div(GLU ? W.rows / 2 : W.rows, per_block)));
  const bool vec = W.cols % kUnit<WK> == 0 && ldx % 8 == 0;
  const auto* xt = static_cast<const TX*>(x);
  if constexpr (WK == WKind::Q4 || WK == WKind::Q8) {
    // upload_experts keeps quantized widths multiples of 32; the callers' inputs are as wide.
    if (!vec) fail("internal: moe_experts_matmul of a quantized [{}, {}] over rows {} wide", W.rows, W.cols, ldx);
    CUDA_CHECK(launch_kernel(moe_matmul_kernel<WK, TX, true, GLU>, grid, kWarps * 32, 0, s, W, plan, k, xt, ldx,
                             int(x_per_pair), gate, out, ldo, bytes_read));
  } else if (vec) {
    CUDA_CHECK(launch_kernel(moe_matmul_kernel<WK, TX, true, GLU>, grid, kWarps * 32, 0, s, W, plan, k, xt, ldx,
                             int(x_per_pair), gate, out, ldo, bytes_read));
  } else {
    CUDA_CHECK(launch_kernel(moe_matmul_kernel<WK, TX, false, GLU>, grid, kWarps * 32, 0, s, W, plan, k, xt, ldx,
                             int(x_per_pair), gate, out, ldo, bytes_read));
  }
  CUDA_CHECK_LAUNCH("moe_matmul_kernel");
}

template <typename TX, bool GLU>
void dispatch_matmul(const DevExperts& W, const MoePlan& plan, int T, int k, const void* x, int ldx, bool x_per_pair,
                     MoeGate gate, void* out, int ldo, unsigned long long* bytes_read, cudaStream_t s) {
  switch (W.kind) {
    case WKind::F32: return launch_matmul<WKind::F32, TX, GLU>(W, plan, T, k, x, ldx, x_per_pair, gate, out, ldo, bytes_read, s);
    case WKind::BF16: return launch_matmul<WKind::BF16, TX, GLU>(W, plan, T, k, x, ldx, x_per_pair, gate, out, ldo, bytes_read, s);
    case WKind::Q4: return launch_matmul<WKind::Q4, TX, GLU>(W, plan, T, k, x, ldx, x_per_pair, gate, out, ldo, bytes_read, s);
    case WKind::Q8: return launch_matmul<WKind::Q8, TX, GLU>(W, plan, T, k, x, ldx, x_per_pair, gate, out, ldo, bytes_read, s);
    default: fail("internal: moe_experts_matmul of weight kind {}", int(W.kind));
  }
}

// ---- combine ------------------------------------------------------------------

__global__ void __launch_bounds__(256) moe_combine_kernel(const float* y, const int32_t* chosen,
                                                          const float* weights, int k, int H, const float* shared,
                                                          const float* gate, int gate_ld, float* x, int ldx,
                                                          CombineInto into) {
  pdl_prologue();
  __shared__ int order[kMaxExpertsPerToken];  // row t's slots by rising expert id
  __shared__ int32_t c[kMaxExpertsPerToken];  // row t's experts, read once in parallel
  const int t = blockIdx.x, h = blockIdx.y * blockDim.x + threadIdx.x;
  if (threadIdx.x < k) c[threadIdx.x] = chosen[size_t(t) * k + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int j = 0; j < k; ++j) {
      int i = j;
      for (; i > 0 && c[order[i - 1]] > c[j]; --i) order[i] = order[i - 1];
      order[i] = j;
    }
  }
  __syncthreads();
  if (h >= H) return;
  float r = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int slot = order[j];
    r = add_rn(r, mul_rn(y[(size_t(t) * k + slot) * H + h], weights[size_t(t) * k + slot]));
  }
  if (shared != nullptr) r = add_rn(r, mul_rn(sigmoid(gate[size_t(t) * gate_ld]), shared[size_t(t) * H + h]));
  float* o = x + size_t(t) * ldx + h;
  *o = into == CombineInto::Residual ? add_rn(*o, r) : r;
}

}  // namespace

size_t moe_plan_ints(int rows, int k, int E) {
  const size_t A = size_t(moe_active_bound(rows, k, E));
  return 1 + A + (A + 1) + size_t(rows) * size_t(k);
}

MoePlan moe_plan_at(int* base, int rows, int k, int E) {
  const size_t A = size_t(moe_active_bound(rows, k, E));
  MoePlan p;
  p.n_active = base;
  p.active = base + 1;
  p.start = p.active + A;
  p.pairs = p.start + A + 1;
  return p;
}

void moe_route_plan(const float* logits, int ld, int T, int E, int k, const float* expert_scale, int32_t* chosen,
                    float* weights, const MoePlan& plan, cudaStream_t s) {
  if (E > kMaxExperts || k < 1 || k > E || k > kMaxExpertsPerToken || T * k > kMaxPairs)
    fail("internal: moe_route_plan of {} rows, top-{} among {} experts", T, k, E);
  auto kernel = E <= 256 ? moe_route_plan_kernel<8> : E <= 512 ? moe_route_plan_kernel<16> : moe_route_plan_kernel<32>;
  CUDA_CHECK(launch_kernel(kernel, 1u, kPlanThreads, 0, s, logits, ld, T, E, k, expert_scale, chosen, weights, plan));
  CUDA_CHECK_LAUNCH("moe_route_plan_kernel");
}

void moe_experts_matmul(const DevExperts& W, const MoePlan& plan, int T, int k, const void* x, Act act, int ldx,
                        bool x_per_pair, float* y, int ldy, cudaStream_t s, unsigned long long* bytes_read) {
  if (act == Act::BF16) dispatch_matmul<bf16, false>(W, plan, T, k, x, ldx, x_per_pair, MoeGate::Silu, y, ldy, bytes_read, s);
  else dispatch_matmul<float, false>(W, plan, T, k, x, ldx, x_per_pair, MoeGate::Silu, y, ldy, bytes_read, s);
}

void moe_experts_glu(const DevExperts& W, MoeGate gate, const MoePlan& plan, int T, int k, const void* x, Act act,
                     int ldx, void* out, int ldo, cudaStream_t s, unsigned long long* bytes_read) {
  if (W.rows % 2 != 0) fail("internal: moe_experts_glu of {} rows", W.rows);
  if (act == Act::BF16) dispatch_matmul<bf16, true>(W, plan, T, k, x, ldx, false, gate, out, ldo, bytes_read, s);
  else dispatch_matmul<float, true>(W, plan, T, k, x, ldx, false, gate, out, ldo, bytes_read, s);
}

void moe_combine(const float* y, const int32_t* chosen, const float* weights, int T, int k, int H,
                 const float* shared, const float* gate, int gate_ld, float* x, int ldx, CombineInto into,
                 cudaStream_t s) {
  CUDA_CHECK(launch_kernel(moe_combine_kernel, dim3(unsigned(T), unsigned(ceil_div(H, 256))), 256, 0, s, y, chosen,
                           weights, k, H, shared, gate, gate_ld, x, ldx, into));
  CUDA_CHECK_LAUNCH("moe_combine_kernel");
}

}  // namespace nextn::cuda
