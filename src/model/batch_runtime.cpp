#include "model/batch_runtime.h"

#include <string>
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
// its own from the factory (its own weights where the backend copies them),
// and forward_together runs their forwards one after another.
class SerialSequenceGroup final : public SequenceGroup {
 public:
  SerialSequenceGroup(SequenceFactory factory, ModelInfo info, std::string backend)
      : factory_(std::move(factory)), info_(std::move(info)), backend_(std::move(backend)) {}
  const char* backend_name() const override { return backend_.c_str(); }
  ModelInfo info() const override { return info_; }
  int max_sequences() const override { return 1; }
  bool shares_forwards() const override { return false; }
  std::unique_ptr<ModelRuntime> add_sequence(int max_tokens) override { return factory_(max_tokens); }
  void forward_together(std::span<ModelRuntime* const> sequences,
                        std::span<const std::span<const int32_t>> tokens) override {
    if (sequences.size() != tokens.size())
      fail("internal: forward_together of {} sequences and {} token lists", sequences.size(), tokens.size());
    for (size_t i = 0; i < sequences.size(); ++i) sequences[i]->target_forward(tokens[i]);
  }

 private:
  SequenceFactory factory_;
  ModelInfo info_;
  std::string backend_;
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
  return make_serial_sequence_group(
      [&ckpt, kind, cpu_threads](int max_tokens) { return make_runtime(ckpt, kind, max_tokens, cpu_threads); },
      qwen35_info(ckpt.config()), kind == BackendKind::Cuda ? "cuda" : "cpu");
}

std::unique_ptr<SequenceGroup> make_serial_sequence_group(SequenceFactory factory, ModelInfo info,
                                                          const std::string& backend_name) {
  return std::make_unique<SerialSequenceGroup>(std::move(factory), std::move(info), backend_name);
}

}  // namespace nextn
