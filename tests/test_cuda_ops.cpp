// Every CUDA op against the CPU reference ops on random inputs from fixed
// seeds (relative error ||gpu - cpu|| / ||cpu||, bounds per docs/kernels.md: fp32
// arithmetic far under 1e-3, bf16 operands between 1e-3 and 1e-2), outputs
// poisoned with NaN first; and batch invariance: a row computed alone equals
// the same row inside a larger call, bit for bit. Skipped without a GPU.
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_stream.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using cuda::Act;
using cuda::WKind;
using test::DevBuf;
using test::rel_err;
using test::cpu_matmul;
using test::TestMatrix;

struct Shape {
  int rows, cols, group;
};

const char* kind_name(WKind k) {
  switch (k) {
    case WKind::F32: return "f32";
    case WKind::BF16: return "bf16";
    case WKind::Q4: return "q4";
    case WKind::Q8: return "q8";
    case WKind::FP8: return "fp8";
    case WKind::Z4: return "z4";
  }
  return "?";
}

// Weights rounded to bf16 after dequantization bound the quantized kinds.
double matmul_tol(WKind k) { return k == WKind::BF16 ? 1e-5 : 5e-3; }

// `shared_scratch`: a split-K scratch kept across calls (else a fresh one).
std::vector<float> run_matmul(const cuda::DevMatrix& m, const std::vector<float>& x, int T, Act act,
                              const std::vector<float>* y0 = nullptr, DevBuf* shared_scratch = nullptr) {
  DevBuf dx(x.size() * 4), dy(size_t(T) * m.rows * 4), fresh(size_t(std::max<int64_t>(1, cuda::splitk_scratch_floats(m))) * 4);
  cudaMemset(fresh.p, 0, fresh.bytes);  // split-K counters start at zero
  DevBuf& scratch = shared_scratch ? *shared_scratch : fresh;
  if (act == Act::BF16)
    dx.put(test::to_bf16_bits(x));
  else
    dx.put(x);
  if (y0) dy.put(*y0);
  cuda::matmul(m, dx.p, act, T, m.cols, dy.as<float>(), m.rows, y0 != nullptr, scratch.as<float>(), nullptr);
  return dy.get<float>(size_t(T) * m.rows);
}

TEST(CudaOps, MatmulMatchesCpu) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const Shape shapes[] = {{200, 4192, 32}, {320, 2048, 64}, {64, 32, 32},  {1000, 512, 64},
                          {130, 160, 32},  {96, 1024, 128}, {330, 1536, 32}, {640, 4096, 64}};
  for (WKind kind : {WKind::BF16, WKind::Q4, WKind::Q8}) {
    for (const Shape& sh : shapes) {
      TestMatrix tm(rng, kind, sh.rows, sh.cols, sh.group);
      // Quantized kinds twice: the streamed kernel (bf16 scale/bias pairs)
      // and the fp32-scale kernel that serves matrices whose pairs are not exact.
      for (bool exact : {true, false}) {
        if (!exact && kind == WKind::BF16) continue;
        const auto dm = tm.device(false, exact);
        for (int T : {1, 5, 8, 13, 64}) {
          SCOPED_TRACE(testing::Message() << kind_name(kind) << (exact ? "" : " fp32-scale kernel") << " ["
                                          << sh.rows << "x" << sh.cols << "] splits " << dm.splits << " T=" << T);
        const auto x = test::randn(rng, size_t(T) * sh.cols, 1.0f, true);
        const auto ref = cpu_matmul(tm, x, T);
        const double e = rel_err(run_matmul(dm, x, T, Act::BF16), ref);
        EXPECT_LT(e, matmul_tol(kind));
        EXPECT_GT(e, 0.0) << "suspiciously exact";
        // accumulate into a residual
        const auto y0 = test::randn(rng, size_t(T) * sh.rows);
        auto ref_acc = ref;
        for (size_t i = 0; i < ref_acc.size(); ++i) ref_acc[i] = y0[i] + ref[i];
        EXPECT_LT(rel_err(run_matmul(dm, x, T, Act::BF16, &y0), ref_acc), matmul_tol(kind));
        }
      }
    }
  }
}

// fp32-activation mode: the CUDA-core kernel sums in cpu::dot's order, bit
// for bit. cpu::matmul no longer does (its blocked product uses FMA and the
// machine's vector width, docs/cpu-backend.md), so against it the fp32 mode
// takes a stated tolerance: relative error (2-norm) below 1e-5.
std::vector<float> cpu_dot_rows(TestMatrix& tm, const std::vector<float>& x, int T) {
  const auto m = tm.cpu();
  std::vector<float> row(size_t(tm.cols)), y(size_t(T) * tm.rows);
  for (int r = 0; r < tm.rows; ++r) {
    m->row(r, row.data());
    for (int t = 0; t < T; ++t) y[size_t(t) * tm.rows + r] = cpu::dot(&x[size_t(t) * tm.cols], row.data(), tm.cols);
  }
  return y;
}

TEST(CudaOps, MatmulFp32ModeIsBitwiseCpuDot) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (WKind kind : {WKind::BF16, WKind::Q4, WKind::Q8}) {
    for (const Shape& sh : {Shape{200, 4192, 32}, Shape{70, 96, 32}}) {
      TestMatrix tm(rng, kind, sh.rows, sh.cols, sh.group);
      const auto dm = tm.device(/*f32=*/true);
      for (int T : {1, 7, 64}) {
        SCOPED_TRACE(testing::Message() << kind_name(kind) << " T=" << T);
        const auto x = test::randn(rng, size_t(T) * sh.cols);
        const auto got = run_matmul(dm, x, T, Act::F32), ref = cpu_dot_rows(tm, x, T);
        ASSERT_EQ(got.size(), ref.size());
        EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), got.size() * 4)) << "rel err " << rel_err(got, ref);
        EXPECT_LT(rel_err(got, cpu_matmul(tm, x, T)), 1e-5) << "against cpu::matmul";
      }
    }
  }
}

// Row r alone == row r inside a 64-row call, bit for bit; likewise prefixes.
TEST(CudaOps, MatmulIsBatchInvariant) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (WKind kind : {WKind::BF16, WKind::Q4, WKind::Q8}) {
    for (const Shape& sh : {Shape{200, 4192, 32}, Shape{320, 2048, 64} /* split-K */, Shape{256, 5120, 64},
                             Shape{300, 2560, 128} /* g128, partial tile */, Shape{330, 1536, 32} /* g32 */,
                             Shape{640, 4096, 64} /* 16 splits */}) {
      TestMatrix tm(rng, kind, sh.rows, sh.cols, sh.group);
      for (bool exact : {true, false}) {
      if (!exact && kind == WKind::BF16) continue;
      const auto dm = tm.device(false, exact);
      SCOPED_TRACE(testing::Message() << kind_name(kind) << (exact ? "" : " fp32-scale kernel") << " ["
                                      << sh.rows << "x" << sh.cols << "] splits " << dm.splits);
      // The streamed kernel serves exactly the quantized matrices it can.
      EXPECT_EQ(dm.packed != nullptr, kind != WKind::BF16 && exact && sh.cols % cuda::kChunkK == 0);
      const auto x = test::randn(rng, size_t(64) * sh.cols, 1.0f, true);
      const auto y64 = run_matmul(dm, x, 64, Act::BF16);
      for (int r : {0, 1, 7, 8, 9, 31, 63}) {
        const std::vector<float> xr(x.begin() + long(r) * sh.cols, x.begin() + long(r + 1) * sh.cols);
        const auto y1 = run_matmul(dm, xr, 1, Act::BF16);
        EXPECT_EQ(0, std::memcmp(y1.data(), &y64[size_t(r) * sh.rows], size_t(sh.rows) * 4)) << "row " << r;
      }
      for (int T : {2, 8, 13, 32}) {
        const std::vector<float> xt(x.begin(), x.begin() + long(T) * sh.cols);
        const auto yt = run_matmul(dm, xt, T, Act::BF16);
        EXPECT_EQ(0, std::memcmp(yt.data(), y64.data(), yt.size() * 4)) << "T=" << T;
      }
      }
    }
  }
}

// The streamed kernel's split-K tile counters return to zero after every
// call: a scratch reused across calls (as the runtime does) gives the bits
// of a fresh one, for every width.
TEST(CudaOps, StreamedSplitKReusesScratch) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (WKind kind : {WKind::Q4, WKind::Q8}) {
    TestMatrix tm(rng, kind, 640, 4096, 64);
    const auto dm = tm.device();
    ASSERT_GT(dm.splits, 1);
    ASSERT_NE(dm.packed, nullptr);
    DevBuf scratch(size_t(cuda::splitk_scratch_floats(dm)) * 4);
    cudaMemset(scratch.p, 0, scratch.bytes);
    const auto x = test::randn(rng, size_t(64) * 4096, 1.0f, true);
    for (int T : {1, 64, 7, 33, 1}) {
      SCOPED_TRACE(testing::Message() << kind_name(kind) << " T=" << T);
      const std::vector<float> xt(x.begin(), x.begin() + long(T) * 4096);
      const auto fresh = run_matmul(dm, xt, T, Act::BF16);
      const auto reused = run_matmul(dm, xt, T, Act::BF16, nullptr, &scratch);
      EXPECT_EQ(0, std::memcmp(fresh.data(), reused.data(), fresh.size() * 4));
    }
  }
}

std::vector<int32_t> run_argmax_rows(const std::vector<float>& logits, int T, int V) {
  DevBuf dl(logits.size() * 4), scratch(size_t(cuda::argmax_scratch_bytes(V)) * T), out(size_t(T) * 4);
  dl.put(logits);
  cuda::argmax_rows(dl.as<float>(), T, V, V, scratch.p, out.as<int32_t>(), nullptr);
  return out.get<int32_t>(size_t(T));
}

TEST(CudaOps, ArgmaxRowsLowestIndexOnTies) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int V : {1, 7, 4096, 4097, 248320}) {
    const int T = 5;
    auto logits = test::randn(rng, size_t(T) * V);
    std::uniform_int_distribution<int> pick(0, V - 1);
    for (int t = 0; t < T; ++t) {  // plant ties at the max
      float* row = &logits[size_t(t) * V];
      const float mx = *std::max_element(row, row + V) + 1.0f;
      const int a = pick(rng), b = pick(rng);
      row[a] = mx;
      row[b] = mx;
    }
    const auto got = run_argmax_rows(logits, T, V);
    for (int t = 0; t < T; ++t) EXPECT_EQ(got[size_t(t)], cpu::argmax(&logits[size_t(t) * V], V)) << "V=" << V;
  }
}

// The fused projection+argmax picks what argmax of the unfused logits picks
// (same bits), ties to the lower index, in both activation modes; and the
// walk's early exit stops at the first mismatch, counting its rows.
TEST(CudaOps, FusedArgmaxAndWalk) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (Act act : {Act::BF16, Act::F32}) {
    for (WKind kind : {WKind::BF16, WKind::Q4}) {
      const int V = 5003, H = 256, T = 6;
      TestMatrix tm(rng, kind, V, H, 64);
      // Duplicate a few rows so that exact ties occur.
      const size_t row_bytes = tm.weight.size() / V;
      for (int r : {17, 1000, 4000})
        std::memcpy(&tm.weight[size_t(r + 3) * row_bytes], &tm.weight[size_t(r) * row_bytes], row_bytes);
      if (!tm.scales.empty()) {
        const int gpr = H / 64;
        for (int r : {17, 1000, 4000})
          for (int g = 0; g < gpr; ++g) {
            tm.scales[size_t(r + 3) * gpr + g] = tm.scales[size_t(r) * gpr + g];
            tm.biases[size_t(r + 3) * gpr + g] = tm.biases[size_t(r) * gpr + g];
          }
      }
      auto dm = tm.device(act == Act::F32);
      dm.splits = 1;
      auto x = test::randn(rng, size_t(T) * H, 1.0f, true);
      const auto logits = run_matmul(dm, x, T, act);
      const auto want = run_argmax_rows(logits, T, V);
      DevBuf dx(x.size() * 4), pairs(static_cast<size_t>(cuda::argmax_pairs_bytes(dm))), out(size_t(T + 2) * 4);
      if (act == Act::BF16)
        dx.put(test::to_bf16_bits(x));
      else
        dx.put(x);
      cuda::matmul_argmax(dm, dx.p, act, T, H, pairs.p, out.as<int32_t>(), nullptr, nullptr);
      EXPECT_EQ(out.get<int32_t>(size_t(T)), want);
      // Ties: make row 0 pick between duplicated rows.
      {
        std::vector<float> xt(x.begin(), x.begin() + H);
        const auto l1 = run_matmul(dm, xt, 1, act);
        cuda::matmul_argmax(dm, dx.p, act, 1, H, pairs.p, out.as<int32_t>(), nullptr, nullptr);
        EXPECT_EQ(out.get<int32_t>(1)[0], cpu::argmax(l1.data(), V));
        EXPECT_EQ(l1[17], l1[20]);
      }
      // Walk: drafts equal the true tokens up to a planted mismatch.
      const int esz = act == Act::BF16 ? 2 : 4;
      for (int mismatch : {0, 2, 5, -1}) {
        std::vector<int32_t> drafts(want.begin(), want.begin() + (T - 1));
        if (mismatch >= 0 && mismatch < T - 1) drafts[size_t(mismatch)] = (drafts[size_t(mismatch)] + 1) % V;
        DevBuf dd(drafts.size() * 4), flags(8);
        dd.put(drafts);
        cudaMemset(flags.p, 0, 8);
        out.poison();
        for (int j = 0; j < T; ++j) {
          cuda::matmul_argmax(dm, static_cast<char*>(dx.p) + size_t(j) * H * esz, act, 1, H, pairs.p, nullptr,
                              flags.as<int>(), nullptr);
          cuda::walk_compare(dm, act, pairs.p, j, dd.as<int32_t>(), T - 1, out.as<int32_t>(), flags.as<int>(),
                             flags.as<int>() + 1, nullptr);
        }
        const auto f = flags.get<int>(2);
        const int expect_rows = (mismatch >= 0 && mismatch < T - 1) ? mismatch + 1 : T;
        EXPECT_EQ(f[1], expect_rows) << "mismatch at " << mismatch;
        EXPECT_EQ(f[0], 1);
        const auto o = out.get<int32_t>(size_t(expect_rows));
        for (int j = 0; j < expect_rows; ++j) EXPECT_EQ(o[size_t(j)], want[size_t(j)]);
      }
    }
  }
}

TEST(CudaOps, EmbeddingRowsAreCpuRows) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  // H = 384: q4/q8 rows come from the streamed layout (held alone, as the
  // bf16 mode holds a tied embedding), group 32 / 64 / 128; H = 320: from
  // the MLX-order copy.
  for (WKind kind : {WKind::BF16, WKind::Q4, WKind::Q8})
    for (const Shape sh : {Shape{1000, 320, 64}, Shape{1000, 384, 32}, Shape{1000, 384, 64}, Shape{1000, 384, 128}}) {
      const int H = sh.cols;
      TestMatrix tm(rng, kind, sh.rows, H, sh.group);
      auto dm = tm.device();
      const bool streamed = dm.packed != nullptr;
      EXPECT_EQ(streamed, kind != WKind::BF16 && H == 384);
      if (streamed) dm.w = dm.scales = dm.biases = nullptr;  // rows must come from the layout
      const auto cm = tm.cpu();
      const std::vector<int32_t> toks = {0, 999, 17, 17, 512, 127, 128};
      DevBuf dt(toks.size() * 4), dx(toks.size() * H * 4);
      dt.put(toks);
      cuda::embed_rows(dm, dt.as<int32_t>(), int(toks.size()), dx.as<float>(), H, nullptr);
      const auto got = dx.get<float>(toks.size() * H);
      std::vector<float> ref(static_cast<size_t>(H));
      for (size_t t = 0; t < toks.size(); ++t) {
        cm->row(toks[t], ref.data());
        EXPECT_EQ(0, std::memcmp(ref.data(), &got[t * H], size_t(H) * 4))
            << kind_name(kind) << " H " << H << " group " << sh.group << " token " << toks[t];
      }
    }
}

TEST(CudaOps, RmsNormAndSwiGlu) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int n : {64, 96, 2560, 5120, 7168}) {  // each register width of the kernel, and the loop
    const int rows = 7;
    const auto x = test::randn(rng, size_t(rows) * n, 3.0f);
    auto gamma = test::randn(rng, size_t(n), 0.3f);
    for (auto& g : gamma) g += 1.0f;
    std::vector<float> ref(x.size());
    for (int r = 0; r < rows; ++r) cpu::rmsnorm(&x[size_t(r) * n], gamma.data(), 1e-6f, n, &ref[size_t(r) * n]);
    DevBuf dx(x.size() * 4), dg(gamma.size() * 4), dy(x.size() * 4), dyb(x.size() * 2);
    dx.put(x);
    dg.put(gamma);
    cuda::rmsnorm(dx.p, Act::F32, n, dg.as<float>(), 1e-6f, rows, n, dy.p, Act::F32, n, nullptr, nullptr);
    EXPECT_LT(rel_err(dy.get<float>(x.size()), ref), 1e-6) << "n=" << n;
    cuda::rmsnorm(dx.p, Act::F32, n, dg.as<float>(), 1e-6f, rows, n, dyb.p, Act::BF16, n, nullptr, nullptr);
    const auto yb = test::bf16_bits_to_f32(dyb.get<uint16_t>(x.size()));
    const double eb = rel_err(yb, ref);
    EXPECT_LT(eb, 4e-3) << "n=" << n;
    EXPECT_GT(eb, 1e-5);
    // bf16 input, row offset from device memory
    DevBuf dxb(x.size() * 2), off(4), dy2(size_t(rows + 3) * n * 4);
    dxb.put(test::to_bf16_bits(x));
    off.put(std::vector<int>{3});
    cuda::rmsnorm(dxb.p, Act::BF16, n, dg.as<float>(), 1e-6f, rows, n, dy2.p, Act::F32, n, off.as<int>(), nullptr);
    EXPECT_LT(rel_err(dy2.get<float>(x.size(), size_t(3) * n * 4), ref), 4e-3);
  }
  // SwiGLU
  const int I = 300, T = 5;
  const auto gu = test::randn(rng, size_t(T) * 2 * I, 2.0f);
  std::vector<float> ref(size_t(T) * I);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < I; ++i) ref[size_t(t) * I + i] = cpu::silu(gu[size_t(t) * 2 * I + i]) * gu[size_t(t) * 2 * I + I + i];
  DevBuf dgu(gu.size() * 4), dout(ref.size() * 4);
  dgu.put(gu);
  cuda::swiglu(dgu.as<float>(), 2 * I, I, T, dout.p, Act::F32, I, nullptr);
  EXPECT_LT(rel_err(dout.get<float>(ref.size()), ref), 1e-6);
}

TEST(CudaOps, GatherRowsPadsWithZeros) {
  NEXTN_REQUIRE_GPU();
  std::mt19937_64 rng(test::fresh_seed());
  const int n = 64, rows = 10;
  const auto src = test::randn(rng, size_t(rows) * n);
  DevBuf ds(src.size() * 4), dd(size_t(6) * n * 4), args(8);
  ds.put(src);
  args.put(std::vector<int>{7, 2});
  cuda::gather_rows(ds.p, n, args.as<int>(), args.as<int>() + 1, 6, dd.p, Act::F32, nullptr);
  const auto got = dd.get<float>(size_t(6) * n);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < n; ++c) EXPECT_EQ(got[size_t(r) * n + c], r < 2 ? src[size_t(7 + r) * n + c] : 0.0f);
}

// ---- attention ----

struct AttnCase {
  cuda::AttnShape a;
  int max_tokens, pos, T;
};

// The CPU reference (CpuQwen35::attention) over given q (post norm/rope) and
// a float cache: softmax(q k / sqrt(hd)) v, gated.
std::vector<float> cpu_attention(const AttnCase& c, const std::vector<float>& q, const std::vector<float>& kc,
                                 const std::vector<float>& vc, const std::vector<float>& proj, int ld) {
  const auto& a = c.a;
  const int hd = a.hd, group = a.Hq / a.Hkv, kv_row = a.Hkv * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> out(size_t(c.T) * a.Hq * hd);
  for (int t = 0; t < c.T; ++t) {
    const int nk = c.pos + t + 1;
    for (int h = 0; h < a.Hq; ++h) {
      const float* qh = &q[(size_t(t) * a.Hq + h) * hd];
      const int kh = h / group;
      std::vector<float> s(static_cast<size_t>(nk));
      float mx = -INFINITY;
      for (int j = 0; j < nk; ++j) {
        s[size_t(j)] = cpu::dot(qh, &kc[size_t(j) * kv_row + kh * hd], hd) * scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      float sum = 0;
      for (auto& v : s) {
        v = std::exp(v - mx);
        sum += v;
      }
      for (int d = 0; d < hd; ++d) {
        float acc = 0;
        for (int j = 0; j < nk; ++j) acc += s[size_t(j)] / sum * vc[size_t(j) * kv_row + kh * hd + d];
        const float gate = proj[size_t(t) * ld + size_t(h) * 2 * hd + hd + d];
        out[(size_t(t) * a.Hq + h) * hd + d] = acc * cpu::sigmoid(gate);
      }
    }
  }
  return out;
}

std::vector<float> as_floats(const DevBuf& b, size_t n, Act act) {
  return act == Act::F32 ? b.get<float>(n) : test::bf16_bits_to_f32(b.get<uint16_t>(n));
}

TEST(CudaOps, AttentionMatchesCpuAndIsBatchInvariant) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (Act act : {Act::F32, Act::BF16}) {
    for (const AttnCase& c : {AttnCase{{6, 2, 64, 16, 1e-6f}, 1024, 700, 5}, AttnCase{{4, 1, 32, 8, 1e-6f}, 64, 0, 9},
                              AttnCase{{24, 4, 256, 64, 1e-6f}, 600, 520, 3}}) {
      const auto& a = c.a;
      const int hd = a.hd, kv_row = a.Hkv * hd, ld = a.Hq * 2 * hd + 2 * kv_row;
      const size_t esz = act == Act::F32 ? 4 : 2;
      SCOPED_TRACE(testing::Message() << "act " << int(act) << " hd " << hd << " pos " << c.pos << " T " << c.T);
      // cache rows before pos: random; rows pos.. written by attn_prepare
      auto cache_k = test::randn(rng, size_t(c.max_tokens) * kv_row, 1.0f, true);
      auto cache_v = test::randn(rng, size_t(c.max_tokens) * kv_row, 1.0f, true);
      const auto proj = test::randn(rng, size_t(c.T) * ld, 1.0f);
      auto qn = test::randn(rng, size_t(hd), 0.2f), kn = test::randn(rng, size_t(hd), 0.2f);
      for (auto& v : qn) v += 1.0f;
      for (auto& v : kn) v += 1.0f;
      std::vector<float> inv(static_cast<size_t>(a.rd / 2));
      for (size_t i = 0; i < inv.size(); ++i) inv[i] = float(1.0 / std::pow(1e7, double(2 * i) / double(a.rd)));
      DevBuf dproj(proj.size() * 4), dqn(qn.size() * 4), dkn(kn.size() * 4), dinv(inv.size() * 4), dpos(4),
          dq(size_t(c.T) * a.Hq * hd * 4), part(size_t(cuda::attn_partial_floats(a, c.max_tokens)) * 4), dout(size_t(c.T) * a.Hq * hd * esz);
      dproj.put(proj);
      dqn.put(qn);
      dkn.put(kn);
      dinv.put(inv);
      ASSERT_EQ(cudaMemset(part.p, 0, size_t(cuda::attn_counter_bytes(a))), cudaSuccess);  // the splits' counters
      dpos.put(std::vector<int>{c.pos});
      test::PagedKv kv(c.max_tokens, size_t(kv_row) * esz);
      if (act == Act::F32) {
        kv.put(0, cache_k);
        kv.put(1, cache_v);
      } else {
        kv.put(0, test::to_bf16_bits(cache_k));
        kv.put(1, test::to_bf16_bits(cache_v));
      }
      cuda::attn_prepare(a, dproj.as<float>(), ld, c.T, dqn.as<float>(), dkn.as<float>(), dinv.as<float>(),
                         dpos.as<int>(), dq.as<float>(), kv.view(), act, nullptr);
      // q, k (norm + rope) and v against the CPU ops
      const auto q = dq.get<float>(size_t(c.T) * a.Hq * hd);
      auto held = [&](int which) {
        return act == Act::F32 ? kv.get<float>(which, c.max_tokens)
                               : test::bf16_bits_to_f32(kv.get<uint16_t>(which, c.max_tokens));
      };
      const auto kc = held(0), vc = held(1);
      std::vector<float> ref_q(q.size()), ref_k, got_k, ref_v, got_v;
      std::vector<float> cs(static_cast<size_t>(a.rd / 2)), sn(static_cast<size_t>(a.rd / 2));
      for (int t = 0; t < c.T; ++t) {
        cpu::rope_angles(c.pos + t, a.rd, 1e7, cs.data(), sn.data());
        for (int h = 0; h < a.Hq; ++h) {
          float* o = &ref_q[(size_t(t) * a.Hq + h) * hd];
          cpu::rmsnorm(&proj[size_t(t) * ld + size_t(h) * 2 * hd], qn.data(), 1e-6f, hd, o);
          cpu::rope(o, a.rd, cs.data(), sn.data());
        }
        for (int h = 0; h < a.Hkv; ++h) {
          std::vector<float> o(static_cast<size_t>(hd));
          cpu::rmsnorm(&proj[size_t(t) * ld + size_t(a.Hq) * 2 * hd + size_t(h) * hd], kn.data(), 1e-6f, hd, o.data());
          cpu::rope(o.data(), a.rd, cs.data(), sn.data());
          ref_k.insert(ref_k.end(), o.begin(), o.end());
          const size_t at = (size_t(c.pos + t) * a.Hkv + h) * hd;
          got_k.insert(got_k.end(), kc.begin() + long(at), kc.begin() + long(at + hd));
          const float* vs = &proj[size_t(t) * ld + size_t(a.Hq) * 2 * hd + size_t(kv_row) + size_t(h) * hd];
          ref_v.insert(ref_v.end(), vs, vs + hd);
          got_v.insert(got_v.end(), vc.begin() + long(at), vc.begin() + long(at + hd));
        }
      }
      EXPECT_LT(rel_err(q, ref_q), 1e-5);
      EXPECT_LT(rel_err(got_k, ref_k), act == Act::F32 ? 1e-5 : 4e-3);
      EXPECT_LT(rel_err(got_v, ref_v), act == Act::F32 ? 1e-7 : 4e-3);
      // attention over the cache as the GPU holds it
      cuda::attention(a, dq.as<float>(), kv.view(), act, dproj.as<float>(), ld, c.T, dpos.as<int>(), c.max_tokens,
                      part.as<float>(), dout.p, nullptr);
      const auto out = as_floats(dout, size_t(c.T) * a.Hq * hd, act);
      const auto ref = cpu_attention(c, q, kc, vc, proj, ld);
      EXPECT_LT(rel_err(out, ref), act == Act::F32 ? 1e-5 : 4e-3);
      // query t alone (position pos + t, same cache) == query t inside the T-query call, bit for bit
      const auto out_raw = dout.get<uint8_t>(size_t(c.T) * a.Hq * hd * esz);
      for (int t : {0, c.T - 1}) {
        DevBuf pos1(4), out1(size_t(a.Hq) * hd * esz), q1(size_t(a.Hq) * hd * 4);
        pos1.put(std::vector<int>{c.pos + t});
        const float* proj_t = dproj.as<float>() + size_t(t) * ld;
        cuda::attn_prepare(a, proj_t, ld, 1, dqn.as<float>(), dkn.as<float>(), dinv.as<float>(), pos1.as<int>(),
                           q1.as<float>(), kv.view(), act, nullptr);
        cuda::attention(a, q1.as<float>(), kv.view(), act, proj_t, ld, 1, pos1.as<int>(), c.max_tokens,
                        part.as<float>(), out1.p, nullptr);
        const auto o1 = out1.get<uint8_t>(size_t(a.Hq) * hd * esz);
        EXPECT_EQ(0, std::memcmp(o1.data(), &out_raw[size_t(t) * a.Hq * hd * esz], o1.size())) << "query " << t;
      }
      // every call left the splits' counters at zero for the next
      const auto counters = part.get<int>(size_t(cuda::attn_counter_bytes(a)) / 4);
      EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), long(counters.size()));
    }
  }
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
