// nextn bench chain (src/bench/chain.h): issue 24's persistent-kernel
// prototype timed against the runtime's launches. A model's MLP blocks,
// x += down . swiglu(gate_up . rmsnorm(x)) layer after layer on synthetic
// weights (every layer its own, so they stream from memory), run two ways
// at each row count: as the layer path runs them (a streamed launch per
// projection: stream_matmul, stream_matmul_normed, stream_matmul_swiglu)
// and as StreamChain launches (matmul_chain.h): one for every MLP block, or
// one per layer with the out- and in-projections around the MLP. Both in
// CUDA graphs, the device copy bandwidth measured in the same call. CUDA
// builds only.
#pragma once
#include <string>
#include <vector>

namespace nextn::cuda {

struct ChainBenchConfig {
  int hidden = 1024, intermediate = 3584, layers = 24;  // qwen3.5-0.8b
  // 0: the MLP blocks of every layer in one chain. Else a chain per layer
  // of what runs between two cores: the out-projection (hidden x out_cols,
  // from bf16 rows, added to x), gate_up, down, and the next in-projection
  // (in_rows x hidden, norm folded), against 4 launches per layer.
  int in_rows = 0, out_cols = 0;
  std::string quant = "q4";                             // q4 | q8 (MLX affine, group 64)
  std::vector<int> rows{1, 2, 4, 8};
  int repeats = 30;  // timed replays per arm and row count, over interleaved rounds
  int rounds = 3;
};

struct ChainBenchRow {
  int T = 0;
  double chain_ms = 0, chain_ms_min = 0, chain_ms_max = 0;  // one replay: every layer
  double calls_ms = 0, calls_ms_min = 0, calls_ms_max = 0;
  bool equal = false;  // every output buffer of the chains == the calls', bitwise, from the same x
  int grid = 0;        // the largest chain's blocks
};

struct ChainBenchResult {
  std::string device;
  double copy_gbs = 0;
  double weight_bytes = 0;  // every layer's matrices, as the kernels read them
  int launches = 0, chains = 0;  // per replay: the calls' launches, the chain arm's
  int gate_up_splits = 1, down_splits = 1;
  std::vector<ChainBenchRow> rows;
};

ChainBenchResult bench_chain(const ChainBenchConfig& c);

}  // namespace nextn::cuda
