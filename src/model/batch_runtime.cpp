#include "model/batch_runtime.h"

#include <vector>

#include "backend/cpu/qwen35.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35.h"
#endif
#include "core/error.h"
#include "io/checkpoint.h"

namespace nextn {
namespace {

// A backend without multi-sequence support: every sequence is a runtime of
// its own from make_runtime (its own weights), and forward_together runs
// their forwards one after another.
class SerialSequenceGroup final : public SequenceGroup {
 public:
  SerialSequenceGroup(const Qwen35Checkpoint& ckpt, BackendKind kind, int cpu_threads)
      : ckpt_(ckpt), kind_(kind), cpu_threads_(cpu_threads), info_(qwen35_info(ckpt.config())) {}
  const char* backend_name() const override { return kind_ == BackendKind::Cuda ? "cuda" : "cpu"; }
  ModelInfo info() const override { return info_; }
  int max_sequences() const override { return 1; }
  bool shares_forwards() const override { return false; }
  std::unique_ptr<ModelRuntime> add_sequence(int max_tokens) override {
    return make_runtime(ckpt_, kind_, max_tokens, cpu_threads_);
  }
  void forward_together(std::span<ModelRuntime* const> sequences,
                        std::span<const std::span<const int32_t>> tokens) override {
    if (sequences.size() != tokens.size())
      fail("internal: forward_together of {} sequences and {} token lists", sequences.size(), tokens.size());
    for (size_t i = 0; i < sequences.size(); ++i) sequences[i]->target_forward(tokens[i]);
  }

 private:
  const Qwen35Checkpoint& ckpt_;
  BackendKind kind_;
  int cpu_threads_;
  ModelInfo info_;
};

}  // namespace

std::unique_ptr<SequenceGroup> make_sequence_group(const Qwen35Checkpoint& ckpt, BackendKind kind, int cpu_threads) {
  if (kind == BackendKind::Cpu) return make_cpu_sequence_group(ckpt, CpuRuntimeOptions{.threads = cpu_threads});
#ifdef NEXTN_HAVE_CUDA
  return make_cuda_sequence_group(ckpt);
#else
  // make_runtime gives the "built without the CUDA backend" error at the first sequence.
  return make_serial_sequence_group(ckpt, kind, cpu_threads);
#endif
}

std::unique_ptr<SequenceGroup> make_serial_sequence_group(const Qwen35Checkpoint& ckpt, BackendKind kind,
                                                          int cpu_threads) {
  return std::make_unique<SerialSequenceGroup>(ckpt, kind, cpu_threads);
}

}  // namespace nextn
