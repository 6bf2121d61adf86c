// nextn bench trunk: every trunk matrix of the Qwen3.5 presets (0.8B, 4B,
// 27B) through the production matmul at 1..32 rows, beside the device copy
// bandwidth of the same call (issue 24's kernel table). The shapes come from
// the presets' configs (trunk_matrices, CPU-testable); the timing is
// cuda::bench_projection per shape, so CUDA builds only.
#pragma once
#include <string>
#include <vector>

#include "io/synthetic.h"

namespace nextn::bench {

// One matrix a decode step streams, with how many times a token reads it.
struct TrunkMatrix {
  std::string name;    // "gate_up", "down", "gdn.in", ...: the breakdown's names
  int rows = 0;        // output features (fused parts concatenated, as the runtime uploads them)
  int cols = 0;        // input features
  int per_token = 0;   // calls per plain decode token
  bool argmax = false; // the LM head: projection + argmax, its production path
};

// The matrices of one decode token of preset p, in layer order, each shape once.
std::vector<TrunkMatrix> trunk_matrices(const SyntheticPreset& p);

struct TrunkOptions {
  std::vector<std::string> presets{"qwen3.5-0.8b", "qwen3.5-4b", "qwen3.5-27b"};
  std::string quant = "q4";  // q4 | q8 (MLX affine, group 64) | fp8 (e4m3, 128 x 128 blocks; the LM head is not FP8)
  bool fp8_w8a8 = false;     // fp8: the W8A8 kernel (--fp8-matmul w8a8), with its error against W8A16
  std::vector<int> rows{1, 2, 4, 8, 16, 32};
  int repeats = 30;
  bool json = false;
};

// Prints the table (or one JSON object). Returns the exit code: 0, or 3
// when a shape fails its batch-invariance check (the table is still printed).
int run_trunk(const TrunkOptions& o);

}  // namespace nextn::bench
