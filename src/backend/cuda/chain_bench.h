// nextn bench chain (src/bench/chain.h): issue 24's persistent-kernel
// prototype timed against the runtime's launches. A model's MLP blocks,
// x += down . swiglu(gate_up . rmsnorm(x)) layer after layer on synthetic
// weights (every layer its own, so they stream from memory), run two ways
// at each row count: as the layer path runs them (two folded streamed
// launches per layer, stream_matmul_normed then stream_matmul_swiglu) and
// as one StreamChain launch (matmul_chain.h). Both in CUDA graphs, the
// device copy bandwidth measured in the same call. CUDA builds only.
#pragma once
#include <string>
#include <vector>

namespace nextn::cuda {

struct ChainBenchConfig {
  int hidden = 1024, intermediate = 3584, layers = 24;  // qwen3.5-0.8b
  std::string quant = "q4";                             // q4 | q8 (MLX affine, group 64)
  std::vector<int> rows{1, 2, 4, 8};
  int repeats = 30;  // timed replays per arm and row count, over interleaved rounds
  int rounds = 3;
};

struct ChainBenchRow {
  int T = 0;
  double chain_ms = 0, chain_ms_min = 0, chain_ms_max = 0;  // one replay: every layer's MLP
  double calls_ms = 0, calls_ms_min = 0, calls_ms_max = 0;
  bool equal = false;  // the chain's x and gate_up rows == the calls', bitwise, from the same x
  int grid = 0;        // the chain's blocks
};

struct ChainBenchResult {
  std::string device;
  double copy_gbs = 0;
  double weight_bytes = 0;  // every layer's gate_up and down, as the kernels read them
  int gate_up_splits = 1, down_splits = 1;
  std::vector<ChainBenchRow> rows;
};

ChainBenchResult bench_chain(const ChainBenchConfig& c);

}  // namespace nextn::cuda
