// Shared by the K-per-step tests (test_block_choice.cpp, test_cuda_batch.cpp):
// sequence slots of a group, and a chooser that cycles every sequence through K = 1, 1, 4, 1, 2, 3, so
// rounds at K = 1 (which skip the MTP pairing) alternate with drafting ones.
#pragma once
#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "engine/block_choice.h"
#include "model/batch_runtime.h"

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

// n fresh sequences of `group`, owned, and their pointers (what StepLoop::add
// and probe_step_costs take).
struct Slots {
  std::vector<std::unique_ptr<ModelRuntime>> owned;
  std::vector<ModelRuntime*> raw;
  Slots(SequenceGroup& group, size_t n, int capacity) {
    for (size_t i = 0; i < n; ++i) {
      owned.push_back(group.add_sequence(capacity));
      raw.push_back(owned.back().get());
    }
  }
};

}  // namespace nextn::test
