// nextn bench chain: see chain_bench.h.
#include "backend/cuda/chain_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <tuple>

#include "backend/cuda/bench_weights.h"
#include "backend/cuda/check.h"
#include "backend/cuda/device_handles.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_chain.h"
#include "backend/cuda/matmul_stream.h"
#include "core/error.h"

namespace nextn::cuda {

ChainBenchResult bench_chain(const ChainBenchConfig& c) {
  ChainBenchResult r;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  r.device = prop.name;
  init_kernels();
  if (c.quant != "q4" && c.quant != "q8") fail("bench chain: --quant must be q4 or q8");
  if (c.layers < 1 || 2 * c.layers > kChainMaxLinks) fail("bench chain: {} layers outside [1, {}]", c.layers, kChainMaxLinks / 2);
  for (int T : c.rows)
    if (T < 1 || T > kFoldedRows) fail("bench chain: {} rows outside [1, {}]", T, kFoldedRows);
  const int H = c.hidden, I = c.intermediate, L = c.layers;
  const WKind kind = c.quant == "q4" ? WKind::Q4 : WKind::Q8;
  auto proto = [&](int rows, int cols) {
    DevMatrix m;
    m.kind = kind;
    m.rows = rows;
    m.cols = cols;
    m.group = 64;
    m.splits = choose_splits(rows, cols, kind);
    check_matrix(m, "bench chain");
    return m;
  };
  const DevMatrix gu_shape = proto(2 * I, H), down_shape = proto(H, I);
  r.gate_up_splits = gu_shape.splits;
  r.down_splits = down_shape.splits;
  std::vector<DeviceBuffer> keep;
  std::vector<DevMatrix> gate_up, down;
  std::vector<float*> gammas;
  for (int l = 0; l < L; ++l) {
    gate_up.push_back(synthetic_matrix(gu_shape, uint32_t(2 * l), keep));
    down.push_back(synthetic_matrix(down_shape, uint32_t(2 * l + 1), keep));
    if (gate_up.back().packed == nullptr || down.back().packed == nullptr)
      fail("bench chain: {}x{} or {}x{} does not take the streamed kernel", 2 * I, H, H, I);
    keep.push_back(make_device_buffer(size_t(H) * 4));
    gammas.push_back(static_cast<float*>(keep.back().get()));
    fill_uniform(gammas.back(), size_t(H), 1.0f, 1000u + uint32_t(l));
    r.weight_bytes += synthetic_weight_bytes(gate_up.back()) + synthetic_weight_bytes(down.back());
  }
  const int ld_proj = 2 * I;
  const int64_t scratch_floats = std::max(splitk_scratch_floats(gate_up[0]), splitk_scratch_floats(down[0]));
  const CopyAnchor copy = measure_copy_bandwidth();
  r.copy_gbs = copy.gbs;

  const Stream stream = make_stream();
  const Event e0 = make_event(), e1 = make_event();
  constexpr float kEps = 1e-6f;
  for (int T : c.rows) {
    ChainBenchRow row;
    row.T = T;
    // Each arm its own x, gate_up rows and split-K scratch.
    struct Arm {
      DeviceBuffer x, proj, scratch;
    };
    auto make_arm = [&] {
      Arm a{make_device_buffer(size_t(T) * H * 4), make_device_buffer(size_t(T) * ld_proj * 4),
            make_device_buffer(size_t(std::max<int64_t>(1, scratch_floats)) * 4)};
      CUDA_CHECK(cudaMemset(a.scratch.get(), 0, size_t(std::max<int64_t>(1, scratch_floats)) * 4));
      CUDA_CHECK(cudaMemset(a.proj.get(), 0, size_t(T) * ld_proj * 4));
      return a;
    };
    Arm calls = make_arm(), chained = make_arm();
    const DeviceBuffer x0 = make_device_buffer(size_t(T) * H * 4);
    fill_uniform(static_cast<float*>(x0.get()), size_t(T) * H, 0.0f, 7u);
    auto run_calls = [&](cudaStream_t s) {
      float* x = static_cast<float*>(calls.x.get());
      float* proj = static_cast<float*>(calls.proj.get());
      float* sp = static_cast<float*>(calls.scratch.get());
      for (int l = 0; l < L; ++l) {
        stream_matmul_normed(gate_up[size_t(l)], x, H, gammas[size_t(l)], kEps, T, proj, ld_proj, false, sp, s);
        stream_matmul_swiglu(down[size_t(l)], proj, ld_proj, I, T, x, H, true, sp, s);
      }
    };
    std::vector<ChainLink> links;
    for (int l = 0; l < L; ++l) {
      ChainLink norm;
      norm.W = &gate_up[size_t(l)];
      norm.input = ChainInput::Norm;
      norm.x = static_cast<const float*>(chained.x.get());
      norm.ldx = H;
      norm.gamma = gammas[size_t(l)];
      norm.eps = kEps;
      norm.y = static_cast<float*>(chained.proj.get());
      norm.ldy = ld_proj;
      links.push_back(norm);
      ChainLink swiglu;
      swiglu.W = &down[size_t(l)];
      swiglu.input = ChainInput::Swiglu;
      swiglu.x = static_cast<const float*>(chained.proj.get());
      swiglu.ldx = ld_proj;
      swiglu.up = I;
      swiglu.y = static_cast<float*>(chained.x.get());
      swiglu.ldy = H;
      swiglu.accumulate = true;
      links.push_back(swiglu);
    }
    const StreamChain chain(links, T);
    row.grid = chain.grid();
    auto run_chain = [&](cudaStream_t s) { chain.launch(static_cast<float*>(chained.scratch.get()), s); };

    // The bits: both arms from x0, every layer; then x and the last gate_up rows compared.
    for (Arm* a : {&calls, &chained})
      CUDA_CHECK(cudaMemcpy(a->x.get(), x0.get(), size_t(T) * H * 4, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());  // the setup above ran on the legacy stream; `stream` does not wait for it
    run_calls(stream);
    run_chain(stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    row.equal = true;
    for (auto [bytes, pa, pb] : {std::tuple{size_t(T) * H * 4, calls.x.get(), chained.x.get()},
                                 std::tuple{size_t(T) * ld_proj * 4, calls.proj.get(), chained.proj.get()}}) {
      std::vector<uint8_t> va(bytes), vb(bytes);
      CUDA_CHECK(cudaMemcpy(va.data(), pa, bytes, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(vb.data(), pb, bytes, cudaMemcpyDeviceToHost));
      row.equal = row.equal && std::memcmp(va.data(), vb.data(), bytes) == 0;
    }

    // Timing: one graph per arm (x keeps accumulating over replays; the
    // norm keeps it in range), replays interleaved ABBA over rounds.
    GraphExec graphs[2];
    for (int arm = 0; arm < 2; ++arm) {
      Graph g;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      if (arm == 0) run_chain(stream);
      else run_calls(stream);
      CUDA_CHECK(end_capture(stream, &g));
      graphs[arm] = instantiate(g);
      CUDA_CHECK(cudaGraphLaunch(graphs[arm], stream));  // warm-up
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> samples[2];
    const int per_round = std::max(1, c.repeats / std::max(1, c.rounds));
    for (int round = 0; round < c.rounds; ++round)
      for (int k = 0; k < 2; ++k) {
        const int arm = round % 2 ? 1 - k : k;
        for (int i = 0; i < per_round; ++i) samples[arm].push_back(time_replay(graphs[arm], stream, e0, e1));
      }
    row.chain_ms = sample_median(samples[0]);
    row.chain_ms_min = *std::min_element(samples[0].begin(), samples[0].end());
    row.chain_ms_max = *std::max_element(samples[0].begin(), samples[0].end());
    row.calls_ms = sample_median(samples[1]);
    row.calls_ms_min = *std::min_element(samples[1].begin(), samples[1].end());
    row.calls_ms_max = *std::max_element(samples[1].begin(), samples[1].end());
    r.rows.push_back(row);
  }
  return r;
}

}  // namespace nextn::cuda
