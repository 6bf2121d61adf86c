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
  SerialSequenceGroup(RuntimeFactory factory, ModelInfo info, std::string backend)
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
  RuntimeFactory factory_;
  ModelInfo info_;
  std::string backend_;
};

// One sequence the caller owns, as a group of one.
class SoloGroup final : public SequenceGroup {
 public:
  explicit SoloGroup(ModelRuntime& sequence) : sequence_(sequence) {}
  const char* backend_name() const override { return sequence_.backend_name(); }
  ModelInfo info() const override { return sequence_.info(); }
  int max_sequences() const override { return 1; }
  bool shares_forwards() const override { return true; }  // one sequence: nothing to share, nothing run twice
  std::unique_ptr<ModelRuntime> add_sequence(int) override {
    fail("internal: a group of one existing sequence makes no others");
  }
  void forward_together(std::span<ModelRuntime* const> sequences,
                        std::span<const std::span<const int32_t>> tokens) override {
    if (sequences.size() != tokens.size() || sequences.size() > 1 || (sequences.size() == 1 && sequences[0] != &sequence_))
      fail("internal: forward_together over a sequence the group does not hold");
    if (!sequences.empty()) sequence_.target_forward(tokens[0]);
  }

 private:
  ModelRuntime& sequence_;
};

void check_lists(size_t sequences, size_t lists, const char* what) {
  if (sequences != lists) fail("internal: {} of {} sequences and {} lists", what, sequences, lists);
}

}  // namespace

void SequenceGroup::head_argmax_together(std::span<const SequenceRows> rows, int32_t* out) {
  for (const SequenceRows& r : rows) {
    r.sequence->head_argmax(r.first, r.count, out);
    out += r.count;
    ++step_work_.lm_head_launches;
  }
}

void SequenceGroup::mtp_forward_together(std::span<ModelRuntime* const> sequences,
                                         std::span<const std::span<const int32_t>> next_tokens) {
  check_lists(sequences.size(), next_tokens.size(), "mtp_forward_together");
  for (size_t i = 0; i < sequences.size(); ++i) {
    mtp_of(*sequences[i]).mtp_forward(next_tokens[i], 0);
    ++step_work_.mtp_forward_launches;
  }
}

void SequenceGroup::wait_for(std::span<ModelRuntime* const>) {}

void SequenceGroup::rollback_together(std::span<ModelRuntime* const> sequences, std::span<const int> keep) {
  check_lists(sequences.size(), keep.size(), "rollback_together");
  for (size_t i = 0; i < sequences.size(); ++i) {
    sequences[i]->target_rollback(keep[i]);
    ++step_work_.rollback_launches;
  }
}

void SequenceGroup::mtp_draft_together(std::span<ModelRuntime* const> sequences, std::span<const int> n,
                                       int32_t* out) {
  check_lists(sequences.size(), n.size(), "mtp_draft_together");
  for (size_t i = 0; i < sequences.size(); ++i) {
    if (n[i] <= 0) continue;
    mtp_of(*sequences[i]).mtp_draft(n[i], out);
    out += n[i];
    step_work_.mtp_draft_launches += n[i];  // one chain of its own: a step per draft
  }
}

void SequenceGroup::set_allocator(Allocator*) {
  fail("internal: the {} group reserves nothing through an allocator", backend_name());
}

std::unique_ptr<SequenceGroup> make_solo_group(ModelRuntime& sequence) { return std::make_unique<SoloGroup>(sequence); }

std::unique_ptr<SequenceGroup> make_sequence_group(const Qwen35Checkpoint& ckpt, BackendKind kind,
                                                   const RuntimeOptions& options) {
  check_backend_options(kind, options);
  if (kind == BackendKind::Cpu) return make_cpu_sequence_group(ckpt, cpu_options(options));
#ifdef NEXTN_HAVE_CUDA
  return make_cuda_sequence_group(ckpt, options);
#else
  // make_runtime gives the "built without the CUDA backend" error at the first sequence.
  return make_serial_sequence_group(ckpt, kind, options);
#endif
}

std::unique_ptr<SequenceGroup> make_serial_sequence_group(const Qwen35Checkpoint& ckpt, BackendKind kind,
                                                          const RuntimeOptions& options) {
  return make_serial_sequence_group(
      [&ckpt, kind, options](int max_tokens) { return make_runtime(ckpt, kind, max_tokens, options); },
      qwen35_info(ckpt.config()), kind == BackendKind::Cuda ? "cuda" : "cpu");
}

std::unique_ptr<SequenceGroup> make_serial_sequence_group(RuntimeFactory factory, ModelInfo info,
                                                          const std::string& backend_name) {
  return std::make_unique<SerialSequenceGroup>(std::move(factory), std::move(info), backend_name);
}

}  // namespace nextn
