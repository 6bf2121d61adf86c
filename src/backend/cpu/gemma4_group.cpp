// The CPU Gemma 4 sequence group: one Gemma4Model, sequences over it, shared
// trunk forwards and LM-head projections (model/batch_runtime.h). Gemma 4
// has no MTP head: the step's MTP calls are never made for it (its
// ModelInfo says 0 MTP layers), and the base class's per-sequence fallback
// would refuse them.
#include <algorithm>
#include <limits>
#include <climits>

#include "backend/cpu/gemma4_model.h"
#include "core/error.h"
#include "io/gemma4_checkpoint.h"

namespace nextn {
namespace cpu_gemma4 {
namespace {

class CpuGemma4Group final : public SequenceGroup {
 public:
  CpuGemma4Group(const Gemma4Checkpoint& ckpt, const CpuRuntimeOptions& options)
      : model_(std::make_shared<Gemma4Model>(ckpt, options)) {}
  const char* backend_name() const override { return "cpu"; }
  ModelInfo info() const override { return model_->info; }
  int max_sequences() const override { return INT_MAX; }
  bool shares_forwards() const override { return true; }
  int chunk_invariant_rows() const override { return std::numeric_limits<int>::max(); }  // every op batch-invariant
  std::vector<KvPoolUse> kv_pools() override { return model_->kv_pools(); }
  std::unique_ptr<ModelRuntime> add_sequence(int max_tokens) override {
    return std::make_unique<CpuGemma4>(model_, max_tokens);
  }
  void forward_together(std::span<ModelRuntime* const> sequences,
                        std::span<const std::span<const int32_t>> tokens) override {
    CpuGemma4::forward_together(own(sequences, tokens.size(), "forward_together"), tokens);
  }
  void head_argmax_together(std::span<const SequenceRows> rows, int32_t* out) override {
    if (rows.empty()) return;
    std::vector<ModelRuntime*> sequences;
    for (const SequenceRows& r : rows) sequences.push_back(r.sequence);
    CpuGemma4::head_argmax_together(own(sequences, rows.size(), "head_argmax_together"), rows, out);
    ++step_work_.lm_head_launches;
  }

 private:
  std::vector<CpuGemma4*> own(std::span<ModelRuntime* const> sequences, size_t lists, const char* what) const {
    return own_sequences<CpuGemma4>(sequences, lists, what, [&](const CpuGemma4& g) { return g.model() == model_.get(); });
  }
  std::shared_ptr<Gemma4Model> model_;
};

}  // namespace
}  // namespace cpu_gemma4

std::unique_ptr<SequenceGroup> make_cpu_gemma4_group(const Gemma4Checkpoint& ckpt, const CpuRuntimeOptions& options) {
  return std::make_unique<cpu_gemma4::CpuGemma4Group>(ckpt, options);
}

}  // namespace nextn
