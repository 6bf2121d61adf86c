// Projection microbenchmark on the device (nextn bench projection): one
// quantized matrix of a given shape through the production matmul launchers
// (cuda::matmul / cuda::matmul_argmax), synthetic weights rotated over enough
// copies that L2 never serves a repeat, and the device copy bandwidth
// measured in the same process. Plain C++ interface; CUDA builds only.
#pragma once
#include <string>
#include <vector>

namespace nextn::cuda {

struct ProjBenchConfig {
  int rows = 248320, cols = 5120, bits = 4, group = 64;
  std::vector<int> widths{1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32};
  bool argmax = false;
  int repeats = 30;  // timed launches per width, spread over interleaved rounds
  int rounds = 3;
  int splits = 0;    // split-K override; 0: choose_splits (the production choice)
  int stream_per_sm = 0, stream_stages = 0;  // the streamed kernel's tuning caps (set_stream_caps; 0: production)
};

struct ProjBenchRow {
  int W = 0;
  double ms_median = 0, ms_min = 0, ms_max = 0;
  double bytes = 0;  // bytes the launch must move (weights, scales+biases, activations, outputs)
};

struct ProjBenchResult {
  std::string device;
  double copy_gbs = 0;      // device-to-device copy, (read + write) / time
  double copy_ms = 0;
  int64_t copy_bytes = 0;
  int copies = 0;           // weight copies rotated
  double weight_bytes = 0;  // one copy as the kernel reads it
  int splits = 1;
  bool streamed = false;    // served by the streamed kernel (else the generic one)
  bool invariant = false;   // row r alone == row r inside the 64-row call, bitwise
  std::string invariant_detail;
  std::vector<ProjBenchRow> rows;
};

ProjBenchResult bench_projection(const ProjBenchConfig& c);

}  // namespace nextn::cuda
