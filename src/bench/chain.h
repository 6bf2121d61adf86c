// nextn bench chain: issue 24's persistent-kernel prototype. A preset's
// projections run as the layer path launches them (one streamed launch
// each) and as chained launches (cuda::StreamChain), per row count, in
// graphs, beside the device copy bandwidth; the two must give the same
// bits. --links mlp: every layer's MLP (gate_up with the norm folded, down
// with the SwiGLU folded) in one chain; --links layer: a chain per layer of
// what runs between two cores (the GDN out-projection, the MLP, the next
// GDN in-projection: the shapes of the preset's GDN layers, 3 in 4). The options are checked
// here (CPU-testable); the timing is cuda::bench_chain, CUDA builds only.
#pragma once
#include <string>
#include <vector>

namespace nextn::bench {

struct ChainOptions {
  std::string preset = "qwen3.5-0.8b";  // a dense qwen3.5 preset: its hidden and intermediate sizes, its layers
  int layers = 0;                       // 0: the preset's layer count
  std::string links = "mlp";            // mlp | layer
  std::string quant = "q4";             // q4 | q8 (MLX affine, group 64)
  std::vector<int> rows{1, 2, 4, 8};
  int repeats = 30;
  bool json = false;
};

// Prints the table (or one JSON object). Returns 0, or 3 when the chain's
// bits differ from the launches' at some row count (the table is still
// printed; the CLI then exits 1 with an error line).
int run_chain(const ChainOptions& o);

}  // namespace nextn::bench
