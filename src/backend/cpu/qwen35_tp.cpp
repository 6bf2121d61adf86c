// The CPU tensor-parallel Qwen3.5 runtime: a ModelRuntime and MtpHead
// composed of one CpuQwen35 sequence per rank, each over its rank's part of
// the model (qwen35_shard.cpp). Trunk and MTP layers run the ordinary CPU
// forward on every rank at once; their row-parallel projections meet in
// all_reduce_sum (CpuModel::decoder_layer). The LM head is
// vocabulary-parallel: each rank projects its share of the vocabulary from
// its (replicated, identical) hidden rows and the argmax is reduced across
// ranks with the lowest index winning ties; logits are gathered only when a
// caller asks for all of them (head_logits, mtp_logits).
#include "backend/cpu/qwen35_tp.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "backend/cpu/qwen35_model.h"
#include "core/cpu_comm.h"
#include "core/error.h"
#include "core/rank_threads.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/tensor_parallel_plan.h"

namespace nextn {
namespace cpu_qwen35 {
namespace {

class CpuTensorParallelQwen35 final : public ModelRuntime, public MtpHead {
 public:
  CpuTensorParallelQwen35(const Qwen35Checkpoint& ck, int max_tokens, const CpuRuntimeOptions& options)
      : cfg_(ck.config()), comm_(options.tensor_parallel), threads_(options.tensor_parallel), draft_vocab_(cfg_.vocab_size) {
    const int degree = options.tensor_parallel;
    check_tensor_parallel(cfg_, degree);
    CpuRuntimeOptions rank_options = options;
    rank_options.tensor_parallel = 1;
    // The ranks run at once: each gets its share of the threads.
    rank_options.threads = std::max(1, (options.threads > 0 ? options.threads : default_thread_count()) / degree);
    for (int r = 0; r < degree; ++r) {
      shards_.push_back(tensor_parallel_shard(cfg_, degree, r));
      models_.push_back(load_tensor_parallel_rank(ck, shards_.back(), rank_options, comm_.communicator(r),
                                                  r == 0 ? nullptr : models_[0].get()));
      ranks_.push_back(std::make_unique<CpuQwen35>(models_.back(), max_tokens));
    }
  }

  const Qwen35Config& config() const override { return cfg_; }
  const char* backend_name() const override { return "cpu"; }
  int target_length() const override { return ranks_[0]->target_length(); }

  void reserve_step(std::span<const int32_t> tokens, int mtp_end) override {
    for (auto& rank : ranks_) rank->reserve_step(tokens, mtp_end);
  }
  void target_forward(std::span<const int32_t> tokens) override {
    // Checked (and the row buffers grown) before any rank starts: an input
    // error leaves every rank as it was.
    for (auto& rank : ranks_) rank->reserve_step(tokens, 0);
    on_ranks([&](int r) { ranks_[size_t(r)]->target_forward(tokens); });
  }
  void target_rollback(int keep) override {
    on_ranks([&](int r) { ranks_[size_t(r)]->target_rollback(keep); });
  }

  void head_argmax(int first, int count, int32_t* out) override {
    const int rows = hidden_row_count();
    if (first < 0 || count < 0 || first + count > rows)
      fail("head_argmax: rows [{}, {}) outside the last forward's {} rows", first, first + count, rows);
    const std::vector<int32_t> ids = argmax_rows([&](int r) { return ranks_[size_t(r)]->hidden_rows().data() + size_t(first) * H(); },
                                                 count, cfg_.vocab_size);
    std::copy(ids.begin(), ids.end(), out);
    head_work_.rows_projected += count;
    for (const auto& m : models_) head_work_.head_bytes_read += m->lm_head->rows() * m->lm_head->row_bytes();
    head_work_.logits_bytes_written += int64_t(count) * cfg_.vocab_size * int64_t(sizeof(float));
    ++head_work_.head_calls;
    head_work_.last_path = HeadPath::Batched;
  }
  void head_logits(int row, float* out) override {
    const int rows = hidden_row_count();
    if (row < 0 || row >= rows) fail("head_logits: row {} outside the last forward's {} rows", row, rows);
    gather_logits([&](int r) { return ranks_[size_t(r)]->hidden_rows().data() + size_t(row) * H(); }, cfg_.vocab_size, out);
  }
  HeadWork head_work() const override { return head_work_; }
  void reset() override {
    for (auto& rank : ranks_) rank->reset();
    head_work_ = HeadWork{};
    mtp_argmax_rows_ = 0;
  }
  MtpHead* mtp() override { return models_[0]->has_mtp ? this : nullptr; }

  // ---- MtpHead ----
  int mtp_length() const override { return ranks_[0]->mtp_length(); }
  void mtp_forward(std::span<const int32_t> next_tokens, int first_row) override {
    on_ranks([&](int r) { ranks_[size_t(r)]->mtp_forward(next_tokens, first_row); });
  }
  void mtp_step(int32_t token) override {
    on_ranks([&](int r) { ranks_[size_t(r)]->mtp_step(token); });
  }
  void mtp_argmax(int count, int32_t* out) override {
    const int entries = mtp_entry_count();
    if (count < 0 || count > entries) fail("mtp_argmax: {} entries, last call made {}", count, entries);
    const std::vector<int32_t> ids = argmax_rows(
        [&](int r) { return ranks_[size_t(r)]->mtp_hidden_rows().data() + size_t(entries - count) * H(); }, count, draft_vocab_);
    std::copy(ids.begin(), ids.end(), out);
    mtp_argmax_rows_ += count;
  }
  void mtp_logits(float* out) override {
    const int entries = mtp_entry_count();
    if (entries == 0) fail("mtp_logits before any mtp_forward");
    // The projection mtp_argmax takes its argmax of; ids past the draft
    // vocabulary can never be drafted, so they get probability 0.
    gather_logits([&](int r) { return ranks_[size_t(r)]->mtp_hidden_rows().data() + size_t(entries - 1) * H(); }, draft_vocab_,
                  out);
    std::fill(out + draft_vocab_, out + cfg_.vocab_size, -INFINITY);
  }
  void mtp_rollback(int length) override {
    for (auto& rank : ranks_) rank->mtp_rollback(length);
  }
  MtpWork mtp_work() const override {
    MtpWork w = ranks_[0]->mtp_work();  // the layer's entries and steps, alike on every rank
    w.argmax_rows = mtp_argmax_rows_;
    return w;
  }
  int draft_vocab() const override { return draft_vocab_; }
  void set_draft_vocab(int n) override { draft_vocab_ = effective_draft_vocab(n, cfg_.vocab_size); }

 private:
  int H() const { return cfg_.hidden_size; }
  int hidden_row_count() const { return int(ranks_[0]->hidden_rows().size() / size_t(H())); }
  int mtp_entry_count() const { return int(ranks_[0]->mtp_hidden_rows().size() / size_t(H())); }

  // fn(rank) on every rank at once. A rank that fails aborts the
  // communicator so that the others stop waiting for it in a collective;
  // its error is rethrown. Input errors are found before any collective, on
  // every rank alike; a failure inside one leaves the ranks out of step
  // until reset().
  void on_ranks(const std::function<void(int)>& fn) {
    try {
      threads_.run(fn, [this] { comm_.abort(); }, is_comm_aborted);
    } catch (...) {
      comm_.reset();
      throw;
    }
  }

  // Ids [v.begin, v.end) ∩ [0, limit) of rank r's share: how many of its head rows count.
  int64_t share_rows(int r, int64_t limit) const {
    const IndexRange v = shards_[size_t(r)].vocab;
    return std::clamp<int64_t>(limit - v.begin, 0, v.size());
  }

  // The argmax over ids [0, limit) of `count` rows, rows(r) being rank r's
  // copy of them ([count][H]): each rank's best of its share, then the
  // reduction (greater logit, then lower id; NaN never; 0 for a row of NaN,
  // as cpu::argmax).
  std::vector<int32_t> argmax_rows(const std::function<const float*(int)>& rows, int count, int64_t limit) {
    std::vector<std::vector<ArgmaxCandidate>> best(ranks_.size(), std::vector<ArgmaxCandidate>(size_t(count)));
    on_ranks([&](int r) {
      CpuModel& m = *models_[size_t(r)];
      const int64_t n = share_rows(r, limit);
      std::vector<ArgmaxCandidate>& mine = best[size_t(r)];
      if (n > 0 && count > 0) {
        std::vector<float> logits(size_t(count) * size_t(n));
        m.matmul(*m.lm_head, rows(r), count, logits.data(), n);
        for (int i = 0; i < count; ++i) {
          const float* row = &logits[size_t(i) * size_t(n)];
          const int32_t j = cpu::argmax(row, n);
          if (!std::isnan(row[j])) mine[size_t(i)] = {row[j], int32_t(shards_[size_t(r)].vocab.begin + j)};
        }
      }
      m.comm->argmax_reduce(mine);
    });
    std::vector<int32_t> ids(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) ids[size_t(i)] = std::max(0, best[0][size_t(i)].index);
    return ids;
  }

  // The logits of ids [0, limit) of one row into out, row(r) being rank r's
  // copy of it: each rank projects its share, all_gather assembles them.
  void gather_logits(const std::function<const float*(int)>& row, int64_t limit, float* out) {
    size_t widest = 0;  // shares differ by at most one row: gathered padded to the widest
    for (const TensorParallelShard& s : shards_) widest = std::max(widest, size_t(s.vocab.size()));
    const size_t degree = ranks_.size();
    std::vector<float> gathered(degree * widest);  // rank 0's receive buffer
    on_ranks([&](int r) {
      CpuModel& m = *models_[size_t(r)];
      std::vector<float> mine(widest, 0.0f);
      if (const int64_t n = share_rows(r, limit); n > 0) m.matmul(*m.lm_head, row(r), 1, mine.data(), n);
      std::vector<float> other(r == 0 ? 0 : degree * widest);  // every rank receives; rank 0 keeps it
      m.comm->all_gather(mine.data(), widest, r == 0 ? gathered.data() : other.data());
    });
    for (size_t r = 0; r < degree; ++r)
      std::copy_n(&gathered[r * widest], share_rows(int(r), limit), out + shards_[r].vocab.begin);
  }

  Qwen35Config cfg_;  // the whole model's
  CpuCommGroup comm_;
  RankThreads threads_;
  std::vector<TensorParallelShard> shards_;             // [degree]
  std::vector<std::shared_ptr<CpuModel>> models_;       // [degree], rank r's part
  std::vector<std::unique_ptr<CpuQwen35>> ranks_;       // [degree], this sequence's state on rank r
  HeadWork head_work_;
  int64_t mtp_argmax_rows_ = 0;
  int draft_vocab_;  // the MTP projections cover ids [0, draft_vocab_)
};

}  // namespace
}  // namespace cpu_qwen35

std::unique_ptr<ModelRuntime> make_cpu_tensor_parallel_runtime(const Qwen35Checkpoint& ckpt, int max_tokens,
                                                               const CpuRuntimeOptions& options) {
  if (max_tokens < 1) fail("--backend cpu: max_tokens {} must be positive", max_tokens);
  check_tensor_parallel(ckpt.config(), options.tensor_parallel);
  return std::make_unique<cpu_qwen35::CpuTensorParallelQwen35>(ckpt, max_tokens, options);
}

}  // namespace nextn
