// nextn bench projection: see projection_bench.h.
#include "backend/cuda/projection_bench.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <utility>

#include "backend/cuda/bench_weights.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/device_handles.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_stream.h"
#include "core/error.h"

namespace nextn::cuda {
namespace {

// Every 64th column times 30: outlier channels.
__global__ void scale_outlier_columns(bf16* x, size_t n, int cols) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    if (i % size_t(cols) % 64 == 0) x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * 30.0f);
}

// ||a - b|| / ||b|| and max |a - b| / max |b|.
std::pair<double, double> relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0, dmax = 0, bmax = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
    dmax = std::max(dmax, std::fabs(d));
    bmax = std::max(bmax, std::fabs(double(b[i])));
  }
  return {std::sqrt(num / den), dmax / bmax};
}

struct Buf {
  DeviceBuffer mem;  // owned (device_handles.h)
  void* p;
  explicit Buf(size_t n) : mem(make_device_buffer(n)), p(mem.get()) {}
};

}  // namespace

ProjBenchResult bench_projection(const ProjBenchConfig& c) {
  ProjBenchResult r;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  r.device = prop.name;
  init_kernels();
  // The caps hold for this call only (later runtimes in the process get the production ones).
  struct Caps {
    Caps(int per_sm, int stages) { set_stream_caps(per_sm, stages); }
    ~Caps() { set_stream_caps(0, 0); }
  } caps(c.stream_per_sm, c.stream_stages);
  const bool fp8 = c.quant == "fp8";
  if (c.quant != "q4" && c.quant != "q8" && !fp8) fail("bench projection: --quant must be q4, q8 or fp8");
  if (fp8 && (c.group != 128 || c.argmax)) fail("bench projection: fp8 takes group 128 and no argmax (its head is bf16)");
  if (c.fp8_w8a8 && !fp8) fail("bench projection: W8A8 is an fp8 mode");
  const int bits = c.quant == "q4" ? 4 : 8;
  for (int W : c.widths)
    if (W < 1 || W > kMaxRows) fail("bench projection: width {} outside [1, {}]", W, kMaxRows);
  const bool fold_norm = c.fold == "norm", fold_swiglu = c.fold == "swiglu";
  if (!c.fold.empty() && !fold_norm && !fold_swiglu) fail("bench projection: --fold must be norm or swiglu");
  if (!c.fold.empty() && (c.argmax || c.fp8_w8a8)) fail("bench projection: --fold takes no argmax and no W8A8");

  DevMatrix proto;
  proto.kind = fp8 ? WKind::FP8 : bits == 4 ? WKind::Q4 : WKind::Q8;
  proto.rows = c.rows;
  proto.cols = c.cols;
  proto.group = c.group;
  proto.splits = c.argmax ? 1 : c.splits > 0 ? c.splits : choose_splits(c.rows, c.cols, proto.kind);
  check_matrix(proto, "bench");
  r.splits = proto.splits;
  r.weight_bytes = synthetic_weight_bytes(proto);
  // Rotate over enough copies that they total >= 512 MB (L2 is 50 MB).
  r.copies = std::max(2, int((512e6 + r.weight_bytes - 1) / r.weight_bytes));

  std::vector<DeviceBuffer> keep;
  std::vector<DevMatrix> mats;
  DevMatrix shaped = proto;
  shaped.fp8_activations = fp8 && c.fp8_w8a8;
  for (int i = 0; i < r.copies; ++i) mats.push_back(synthetic_matrix(shaped, uint32_t(i), keep));
  r.streamed = mats[0].packed != nullptr;
  const size_t xn = size_t(kMaxRows) * c.cols;
  Buf x(xn * 2);
  fill_activations(x.p, xn, 5u);
  Buf y(size_t(kMaxRows) * c.rows * 4), scratch(size_t(std::max<int64_t>(1, splitk_scratch_floats(proto))) * 4);
  CUDA_CHECK(cudaMemset(scratch.p, 0, size_t(std::max<int64_t>(1, splitk_scratch_floats(proto))) * 4));
  Buf pairs(size_t(argmax_pairs_bytes(proto))), out(kMaxRows * 4);
  CUDA_CHECK(cudaDeviceSynchronize());

  // The folds' inputs: fp32 residual rows and gamma (norm), fp32 gate | up rows (swiglu).
  const int fold_ld = fold_swiglu ? 2 * c.cols : c.cols;
  Buf fold_x(c.fold.empty() ? 4 : size_t(kMaxRows) * fold_ld * 4), gamma(size_t(c.cols) * 4);
  constexpr float kEps = 1e-6f;
  if (!c.fold.empty()) {
    for (int W : c.widths)
      if (!(fold_norm ? stream_folds_norm(mats[0], W) : stream_folds_swiglu(mats[0], W)))
        fail("bench projection: no {} fold for this matrix at width {} (the folds take 1..{} rows)", c.fold, W,
             kFoldedRows);
    fill_uniform(static_cast<float*>(fold_x.p), size_t(kMaxRows) * fold_ld, 0.0f, 9u);
    fill_uniform(static_cast<float*>(gamma.p), size_t(c.cols), 1.0f, 11u);
  }
  const float* fx = static_cast<const float*>(fold_x.p);
  float* yp = static_cast<float*>(y.p);
  float* sp = static_cast<float*>(scratch.p);
  // The op's own kernel into x, then the matmul; and the fold alone.
  auto unfolded = [&](int i, int W, cudaStream_t s) {
    const DevMatrix& m = mats[size_t(i) % mats.size()];
    if (fold_norm)
      rmsnorm(fx, Act::F32, c.cols, static_cast<const float*>(gamma.p), kEps, W, c.cols, x.p, Act::BF16, c.cols,
              nullptr, s);
    else
      swiglu(fx, fold_ld, c.cols, W, x.p, Act::BF16, c.cols, s);
    matmul(m, x.p, Act::BF16, W, c.cols, yp, c.rows, false, sp, s);
  };
  auto folded = [&](int i, int W, cudaStream_t s) {
    const DevMatrix& m = mats[size_t(i) % mats.size()];
    if (fold_norm)
      stream_matmul_normed(m, fx, c.cols, static_cast<const float*>(gamma.p), kEps, W, yp, c.rows, false, sp, s);
    else
      stream_matmul_swiglu(m, fx, fold_ld, c.cols, W, yp, c.rows, false, sp, s);
  };

  // One production call: copy i of the weights, W rows of activations from xp.
  auto launch = [&](int i, const void* xp, int W, cudaStream_t s) {
    const DevMatrix& m = mats[size_t(i) % mats.size()];
    if (c.argmax)
      matmul_argmax(m, xp, Act::BF16, W, c.cols, pairs.p, static_cast<int32_t*>(out.p), nullptr, s);
    else
      matmul(m, xp, Act::BF16, W, c.cols, static_cast<float*>(y.p), c.rows, false, static_cast<float*>(scratch.p), s);
  };

  // Batch invariance: rows 0, 5, 31 alone == inside the 64-row call.
  {
    r.invariant = true;
    const size_t per = c.argmax ? 4 : size_t(c.rows) * 4;
    std::vector<uint8_t> full(per * kMaxRows), one(per);
    launch(0, x.p, kMaxRows, nullptr);
    CUDA_CHECK(cudaMemcpy(full.data(), c.argmax ? out.p : y.p, full.size(), cudaMemcpyDeviceToHost));
    for (int row : {0, 5, 31}) {
      launch(0, static_cast<const bf16*>(x.p) + size_t(row) * c.cols, 1, nullptr);
      CUDA_CHECK(cudaMemcpy(one.data(), c.argmax ? out.p : y.p, per, cudaMemcpyDeviceToHost));
      if (std::memcmp(one.data(), full.data() + per * row, per) != 0) {
        r.invariant = false;
        r.invariant_detail += " row" + std::to_string(row);
      }
    }
  }

  // W8A8 against W8A16: the same weights and activations, 64 rows.
  if (c.fp8_w8a8) {
    DevMatrix exact = mats[0];
    exact.fp8_activations = false;
    auto outputs = [&](const DevMatrix& m) {
      matmul(m, x.p, Act::BF16, kMaxRows, c.cols, static_cast<float*>(y.p), c.rows, false,
             static_cast<float*>(scratch.p), nullptr);
      std::vector<float> v(size_t(kMaxRows) * c.rows);
      CUDA_CHECK(cudaMemcpy(v.data(), y.p, v.size() * 4, cudaMemcpyDeviceToHost));
      return v;
    };
    std::tie(r.w8a8_rel_rms, r.w8a8_rel_max) = relative_error(outputs(mats[0]), outputs(exact));
    Buf xo(xn * 2);
    CUDA_CHECK(cudaMemcpy(xo.p, x.p, xn * 2, cudaMemcpyDeviceToDevice));
    scale_outlier_columns<<<1024, 256>>>(static_cast<bf16*>(xo.p), xn, c.cols);
    CUDA_CHECK_LAUNCH("bench outliers");
    std::swap(x.p, xo.p);  // the outputs above read x
    std::tie(r.w8a8_outlier_rel_rms, r.w8a8_outlier_rel_max) = relative_error(outputs(mats[0]), outputs(exact));
    std::swap(x.p, xo.p);
  }

  // The fold's bits == the op's kernel then the matmul, at every width.
  for (int W : c.fold.empty() ? std::vector<int>{} : c.widths) {
    const size_t n = size_t(W) * c.rows;
    std::vector<float> want(n), got(n);
    unfolded(0, W, nullptr);
    CUDA_CHECK(cudaMemcpy(want.data(), y.p, n * 4, cudaMemcpyDeviceToHost));
    folded(0, W, nullptr);
    CUDA_CHECK(cudaMemcpy(got.data(), y.p, n * 4, cudaMemcpyDeviceToHost));
    if (std::memcmp(want.data(), got.data(), n * 4) != 0) r.fold_equal = false;
  }

  const Event e0 = make_event(), e1 = make_event();
  const CopyAnchor copy = measure_copy_bandwidth();
  r.copy_bytes = copy.bytes;
  r.copy_ms = copy.ms;
  r.copy_gbs = copy.gbs;

  // Timing: as the runtime runs them, inside CUDA graphs. A sample is one
  // replay of a graph of kGraphLaunches launches (rotating the copies),
  // divided by kGraphLaunches; the widths interleave ABBA over rounds.
  constexpr int kGraphLaunches = 10;
  // In fold mode graph k + n holds width k's op kernel + matmul pairs, and
  // graph k the fold (the rows' time); each round times both, in turn.
  const Stream stream = make_stream();
  const size_t n = c.widths.size(), arms = c.fold.empty() ? 1 : 2;
  std::vector<GraphExec> graphs(n * arms);
  for (size_t k = 0; k < graphs.size(); ++k) {
    const int W = c.widths[k % n];
    Graph g;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kGraphLaunches; ++i) {
      if (c.fold.empty()) launch(i, x.p, W, stream);
      else if (k < n) folded(i, W, stream);
      else unfolded(i, W, stream);
    }
    CUDA_CHECK(end_capture(stream, &g));
    graphs[k] = instantiate(g);
    CUDA_CHECK(cudaGraphLaunch(graphs[k], stream));  // warm-up
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<std::vector<double>> samples(graphs.size());
  const int per_round = std::max(1, c.repeats / std::max(1, c.rounds));
  for (int round = 0; round < c.rounds; ++round) {
    for (size_t wi = 0; wi < n; ++wi) {
      for (size_t a = 0; a < arms; ++a) {
        const size_t k = (round % 2 ? n - 1 - wi : wi) + n * (round % 2 ? arms - 1 - a : a);
        for (int i = 0; i < per_round; ++i) samples[k].push_back(time_replay(graphs[k], stream, e0, e1) / kGraphLaunches);
      }
    }
  }
  for (size_t k = 0; k < n; ++k) {
    ProjBenchRow row;
    row.W = c.widths[k];
    row.ms_median = sample_median(samples[k]);
    row.ms_min = *std::min_element(samples[k].begin(), samples[k].end());
    row.ms_max = *std::max_element(samples[k].begin(), samples[k].end());
    if (arms == 2) {
      const auto& u = samples[k + n];
      row.unfolded_ms_median = sample_median(u);
      row.unfolded_ms_min = *std::min_element(u.begin(), u.end());
      row.unfolded_ms_max = *std::max_element(u.begin(), u.end());
    }
    row.bytes = r.weight_bytes + double(row.W) * c.cols * 2 + (c.argmax ? 0.0 : double(row.W) * c.rows * 4);
    r.rows.push_back(row);
  }
  return r;
}

}  // namespace nextn::cuda
