// The streamed kernel's scaled formats (FP8 and S4: the native codecs of
// transformers' FP8 / symmetric int4 checkpoints, docs/formats.md) through
// the loader's upload path (upload_weight_parts): every fp8 code decodes to
// its exact value; products match an fp64 reference of the dequantized
// matrix to fp32 accuracy (the weights are never rounded to bf16 on this
// path: exact codes, each group's sum times its fp32 scale); rows are batch
// invariant; the argmax epilogue and the prefill GEMM agree. W8A8 (FP8
// weights, activations quantized in the kernel) against an fp64 reference
// of the same quantization, batch invariant. Skipped without a GPU.
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/prefill.h"
#include "backend/cuda/weight_upload.h"
#include "core/dtype.h"
#include "io/checkpoint.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using cuda::Act;
using cuda::WKind;
using test::DevBuf;

// A native-codec matrix on the host: codes and fp32 scales [rows][cols/group].
struct ScaledMatrix {
  WeightCodec codec;
  int rows, cols, group;
  std::vector<uint8_t> codes;  // fp8: rows * cols bytes; s4: MLX words
  std::vector<float> scales, zeros;  // zeros: ZeroInt, integers 0..16
  TensorView tw, ts, tz;

  ScaledMatrix(std::mt19937_64& rng, WeightCodec c, int r, int k, int g) : codec(c), rows(r), cols(k), group(g) {
    codes.resize(c == WeightCodec::Fp8 ? size_t(r) * k : size_t(r) * k / 2);
    for (auto& b : codes) {
      b = uint8_t(rng());
      if (c == WeightCodec::Fp8 && (b & 0x7f) == 0x7f) b = 0;  // no NaN codes
    }
    std::normal_distribution<float> nd(0.0f, c == WeightCodec::Fp8 ? 0.002f : 0.02f);
    scales.resize(size_t(r) * (k / g));
    for (auto& s : scales) s = nd(rng);  // full fp32 scales: never exact in bf16
    if (c == WeightCodec::ZeroInt) {
      zeros.resize(scales.size());
      for (auto& z : zeros) z = float(rng() % 17);
    }
  }
  WeightRef ref() {
    tw = TensorView{};
    tw.name = "w.weight";
    tw.dtype = codec == WeightCodec::Fp8 ? DType::F8_E4M3 : DType::U32;
    tw.shape = {rows, codec == WeightCodec::Fp8 ? cols : cols / 8};
    tw.data = codes.data();
    tw.nbytes = codes.size();
    ts = TensorView{};
    ts.name = "w.scales";
    ts.dtype = DType::F32;
    ts.shape = {rows, cols / group};
    ts.data = reinterpret_cast<const uint8_t*>(scales.data());
    ts.nbytes = scales.size() * 4;
    WeightRef w;
    w.name = "w.weight";
    w.weight = &tw;
    w.scales = &ts;
    w.native_codec = codec;
    if (codec == WeightCodec::ZeroInt) {
      tz = ts;
      tz.name = "w.zeros";
      tz.data = reinterpret_cast<const uint8_t*>(zeros.data());
      w.zeros = &tz;
    }
    w.quant = {codec == WeightCodec::Fp8 ? 8 : 4, group};
    w.rows = rows;
    w.cols = cols;
    return w;
  }
  std::vector<float> dense() {
    const WeightRef w = ref();
    std::vector<float> d(size_t(rows) * cols);
    for (int r = 0; r < rows; ++r) dequantize_row(w, r, d.data() + size_t(r) * cols);
    return d;
  }
};

struct Device {
  cuda::DeviceMemory mem;
  cuda::DevMatrix m;
  Device(ScaledMatrix& sm) { m = cuda::upload_weight_parts({sm.ref()}, Act::BF16, mem, "test", /*splittable=*/true); }
};

std::vector<float> run(const cuda::DevMatrix& m, const std::vector<float>& x, int T) {
  DevBuf dx(x.size() * 2), dy(size_t(T) * m.rows * 4), scratch(size_t(std::max<int64_t>(1, cuda::splitk_scratch_floats(m))) * 4);
  cudaMemset(scratch.p, 0, scratch.bytes);
  dx.put(test::to_bf16_bits(x));
  cuda::matmul(m, dx.p, Act::BF16, T, m.cols, dy.as<float>(), m.rows, false, scratch.as<float>(), nullptr);
  return dy.get<float>(size_t(T) * m.rows);
}

// fp64 products of the dequantized matrix with the (bf16) activations.
std::vector<float> reference(const std::vector<float>& w, int rows, int cols, const std::vector<float>& x, int T) {
  std::vector<float> y(size_t(T) * rows);
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < rows; ++r) {
      double acc = 0;
      for (int k = 0; k < cols; ++k) acc += double(w[size_t(r) * cols + k]) * double(x[size_t(t) * cols + k]);
      y[size_t(t) * rows + r] = float(acc);
    }
  return y;
}

struct Shape {
  int rows, cols, group;
};
const Shape kShapes[] = {{200, 1024, 128}, {320, 2048, 64} /* split-K */, {130, 512, 32}, {640, 4096, 128} /* many splits */};

// Rows `alone` run by themselves, and the first T rows for several T, give
// the bits of the same rows inside the 64-row call y64.
void expect_batch_invariant(const cuda::DevMatrix& m, const std::vector<float>& x, const std::vector<float>& y64,
                            std::initializer_list<int> alone) {
  for (int r : alone) {
    const std::vector<float> xr(x.begin() + long(r) * m.cols, x.begin() + long(r + 1) * m.cols);
    const auto y1 = run(m, xr, 1);
    EXPECT_EQ(0, std::memcmp(y1.data(), &y64[size_t(r) * m.rows], size_t(m.rows) * 4)) << "row " << r;
  }
  for (int T : {2, 13, 32}) {
    const std::vector<float> xt(x.begin(), x.begin() + long(T) * m.cols);
    const auto yt = run(m, xt, T);
    EXPECT_EQ(0, std::memcmp(yt.data(), y64.data(), yt.size() * 4)) << "T=" << T;
  }
}

TEST(CudaScaled, EveryFp8CodeDecodesExactly) {
  NEXTN_REQUIRE_GPU();
  std::mt19937_64 rng(1);
  ScaledMatrix sm(rng, WeightCodec::Fp8, 128, 256, 128);
  for (int r = 0; r < 128; ++r)
    for (int k = 0; k < 256; ++k) {
      const uint8_t code = uint8_t(r * 2 + (k & 1));  // column pair (2j, 2j + 1) of row r: codes 2r, 2r + 1
      sm.codes[size_t(r) * 256 + k] = (code & 0x7f) == 0x7f ? 0 : code;
    }
  for (auto& s : sm.scales) s = 1.0f;
  Device d(sm);
  ASSERT_EQ(d.m.kind, WKind::FP8);
  for (int col : {0, 1, 130, 255}) {  // one-hot activations: y[r] = value of code (r, col)
    std::vector<float> x(256, 0.0f);
    x[size_t(col)] = 1.0f;
    const auto y = run(d.m, x, 1);
    for (int r = 0; r < 128; ++r) {
      const uint8_t code = sm.codes[size_t(r) * 256 + col];
      EXPECT_EQ(y[size_t(r)], fp8_e4m3_to_f32(code)) << "code 0x" << std::hex << int(code);
    }
  }
}

TEST(CudaScaled, MatchesTheDequantizedMatrixAndIsBatchInvariant) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (WeightCodec codec : {WeightCodec::Fp8, WeightCodec::ZeroInt})
    for (const Shape& sh : kShapes) {
      SCOPED_TRACE(testing::Message() << weight_codec_name(codec) << " [" << sh.rows << "x" << sh.cols << "] g"
                                      << sh.group);
      ScaledMatrix sm(rng, codec, sh.rows, sh.cols, sh.group);
      Device d(sm);
      ASSERT_NE(d.m.packed, nullptr);
      const auto w = sm.dense();
      const auto x = test::randn(rng, size_t(64) * sh.cols, 1.0f, true);
      const auto y64 = run(d.m, x, 64);
      EXPECT_LT(test::rel_err(y64, reference(w, sh.rows, sh.cols, x, 64)), 1e-5);
      expect_batch_invariant(d.m, x, y64, {0, 7, 8, 31, 63});
      // The argmax epilogue picks from the same sums.
      // (A head is never split along k: the same layout, one split.)
      cuda::DevMatrix head = d.m;
      head.splits = 1;
      DevBuf dx(size_t(8) * sh.cols * 2), pairs(size_t(cuda::argmax_pairs_bytes(head, 8))), out(8 * 4);
      const std::vector<float> x8(x.begin(), x.begin() + long(8) * sh.cols);
      const auto y8 = run(head, x8, 8);
      dx.put(test::to_bf16_bits(x8));
      cuda::matmul_argmax(head, dx.p, Act::BF16, 8, sh.cols, pairs.p, out.as<int32_t>(), nullptr, nullptr);
      const auto got = out.get<int32_t>(8);
      for (int t = 0; t < 8; ++t) {
        int best = 0;
        for (int r = 1; r < sh.rows; ++r)
          if (y8[size_t(t) * sh.rows + r] > y8[size_t(t) * sh.rows + best]) best = r;
        EXPECT_EQ(got[size_t(t)], best) << "t=" << t;
      }
      // Prefill: the matrix expanded to bf16 (each weight rounded once) through cuBLAS.
      cuda::PrefillGemm gemm(nullptr);
      ASSERT_TRUE(cuda::PrefillGemm::supported(d.m));
      DevBuf scr(size_t(cuda::PrefillGemm::scratch_bytes(d.m))), dxp(x.size() * 2), dyp(size_t(64) * sh.rows * 4);
      dxp.put(test::to_bf16_bits(x));
      gemm.matmul(d.m, dxp.p, 64, sh.cols, dyp.as<float>(), sh.rows, false, scr.p);
      EXPECT_LT(test::rel_err(dyp.get<float>(size_t(64) * sh.rows), y64), 5e-3);
    }
}

// e4m3 nearest to x, ties to the even code, saturating at +-448: what the
// kernel's cvt.rn.satfinite does.
uint8_t e4m3_rne(float x) {
  uint8_t c = f32_to_fp8_e4m3(x);  // nearest; a tie goes to the smaller magnitude
  const uint8_t up = uint8_t(c + 1);
  if ((c & 1) && (up & 0x7f) != 0x7f &&
      std::fabs(fp8_e4m3_to_f32(up)) - std::fabs(x) == std::fabs(x) - std::fabs(fp8_e4m3_to_f32(c)))
    c = up;
  return c;
}

// W8A8: fp64 sums of the exact products of the weight codes and the
// activations quantized as the kernel quantizes them (per token and 64
// columns: scale a * (1 / 448), codes rn(x * (448 * (1 / a)))), times both scales.
std::vector<float> reference_w8a8(const ScaledMatrix& sm, const std::vector<float>& x, int T) {
  const int K = sm.cols;
  std::vector<float> y(size_t(T) * sm.rows);
  std::vector<float> xq(static_cast<size_t>(K)), xs(static_cast<size_t>(K / 64));
  for (int t = 0; t < T; ++t) {
    for (int u = 0; u < K / 64; ++u) {
      float a = 0.0f;
      for (int k = 0; k < 64; ++k) a = std::max(a, std::fabs(x[size_t(t) * K + 64 * u + k]));
      const float inv = a > 0.0f ? 448.0f * (1.0f / a) : 0.0f;
      xs[size_t(u)] = a * (1.0f / 448.0f);
      for (int k = 0; k < 64; ++k) xq[size_t(64 * u + k)] = fp8_e4m3_to_f32(e4m3_rne(x[size_t(t) * K + 64 * u + k] * inv));
    }
    for (int r = 0; r < sm.rows; ++r) {
      double acc = 0;
      for (int k0 = 0; k0 < K; k0 += 32) {  // groups are 32, 64 or 128 wide: a 32-column piece has one of each scale
        double sum = 0;
        for (int k = k0; k < k0 + 32; ++k)
          sum += double(fp8_e4m3_to_f32(sm.codes[size_t(r) * K + k])) * double(xq[size_t(k)]);
        acc += double(sm.scales[size_t(r) * (K / sm.group) + k0 / sm.group]) * double(xs[size_t(k0 / 64)]) * sum;
      }
      y[size_t(t) * sm.rows + r] = float(acc);
    }
  }
  return y;
}

TEST(CudaScaled, W8A8MatchesItsQuantizedActivationsAndIsBatchInvariant) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (const Shape& sh : kShapes) {
    SCOPED_TRACE(testing::Message() << "[" << sh.rows << "x" << sh.cols << "] g" << sh.group);
    ScaledMatrix sm(rng, WeightCodec::Fp8, sh.rows, sh.cols, sh.group);
    Device d(sm);
    ASSERT_EQ(d.m.kind, WKind::FP8);
    auto x = test::randn(rng, size_t(64) * sh.cols, 1.0f, true);
    for (int k = 0; k < sh.cols; ++k) x[size_t(5) * sh.cols + k] = 0.0f;  // a zero row: scale 0, no NaN
    for (int k = 0; k < sh.cols; k += 97) x[size_t(9) * sh.cols + k] *= 300.0f;  // outliers in one row
    const auto exact = run(d.m, x, 64);  // W8A16
    cuda::DevMatrix a8 = d.m;
    a8.fp8_activations = true;
    const auto y64 = run(a8, x, 64);
    // The FP8 MMA's sums are not fp32-exact (Hopper's FP8 tensor cores keep
    // fewer accumulator bits): measured about 1e-3 on these codes, whose
    // magnitudes span e4m3's whole range; a wrong code, scale or order is 1e-1 or more.
    const double err = test::rel_err(y64, reference_w8a8(sm, x, 64));
    std::printf("[cuda w8a8] [%dx%d] g%d: relative L2 error against the fp64 sum of its codes: %.2e\n", sh.rows, sh.cols,
                sh.group, err);
    EXPECT_LT(err, 1e-2);
    // Quantizing the activations costs accuracy, not correctness: within a few percent of W8A16.
    EXPECT_LT(test::rel_err(y64, exact), 0.05);
    for (int r = 0; r < sh.rows; ++r) EXPECT_EQ(y64[size_t(5) * sh.rows + r], 0.0f);
    expect_batch_invariant(a8, x, y64, {0, 7, 8, 9, 31, 63});
  }
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
