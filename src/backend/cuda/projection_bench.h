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
  int rows = 248320, cols = 5120, group = 64;
  // q4 | q8: MLX affine; fp8: e4m3 codes with an fp32 scale per 128 x 128
  // block (Qwen's FP8 releases; group must be 128), W8A16 unless fp8_w8a8.
  std::string quant = "q4";
  bool fp8_w8a8 = false;
  std::vector<int> widths{1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32};
  bool argmax = false;
  int repeats = 30;  // timed launches per width, spread over interleaved rounds
  int rounds = 3;
  int splits = 0;    // split-K override; 0: choose_splits (the production choice)
  int stream_per_sm = 0, stream_stages = 0;  // the streamed kernel's tuning caps (set_stream_caps; 0: production)
  // "norm" or "swiglu": time the fold (matmul_stream.h) against the op's own
  // kernel then the matmul, at widths up to kFoldedRows ("": the matmul alone).
  std::string fold;
};

struct ProjBenchRow {
  int W = 0;
  double ms_median = 0, ms_min = 0, ms_max = 0;
  double bytes = 0;  // bytes the launch must move (weights, scales+biases, activations, outputs)
  double unfolded_ms_median = 0, unfolded_ms_min = 0, unfolded_ms_max = 0;  // fold mode: the op's kernel + the matmul
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
  bool fold_equal = true;   // fold mode: the fold's outputs == the op's kernel then the matmul, bitwise, every width
  // W8A8 only: its outputs against W8A16's (same weights and 64 rows of
  // activations), as ||y8 - y16|| / ||y16|| and max |y8 - y16| / max |y16|,
  // for activations uniform in [-1, 1] and for the same with every 64th
  // column times 30 (outlier channels, as LLM activations have).
  double w8a8_rel_rms = -1, w8a8_rel_max = -1, w8a8_outlier_rel_rms = -1, w8a8_outlier_rel_max = -1;
  std::vector<ProjBenchRow> rows;
};

ProjBenchResult bench_projection(const ProjBenchConfig& c);

}  // namespace nextn::cuda
