// Shared by the K-per-step tests (test_block_choice.cpp, test_cuda_batch.cpp):
// a chooser that cycles every sequence through K = 1, 1, 4, 1, 2, 3, so
// rounds at K = 1 (which skip the MTP pairing) alternate with drafting ones.
#pragma once
#include <algorithm>
#include <span>

#include "engine/block_choice.h"

namespace nextn::test {

class CyclingChooser final : public BlockChooser {
 public:
  void choose(std::span<const BlockCandidate> c, int, std::span<int> k) override {
    static constexpr int kCycle[] = {1, 1, 4, 1, 2, 3};
    const int K = kCycle[step_++ % 6];
    for (size_t i = 0; i < c.size(); ++i) k[i] = std::min(K, c[i].max_k);
  }
  const BlockChoiceReport& report() const override { return report_; }

 private:
  int step_ = 0;
  BlockChoiceReport report_;
};

}  // namespace nextn::test
