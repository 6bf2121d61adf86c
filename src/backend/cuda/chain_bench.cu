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

namespace {

// One link as its own streamed launch: what the layer path runs.
void launch_alone(const ChainLink& l, int T, float* scratch, cudaStream_t s) {
  switch (l.input) {
    case ChainInput::Rows:
      stream_matmul(*l.W, l.rows, T, l.ldx, l.y, l.ldy, l.accumulate, scratch, s);
      break;
    case ChainInput::Norm:
      stream_matmul_normed(*l.W, l.x, l.ldx, l.gamma, l.eps, T, l.y, l.ldy, l.accumulate, scratch, s);
      break;
    case ChainInput::Swiglu:
      stream_matmul_swiglu(*l.W, l.x, l.ldx, l.up, T, l.y, l.ldy, l.accumulate, scratch, s);
      break;
  }
}

}  // namespace

ChainBenchResult bench_chain(const ChainBenchConfig& c) {
  ChainBenchResult r;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  r.device = prop.name;
  init_kernels();
  if (c.quant != "q4" && c.quant != "q8") fail("bench chain: --quant must be q4 or q8");
  const bool per_layer = c.in_rows > 0;
  const int links_per_layer = per_layer ? 4 : 2;
  if (c.layers < 1 || (!per_layer && 2 * c.layers > kChainMaxLinks))
    fail("bench chain: {} layers outside [1, {}]", c.layers, kChainMaxLinks / 2);
  for (int T : c.rows)
    if (T < 1 || T > kFoldedRows) fail("bench chain: {} rows outside [1, {}]", T, kFoldedRows);
  const int H = c.hidden, I = c.intermediate, L = c.layers, V = c.out_cols;
  if (per_layer && (V < 128 || V % 128 != 0))
    fail("bench chain: the out-projection's {} columns are not a positive multiple of 128", V);
  const WKind kind = c.quant == "q4" ? WKind::Q4 : WKind::Q8;
  auto shaped = [&](int rows, int cols) {
    DevMatrix m;
    m.kind = kind;
    m.rows = rows;
    m.cols = cols;
    m.group = 64;
    m.splits = choose_splits(rows, cols, kind);
    check_matrix(m, "bench chain");
    return m;
  };
  std::vector<DevMatrix> shapes = {shaped(2 * I, H), shaped(H, I)};  // gate_up, down
  if (per_layer) {
    shapes.push_back(shaped(H, V));          // out
    shapes.push_back(shaped(c.in_rows, H));  // in
  }
  r.gate_up_splits = shapes[0].splits;
  r.down_splits = shapes[1].splits;
  std::vector<DeviceBuffer> keep;
  std::vector<std::vector<DevMatrix>> mats(shapes.size());  // [shape][layer]
  std::vector<float*> gammas, in_gammas;
  int64_t scratch_floats = 1;
  for (int l = 0; l < L; ++l) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      mats[k].push_back(synthetic_matrix(shapes[k], uint32_t(4 * l + int(k)), keep));
      if (mats[k].back().packed == nullptr)
        fail("bench chain: {}x{} does not take the streamed kernel", shapes[k].rows, shapes[k].cols);
      r.weight_bytes += synthetic_weight_bytes(mats[k].back());
      scratch_floats = std::max(scratch_floats, splitk_scratch_floats(mats[k].back()));
    }
    for (auto* g : {&gammas, &in_gammas}) {
      keep.push_back(make_device_buffer(size_t(H) * 4));
      g->push_back(static_cast<float*>(keep.back().get()));
      fill_uniform(g->back(), size_t(H), 1.0f, 1000u + uint32_t(2 * l + (g == &gammas ? 0 : 1)));
    }
  }
  r.launches = links_per_layer * L;
  r.chains = per_layer ? L : 1;
  const int ld_proj = 2 * I, ld_in = std::max(c.in_rows, 1);
  const CopyAnchor copy = measure_copy_bandwidth();
  r.copy_gbs = copy.gbs;

  const Stream stream = make_stream();
  const Event e0 = make_event(), e1 = make_event();
  constexpr float kEps = 1e-6f;
  for (int T : c.rows) {
    ChainBenchRow row;
    row.T = T;
    // Each arm its own outputs and split-K scratch; both read the same core rows.
    struct Arm {
      DeviceBuffer x, proj, in, scratch;
    };
    auto make_arm = [&] {
      Arm a{make_device_buffer(size_t(T) * H * 4), make_device_buffer(size_t(T) * ld_proj * 4),
            make_device_buffer(size_t(T) * ld_in * 4), make_device_buffer(size_t(scratch_floats) * 4)};
      CUDA_CHECK(cudaMemset(a.scratch.get(), 0, size_t(scratch_floats) * 4));
      CUDA_CHECK(cudaMemset(a.proj.get(), 0, size_t(T) * ld_proj * 4));
      CUDA_CHECK(cudaMemset(a.in.get(), 0, size_t(T) * ld_in * 4));
      return a;
    };
    Arm calls = make_arm(), chained = make_arm();
    const DeviceBuffer x0 = make_device_buffer(size_t(T) * H * 4);
    const DeviceBuffer core = make_device_buffer(size_t(T) * std::max(V, 8) * 2);  // the attention / GDN output rows
    fill_uniform(static_cast<float*>(x0.get()), size_t(T) * H, 0.0f, 7u);
    fill_activations(core.get(), size_t(T) * std::max(V, 8), 8u);
    // Layer l's links over an arm's buffers.
    auto layer_links = [&](Arm& a, int l) {
      float* x = static_cast<float*>(a.x.get());
      float* proj = static_cast<float*>(a.proj.get());
      std::vector<ChainLink> links;
      if (per_layer) links.push_back(rows_link(mats[2][size_t(l)], core.get(), V, x, H, true));
      links.push_back(norm_link(mats[0][size_t(l)], x, H, gammas[size_t(l)], kEps, proj, ld_proj, false));
      links.push_back(swiglu_link(mats[1][size_t(l)], proj, ld_proj, I, x, H, true));
      if (per_layer)
        links.push_back(norm_link(mats[3][size_t(l)], x, H, in_gammas[size_t(l)], kEps,
                                  static_cast<float*>(a.in.get()), ld_in, false));
      return links;
    };
    std::vector<ChainLink> call_links;
    std::vector<std::vector<ChainLink>> segments(per_layer ? size_t(L) : 1);
    for (int l = 0; l < L; ++l) {
      for (const auto& link : layer_links(calls, l)) call_links.push_back(link);
      for (const auto& link : layer_links(chained, l)) segments[per_layer ? size_t(l) : 0].push_back(link);
    }
    std::vector<std::unique_ptr<StreamChain>> chains;
    for (const auto& seg : segments) {
      chains.push_back(std::make_unique<StreamChain>(seg, T));
      row.grid = std::max(row.grid, chains.back()->grid());
    }
    auto run_calls = [&](cudaStream_t s) {
      for (const auto& link : call_links) launch_alone(link, T, static_cast<float*>(calls.scratch.get()), s);
    };
    auto run_chain = [&](cudaStream_t s) {
      for (const auto& ch : chains) ch->launch(static_cast<float*>(chained.scratch.get()), s);
    };

    // The bits: both arms from x0, every layer; then every output buffer compared.
    for (Arm* a : {&calls, &chained})
      CUDA_CHECK(cudaMemcpy(a->x.get(), x0.get(), size_t(T) * H * 4, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());  // the setup above ran on the legacy stream; `stream` does not wait for it
    run_calls(stream);
    run_chain(stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    row.equal = true;
    for (auto [bytes, pa, pb] : {std::tuple{size_t(T) * H * 4, calls.x.get(), chained.x.get()},
                                 std::tuple{size_t(T) * ld_proj * 4, calls.proj.get(), chained.proj.get()},
                                 std::tuple{size_t(T) * ld_in * 4, calls.in.get(), chained.in.get()}}) {
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
