// Shared forwards for sequences that each run their own, unchanged,
// one-sequence loop (generate(), sampled_generate()) on a thread of their
// own. The threads take turns: one computes at a time (the model's thread
// pool and caches are not for two callers at once), and a thread's
// target_forward hands its tokens in and waits. When every sequence that
// has entered waits in a target_forward (or has left), the last one to
// arrive runs them all as one SequenceGroup::forward_together and each
// thread goes on with its own rows. Everything else a loop calls (the LM
// head, the MTP drafts, rollback) runs on its own sequence at its turn.
//
// Because forward_together leaves each sequence bit for bit as its own
// target_forward would, every sequence computes what it would alone: which
// neighbours share a forward changes only the time it takes.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

#include "model/batch_runtime.h"

namespace nextn {

class ForwardScheduler {
 public:
  explicit ForwardScheduler(SequenceGroup& group) : group_(group) {}
  ForwardScheduler(const ForwardScheduler&) = delete;
  ForwardScheduler& operator=(const ForwardScheduler&) = delete;

  // Makes a place for a sequence about to start on another thread: from now
  // on shared forwards wait for it. Taken by a ScheduledSequence made with
  // reserved = true, or given back with unreserve(). Sequences reserved
  // together share their first forward.
  void reserve();
  void unreserve();

  // Called after each shared forward (by the thread that ran it, at its
  // turn): the sequences and the rows it covered.
  std::function<void(int sequences, int rows)> on_forward;

  // Forwards run and rows they covered so far.
  struct Totals {
    int64_t forwards = 0, rows = 0, sequence_forwards = 0;
  };
  Totals totals() const;

 private:
  friend class ScheduledSequence;
  struct Request {
    ModelRuntime* sequence;
    std::span<const int32_t> tokens;
    bool done = false;
    std::exception_ptr error;
  };
  void enter(bool reserved);
  void leave();
  void forward(ModelRuntime& sequence, std::span<const int32_t> tokens);
  // With the lock held and the turn taken: runs every pending request.
  void run_pending(std::unique_lock<std::mutex>& lock);

  SequenceGroup& group_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool turn_taken_ = false;  // a member thread is computing
  int members_ = 0;          // sequences entered and not left
  std::vector<Request*> pending_;
  Totals totals_;
};

// One sequence of a ForwardScheduler's group, as a ModelRuntime for the
// calling thread's loop: construction enters (or takes a reservation) and
// waits for a turn, destruction leaves. target_forward is shared; every
// other call goes straight to the sequence. Use it on the thread that made it.
class ScheduledSequence final : public ModelRuntime {
 public:
  ScheduledSequence(ForwardScheduler& scheduler, ModelRuntime& sequence, bool reserved = false);
  ~ScheduledSequence() override;
  ScheduledSequence(const ScheduledSequence&) = delete;
  ScheduledSequence& operator=(const ScheduledSequence&) = delete;

  const Qwen35Config& config() const override { return rt_.config(); }
  ModelInfo info() const override { return rt_.info(); }
  const char* backend_name() const override { return rt_.backend_name(); }
  int target_length() const override { return rt_.target_length(); }
  void target_forward(std::span<const int32_t> tokens) override { scheduler_.forward(rt_, tokens); }
  void target_rollback(int keep) override { rt_.target_rollback(keep); }
  void head_argmax(int first, int count, int width, int32_t* out) override {
    rt_.head_argmax(first, count, width, out);
  }
  void head_argmax_fused(int first, int count, int32_t* out) override { rt_.head_argmax_fused(first, count, out); }
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override { return rt_.head_walk(drafts, out); }
  void head_logits(int row, float* out) override { rt_.head_logits(row, out); }
  HeadWork head_work() const override { return rt_.head_work(); }
  void reset() override { rt_.reset(); }
  int mtp_length() const override { return rt_.mtp_length(); }
  void mtp_forward(std::span<const int32_t> next_tokens, int first_row) override {
    rt_.mtp_forward(next_tokens, first_row);
  }
  void mtp_step(int32_t token) override { rt_.mtp_step(token); }
  void mtp_argmax(int count, int32_t* out) override { rt_.mtp_argmax(count, out); }
  void mtp_rollback(int length) override { rt_.mtp_rollback(length); }
  void mtp_draft(int n, int32_t* out) override { rt_.mtp_draft(n, out); }
  void mtp_logits(float* out) override { rt_.mtp_logits(out); }
  MtpWork mtp_work() const override { return rt_.mtp_work(); }
  int draft_vocab() const override { return rt_.draft_vocab(); }
  void set_draft_vocab(int n) override { rt_.set_draft_vocab(n); }
  std::vector<OpTiming> op_timings() const override { return rt_.op_timings(); }
  void clear_op_timings() override { rt_.clear_op_timings(); }
  int64_t kernels_launched() const override { return rt_.kernels_launched(); }

 private:
  ForwardScheduler& scheduler_;
  ModelRuntime& rt_;
};

}  // namespace nextn
