// The CPU Qwen3.5 runtime's LM head and MTP head, one sequence and several
// (the group's step calls, model/batch_runtime.h), and the CPU group. Each
// projection is one cpu::matmul, whose every output element is summed in
// one fixed order (gemm.h): a row's logits are the same bits alone or among
// others.
#include <algorithm>
#include <limits>
#include <climits>
#include <cmath>
#include <vector>

#include "backend/cpu/qwen35_model.h"
#include "core/error.h"
#include "io/checkpoint.h"

namespace nextn {
namespace cpu_qwen35 {

void CpuQwen35::head_argmax_padded(int first, int count, int width, int32_t* out) {
  cpu::head_argmax_of_rows(*m_->lm_head, hidden_.data(), last_T_, first, count, width, out, head_work_,
                           m_->head_threads());
}

void CpuQwen35::head_argmax_fused(int first, int count, int32_t* out) {
  if (first < 0 || count < 0 || first + count > last_T_) fail("head_argmax_fused: rows outside the last forward");
  cpu::head_fused_argmax(*m_->lm_head, &hidden_[size_t(first) * m_->cfg.hidden_size], count, out, head_work_,
                         m_->head_threads());
}

int CpuQwen35::head_walk(std::span<const int32_t> drafts, int32_t* out) {
  const int rows = std::min<int>(int(drafts.size()) + 1, last_T_);
  if (m_->fault == Fault::RuntimeWalkAsBatched) {
    // The planted runtime fault: every row through the batched projection,
    // and the walk's return value computed as if it had walked. Only the
    // op's own counters (path Batched, rows = W, walk_rows 0) give it away.
    cpu::head_project_argmax(*m_->lm_head, hidden_.data(), rows, rows, out, head_work_, m_->head_threads());
    int a = 0;
    while (a < int(drafts.size()) && a + 1 < rows && out[a] == drafts[size_t(a)]) ++a;
    return a + 1;
  }
  return cpu::head_walk_rows(*m_->lm_head, hidden_.data(), rows, drafts, out, head_work_, m_->head_threads());
}

void CpuQwen35::head_logits(int row, float* out) {
  if (row < 0 || row >= last_T_) fail("head_logits: row {} outside the last forward's {} rows", row, last_T_);
  m_->matmul(*m_->lm_head, &hidden_[size_t(row) * m_->cfg.hidden_size], 1, out);
}

void CpuQwen35::mtp_run(std::span<CpuQwen35* const> seqs, std::span<const std::span<const int32_t>> tokens,
                        std::span<const float* const> hidden) {
  CpuModel& m = *seqs[0]->m_;
  if (!m.has_mtp) fail("this checkpoint has no MTP head (mtp_num_hidden_layers is 0 and no mtp.layers.* tensors)");
  int N = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int n = int(tokens[s].size());
    if (seqs[s]->mtp_length_ + n > seqs[s]->max_tokens_) fail("MTP cache capacity {} exceeded", seqs[s]->max_tokens_);
    seqs[s]->kv_.hold(seqs[s]->mtp_length_ + n);
    N += n;
  }
  for (size_t s = 0; s < seqs.size(); ++s)  // before any changes (a step reserved them already)
    seqs[s]->mtp_hidden_.reserve(tokens[s].size() * size_t(m.cfg.hidden_size));
  const Qwen35Config& cfg = m.cfg;
  const int H = cfg.hidden_size;
  std::vector<float> e(size_t(N) * H), cat(size_t(N) * 2 * H), u(size_t(N) * H);
  std::vector<Segment> segs(seqs.size());
  for (size_t s = 0, row = 0; s < seqs.size(); row += tokens[s].size(), ++s) {
    const int n = int(tokens[s].size());
    m.embed(tokens[s].data(), n, &e[row * H]);
    for (int i = 0; i < n; ++i) {  // fc input: [norm(embed(next token)) ; norm(hidden)], embedding first
      const size_t r = row + size_t(i);
      cpu::rmsnorm(&e[r * H], m.mtp_norm_emb.data(), cfg.rms_norm_eps, H, &cat[r * 2 * H]);
      cpu::rmsnorm(hidden[s] + size_t(i) * H, m.mtp_norm_hid.data(), cfg.rms_norm_eps, H, &cat[r * 2 * H + H]);
    }
    segs[s] = Segment{m.kv_layer(seqs[s]->kv_, m.kv_layers() - 1), nullptr, seqs[s]->mtp_length_, int(row), n};
  }
  m.matmul(*m.mtp_fc, cat.data(), N, u.data());
  m.decoder_layer(m.mtp_layer, segs, N, u.data());
  for (size_t s = 0; s < seqs.size(); ++s) {
    CpuQwen35& q = *seqs[s];
    const int n = segs[s].T;
    q.mtp_hidden_.resize(size_t(n) * H);
    for (int i = 0; i < n; ++i)
      cpu::rmsnorm(&u[size_t(segs[s].row0 + i) * H], m.mtp_norm.data(), cfg.rms_norm_eps, H, &q.mtp_hidden_[size_t(i) * H]);
    q.mtp_length_ += n;
    q.mtp_last_n_ = n;
    q.mtp_work_.entries += n;
  }
}

void CpuQwen35::check_mtp_forward(std::span<const int32_t> next_tokens, int first_row) const {
  const int n = int(next_tokens.size());
  if (n <= 0 || first_row < 0 || first_row + n > last_T_)
    fail("mtp_forward: rows [{}, {}) outside the last forward's {} rows", first_row, first_row + n, last_T_);
  m_->check_tokens(next_tokens);
}

void CpuQwen35::mtp_forward_together(std::span<CpuQwen35* const> seqs,
                                     std::span<const std::span<const int32_t>> next_tokens) {
  std::vector<const float*> hidden;
  for (size_t s = 0; s < seqs.size(); ++s) {
    seqs[s]->check_mtp_forward(next_tokens[s], 0);
    hidden.push_back(seqs[s]->hidden_.data());
  }
  mtp_run(seqs, next_tokens, hidden);
}

void CpuQwen35::mtp_argmax_last(std::span<CpuQwen35* const> seqs, std::span<int32_t* const> out) {
  CpuModel& m = *seqs[0]->m_;
  const int H = m.cfg.hidden_size;
  const int S = int(seqs.size());
  int N = 0;  // rows [0, N) of the head cover every sequence's draft vocabulary
  std::vector<float> x(size_t(S) * H);
  for (int s = 0; s < S; ++s) {
    const CpuQwen35& q = *seqs[size_t(s)];
    if (q.mtp_last_n_ == 0) fail("mtp_draft before any mtp_forward");
    std::copy(q.mtp_hidden_.end() - H, q.mtp_hidden_.end(), &x[size_t(s) * H]);
    N = std::max(N, q.draft_vocab_);
  }
  // Each logit is summed in gemm.h's order: the same bits for this row alone and over the
  // first draft_vocab rows only (mtp_argmax).
  std::vector<float> logits(size_t(S) * size_t(N));
  m.matmul(*m.lm_head, x.data(), S, logits.data(), N);
  for (int s = 0; s < S; ++s) {
    CpuQwen35& q = *seqs[size_t(s)];
    *out[size_t(s)] = cpu::argmax(&logits[size_t(s) * size_t(N)], q.draft_vocab_);
    ++q.mtp_work_.argmax_rows;
  }
}

void CpuQwen35::mtp_draft_together(std::span<CpuQwen35* const> seqs, std::span<const int> n, int32_t* out,
                                   StepWork& work) {
  std::vector<int32_t*> dst;  // each sequence's first draft
  for (size_t s = 0; s < seqs.size(); ++s) {
    dst.push_back(out);
    out += std::max(0, n[s]);
  }
  const int H = seqs.empty() ? 0 : seqs[0]->m_->cfg.hidden_size;
  std::vector<CpuQwen35*> live;
  std::vector<int32_t*> at;
  for (int j = 0;; ++j) {  // draft j of every sequence drafting more than j
    live.clear();
    at.clear();
    for (size_t s = 0; s < seqs.size(); ++s)
      if (n[s] > j) live.push_back(seqs[s]), at.push_back(dst[s] + j);
    if (live.empty()) return;
    if (j > 0) {  // one chained step: entry p pairs the previous draft with the MTP's own last hidden
      std::vector<std::vector<float>> prev(live.size());
      std::vector<const float*> hidden;
      std::vector<std::span<const int32_t>> tokens;
      for (size_t s = 0; s < live.size(); ++s) {
        prev[s].assign(live[s]->mtp_hidden_.end() - H, live[s]->mtp_hidden_.end());
        hidden.push_back(prev[s].data());
        tokens.emplace_back(at[s] - 1, 1);
      }
      mtp_run(live, tokens, hidden);
      for (CpuQwen35* q : live) ++q->mtp_work_.chained_steps;
    }
    mtp_argmax_last(live, at);
    ++work.mtp_draft_launches;
  }
}

void CpuQwen35::head_argmax_together(std::span<CpuQwen35* const> seqs, std::span<const SequenceRows> rows,
                                     int32_t* out) {
  std::vector<cpu::SequenceHeadRows> parts;
  for (size_t s = 0; s < rows.size(); ++s)
    parts.push_back({seqs[s]->hidden_.data(), seqs[s]->last_T_, rows[s].first, rows[s].count, &seqs[s]->head_work_});
  cpu::head_argmax_together(*seqs[0]->m_->lm_head, parts, out, seqs[0]->m_->head_threads());
}

void CpuQwen35::mtp_forward(std::span<const int32_t> next_tokens, int first_row) {
  check_mtp_forward(next_tokens, first_row);
  CpuQwen35* self = this;
  const float* hidden = &hidden_[size_t(first_row) * m_->cfg.hidden_size];
  mtp_run({&self, 1}, {&next_tokens, 1}, {&hidden, 1});
}

void CpuQwen35::mtp_step(int32_t token) {
  if (mtp_last_n_ == 0) fail("mtp_step before any mtp_forward");
  m_->check_tokens({&token, 1});
  std::vector<float> h(mtp_hidden_.end() - m_->cfg.hidden_size, mtp_hidden_.end());
  CpuQwen35* self = this;
  const std::span<const int32_t> tokens(&token, 1);
  const float* hidden = h.data();
  mtp_run({&self, 1}, {&tokens, 1}, {&hidden, 1});
  ++mtp_work_.chained_steps;
}

void CpuQwen35::mtp_argmax(int count, int32_t* out) {
  if (count < 0 || count > mtp_last_n_) fail("mtp_argmax: {} entries, last call made {}", count, mtp_last_n_);
  const int H = m_->cfg.hidden_size, N = draft_vocab_;
  std::vector<float> logits(static_cast<size_t>(N));
  for (int i = 0; i < count; ++i) {
    // Head rows [0, N) only: each logit in gemm.h's order, the same bits as in the full projection.
    m_->matmul(*m_->lm_head, &mtp_hidden_[size_t(mtp_last_n_ - count + i) * H], 1, logits.data(), N);
    out[i] = cpu::argmax(logits.data(), N);
    ++mtp_work_.argmax_rows;
  }
}

void CpuQwen35::mtp_logits(float* out) {
  if (mtp_last_n_ == 0) fail("mtp_logits before any mtp_forward");
  const int H = m_->cfg.hidden_size, N = draft_vocab_;
  // The same projection mtp_argmax takes its argmax of; ids past the draft
  // vocabulary can never be drafted, so they get probability 0.
  m_->matmul(*m_->lm_head, &mtp_hidden_[size_t(mtp_last_n_ - 1) * H], 1, out, N);
  std::fill(out + N, out + m_->cfg.vocab_size, -INFINITY);
}

void CpuQwen35::mtp_rollback(int length) {
  if (length < 0 || length > mtp_length_) fail("mtp_rollback: length {} outside [0, {}]", length, mtp_length_);
  mtp_length_ = length;
}

// The CPU group: one CpuModel, sequences over it, shared forwards.
class CpuSequenceGroup final : public SequenceGroup {
 public:
  CpuSequenceGroup(const Qwen35Checkpoint& ckpt, const CpuRuntimeOptions& options)
      : model_(std::make_shared<CpuModel>(ckpt, options)), max_positions_(ckpt.config().max_position_embeddings) {}
  const char* backend_name() const override { return "cpu"; }
  ModelInfo info() const override { return qwen35_info(model_->cfg); }
  int max_sequences() const override { return INT_MAX; }
  bool shares_forwards() const override { return true; }
  int chunk_invariant_rows() const override { return std::numeric_limits<int>::max(); }  // every op batch-invariant
  void set_allocator(Allocator* allocator) override { model_->allocator = allocator; }
  std::vector<KvPoolUse> kv_pools() override {
    if (model_->kv_layers() == 0) return {};
    return {KvPoolUse{"attention", &model_->kv_pool()}};
  }
  std::unique_ptr<ModelRuntime> add_sequence(int max_tokens) override {
    if (max_tokens > max_positions_)
      fail("a sequence of up to {} positions exceeds config.json's max_position_embeddings {}", max_tokens,
           max_positions_);
    return std::make_unique<CpuQwen35>(model_, max_tokens);
  }
  void forward_together(std::span<ModelRuntime* const> sequences,
                        std::span<const std::span<const int32_t>> tokens) override {
    CpuQwen35::forward_together(own(sequences, tokens.size(), "forward_together"), tokens);
  }
  void head_argmax_together(std::span<const SequenceRows> rows, int32_t* out) override {
    std::vector<ModelRuntime*> sequences;
    for (const SequenceRows& r : rows) sequences.push_back(r.sequence);
    if (rows.empty()) return;
    CpuQwen35::head_argmax_together(own(sequences, rows.size(), "head_argmax_together"), rows, out);
    ++step_work_.lm_head_launches;
  }
  void mtp_forward_together(std::span<ModelRuntime* const> sequences,
                            std::span<const std::span<const int32_t>> next_tokens) override {
    if (sequences.empty()) return;
    CpuQwen35::mtp_forward_together(own(sequences, next_tokens.size(), "mtp_forward_together"), next_tokens);
    ++step_work_.mtp_forward_launches;
  }
  void mtp_draft_together(std::span<ModelRuntime* const> sequences, std::span<const int> n, int32_t* out) override {
    if (sequences.empty()) return;
    CpuQwen35::mtp_draft_together(own(sequences, n.size(), "mtp_draft_together"), n, out, step_work_);
  }

 private:
  std::vector<CpuQwen35*> own(std::span<ModelRuntime* const> sequences, size_t lists, const char* what) const {
    return own_sequences<CpuQwen35>(sequences, lists, what, [&](const CpuQwen35& q) { return q.model() == model_.get(); });
  }
  std::shared_ptr<CpuModel> model_;
  int max_positions_;
};

}  // namespace cpu_qwen35

std::unique_ptr<SequenceGroup> make_cpu_sequence_group(const Qwen35Checkpoint& ckpt, const CpuRuntimeOptions& options) {
  if (options.tensor_parallel != 1)  // each sequence its own split model, forwards one after another
    return make_serial_sequence_group(
        [&ckpt, options](int max_tokens) { return make_cpu_runtime(ckpt, max_tokens, options); },
        qwen35_info(ckpt.config()), "cpu");
  return std::make_unique<cpu_qwen35::CpuSequenceGroup>(ckpt, options);
}

}  // namespace nextn
