// nextn bench projection: the quantized projection (optionally with the fused
// argmax) timed per verify width on synthetic weights, beside the device copy
// bandwidth of the same run. CUDA builds only; elsewhere it fails cleanly.
#pragma once
#include <string>
#include <vector>

namespace nextn::bench {

struct ProjectionOptions {
  std::string shape = "248320x5120";  // rows x cols (out features x in features)
  std::string quant = "q4";           // q4 | q8
  int group_size = 64;
  std::vector<int> widths{1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32};
  bool argmax = false;
  int repeats = 30;
  int splits = 0;  // split-K override (0: the production choice, choose_splits)
  // The streamed kernel's tuning caps (0: the production ones): blocks per
  // SM 1..3, ring stages 2..12 (--stream-per-sm, --stream-stages).
  int stream_per_sm = 0, stream_stages = 0;
  // norm | swiglu: the fold against the op's own kernel then the matmul (--fold; widths 1..8).
  std::string fold;
  bool json = false;
};

// Prints the table (or one JSON object); returns the process exit code
// (non-zero when the batch-invariance check or the fold's bits check fails).
int run_projection(const ProjectionOptions& o);

}  // namespace nextn::bench
