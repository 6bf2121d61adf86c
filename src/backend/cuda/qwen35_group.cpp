// CudaSequenceGroup: several CudaQwen35 sequences over one CudaQwen35Weights,
// their target forwards run as one trunk forward (docs/server.md, "Batching";
// docs/cuda-backend.md, "Several sequences").
//
// A group forward runs on the stream and the decode workspace (max_rows_ rows)
// of its first sequence, the lead, over the concatenated rows of its slices:
// embedding, RMSNorms, every matmul (q/k/v, o, the GDN in- and
// out-projections, the MLP) and the residuals once over all the rows;
// attention and the GDN conv and recurrence in one launch each over a device
// table of the sequences (group_entry.h: each entry its rows, its caches,
// state and step arguments), each entry with the same row count its own
// target_forward would give it; the final norm over all rows, then each
// sequence's rows into its own hidden rows. The matmuls are batch-invariant
// (row j of a many-row product is the one-row product, whatever kernel
// instance the row count picks: docs/cuda-backend.md), the other row-wise
// ops are one block per row, and the per-entry kernels run the one-sequence
// kernels' code on exactly their solo inputs, so every sequence ends bit for
// bit as its own target_forward would leave it.
//
// A sequence's GDN in-projection rows are copied from the lead's buffer into
// its own (its conv reads them there, and a later target_rollback replays
// from them); its GDN outputs land beside the others' for out_proj. Each
// sequence's stream and the lead's are ordered by events (no host sync).
// The table is copied before the pass, so a pass's graph depends only on its
// shape (entries, rows, widest slice: GroupPassShape), not on which
// sequences run: the graphs are reused while the batch changes.
#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <memory>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/head_counters.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/qwen35.h"
#include "backend/cuda/qwen35_runtime.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"

namespace nextn {
namespace cuda {

namespace {
int round_up(int n, int m) { return (n + m - 1) / m * m; }
int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}
}  // namespace

GroupPassShape group_pass_shape(std::span<const GroupSlice> slices, int max_rows) {
  GroupPassShape shape;
  int max_T = 1;
  for (const GroupSlice& s : slices) shape.rows += s.T, max_T = std::max(max_T, s.T);
  shape.entries = std::min(round_up(int(slices.size()), kGroupEntryStep), kMaxGroupSequences);
  shape.padded_rows = std::min(round_up(shape.rows, kGroupRowStep), max_rows);
  shape.max_T = std::min(pow2_at_least(max_T), max_rows);
  return shape;
}

cuda::GroupEntry CudaQwen35::group_entry(int row, int T, const StepArgs* args) const {
  cuda::GroupEntry e;
  e.row = row;
  e.T = T;
  e.pos = &args->pos;
  e.parity = &args->parity;
  e.gdn = state_.gdn_table;
  e.kv_blocks = state_.d_kv_blocks;
  e.attn_partial = ws_.attn_partial;
  e.max_splits = (ws_.partial_positions + cuda::kAttnSplit - 1) / cuda::kAttnSplit;
  e.first_row = &args->first_row;
  e.n_real = &args->n_real;
  e.out_row = &args->out_row;
  return e;
}

cuda::GroupEntry* CudaQwen35::staged_group_table(int index) {
  if (index == 0) CUDA_CHECK(cudaEventSynchronize(lead_.copied));  // the last copy has read the staging
  return lead_.h_tables.get() + size_t(index) * kMaxGroupSequences;
}

const cuda::GroupEntry* CudaQwen35::group_table(int index) const {
  return lead_.d_tables + size_t(index) * kMaxGroupSequences;
}

void CudaQwen35::upload_group_tables(int n) {
  CUDA_CHECK(cudaMemcpyAsync(lead_.d_tables, lead_.h_tables.get(),
                             size_t(n) * kMaxGroupSequences * sizeof(cuda::GroupEntry), cudaMemcpyHostToDevice,
                             stream_));
  CUDA_CHECK(cudaEventRecord(lead_.copied, stream_));
}

void CudaQwen35::forward_group(std::span<const GroupSlice> slices, std::span<const std::span<const int32_t>> tokens) {
  if (slices.empty() || slices.size() != tokens.size() || slices[0].seq != this || slices[0].row != 0)
    fail("internal: forward_group must be called on the sequence of its first slice");
  if (slices.size() > size_t(kMaxGroupSequences))
    fail("internal: forward_group of {} sequences above {}", slices.size(), kMaxGroupSequences);
  int rows = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].row != rows || slices[i].T != int(tokens[i].size()) || slices[i].seq->w_ != w_)
      fail("internal: forward_group slices out of order");
    slices[i].seq->check_rows("forward_group", slices[i].T);  // its own buffers take its rows
    slices[i].seq->hold_positions(slices[i].seq->state_.length + slices[i].T);
    rows += slices[i].T;
  }
  if (rows > max_rows_) fail("internal: forward_group of {} rows above {}", rows, max_rows_);
  const GroupPassShape shape = group_pass_shape(slices, max_rows_);
  cuda::GroupEntry* table = staged_group_table(0);
  for (size_t i = 0; i < slices.size(); ++i) {
    CudaQwen35& q = *slices[i].seq;
    q.prefill_release();  // as its own target_forward would: decoding has begun
    // Every sequence's own position and parity (its attention and GDN
    // kernels read them); the lead's arguments also carry every row's token
    // (the padding rows' token 0).
    StepArgs a = q.args();
    a.pos = q.state_.length;
    a.out_row = 0;
    if (i == 0) {
      for (size_t j = 0; j < slices.size(); ++j)
        std::copy(tokens[j].begin(), tokens[j].end(), a.tokens + slices[j].row);
      std::fill(a.tokens + rows, a.tokens + shape.padded_rows, 0);
    }
    q.ws_.upload(a, q.stream_);
    if (&q != this) {  // its earlier work and its upload before the forward
      CUDA_CHECK(cudaEventRecord(q.group_event_, q.stream_));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, q.group_event_, 0));
    }
    table[i] = q.group_entry(slices[i].row, slices[i].T, q.ws_.d_args);
    table[i].out = q.ws_.hidden;
  }
  std::fill(table + slices.size(), table + shape.entries, cuda::GroupEntry{});
  upload_group_tables(1);
  const GroupPass pass{group_table(0), shape.entries, shape.max_T};
  graphs_.group_replay(GraphKind::GroupForward, shape.key(), [&] { group_chunk(pass, shape.padded_rows); });
  CUDA_CHECK(cudaEventRecord(group_event_, stream_));
  for (const GroupSlice& s : slices) {
    CudaQwen35& q = *s.seq;
    if (&q != this) CUDA_CHECK(cudaStreamWaitEvent(q.stream_, group_event_, 0));
    // What target_forward of these rows (one chunk) leaves.
    q.state_.forward_start = q.state_.length;
    q.state_.length += s.T;
    q.state_.last_T = s.T;
    q.state_.last_chunk_T = s.T;
    q.state_.parity ^= 1;
  }
}

void CudaQwen35::group_chunk(const GroupPass& pass, int rows) {
  const LayerContext c = layer_context();
  cuda::embed_rows(w_->embed, ws_.d_args->tokens, rows, ws_.x, H_, stream_);
  StepBuffers b = decode_buffers();
  b.group = &pass;
  for (const auto& L : w_->layers) decoder_layer(c, L, rows, b, sequence_view());
  c.mark("norm");
  // The final norm of every row into mtp_src (free until an MTP pass), then
  // each sequence's rows into its own hidden rows.
  cuda::rmsnorm(ws_.x, Act::F32, H_, w_->final_norm, cfg_.rms_norm_eps, rows, H_, ws_.mtp_src, act_, H_, nullptr,
                stream_);
  cuda::scatter_rows_group(pass.entries, pass.n, pass.max_T, H_, ws_.mtp_src, act_, stream_);
}

void CudaQwen35::rollback_group(std::span<CudaQwen35* const> seqs, std::span<const int> keep) {
  if (seqs.empty() || seqs[0] != this || seqs.size() != keep.size() || seqs.size() > size_t(kMaxGroupSequences))
    fail("internal: rollback_group must be called on its first sequence, at most {} of them", kMaxGroupSequences);
  std::vector<int> replay(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) replay[i] = seqs[i]->rollback_replay_of(keep[i]);  // all before any change
  const int n_gdn = int(state_.gdn_host.size());
  int entries = 0;
  if (n_gdn > 0) {
    CUDA_CHECK(cudaEventSynchronize(lead_.replay_copied));  // the last copy has read the staging
    cuda::GdnReplay* table = lead_.h_replay.get();
    for (size_t i = 0; i < seqs.size(); ++i) {
      CudaQwen35& q = *seqs[i];
      if (replay[i] < 0) continue;
      q.ws_.upload(q.args(), q.stream_);  // its parity, read by the replay
      if (&q != this) {
        CUDA_CHECK(cudaEventRecord(q.group_event_, q.stream_));
        CUDA_CHECK(cudaStreamWaitEvent(stream_, q.group_event_, 0));
      }
      table[entries++] = {q.state_.gdn_table, &q.ws_.d_args->parity, replay[i]};
    }
  }
  if (entries > 0) {
    const int padded = std::min(round_up(entries, kGroupEntryStep), kMaxGroupSequences);
    std::fill(lead_.h_replay.get() + entries, lead_.h_replay.get() + padded, cuda::GdnReplay{});
    CUDA_CHECK(cudaMemcpyAsync(lead_.d_replay, lead_.h_replay.get(), size_t(padded) * sizeof(cuda::GdnReplay),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaEventRecord(lead_.replay_copied, stream_));
    graphs_.group_replay(GraphKind::GroupRollback, {{uint64_t(padded), 0}}, [&] {
      cuda::gdn_rollback_group(gdn_shape_, lead_.d_replay, padded, n_gdn, stream_);
    });
    CUDA_CHECK(cudaEventRecord(group_event_, stream_));
    for (CudaQwen35* q : seqs)
      if (q != this) CUDA_CHECK(cudaStreamWaitEvent(q->stream_, group_event_, 0));
  }
  for (size_t i = 0; i < seqs.size(); ++i)
    if (replay[i] >= 0) seqs[i]->rollback_bookkeeping(keep[i], replay[i]);
}

void CudaQwen35::wait_with(std::span<CudaQwen35* const> others) {
  for (CudaQwen35* q : others)
    if (q != this) {
      CUDA_CHECK(cudaEventRecord(q->group_event_, q->stream_));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, q->group_event_, 0));
    }
  ws_.wait(stream_);
}

void CudaQwen35::join_streams(std::span<CudaQwen35* const> others) {
  CUDA_CHECK(cudaEventRecord(group_event_, stream_));
  for (CudaQwen35* q : others)
    if (q != this) CUDA_CHECK(cudaStreamWaitEvent(q->stream_, group_event_, 0));
}

void CudaQwen35::head_argmax_group(std::span<CudaQwen35* const> seqs, std::span<const SequenceRows> rows,
                                   int32_t* out) {
  if (seqs.empty() || seqs[0] != this || seqs.size() != rows.size())
    fail("internal: head_argmax_group must be called on the sequence of its first rows");
  int R = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const CudaQwen35& q = *seqs[i];
    const SequenceRows& r = rows[i];
    if (r.first < 0 || r.count < 1 || r.first + r.count > q.state_.last_T || q.w_ != w_)
      fail("head_argmax: rows [{}, {}) outside the last forward's {} rows", r.first, r.first + r.count,
           q.state_.last_T);
    R += r.count;
  }
  check_rows("head_argmax", R);
  const size_t row_bytes = size_t(H_) * size_t(act_size(act_));
  for (size_t i = 0; i < seqs.size(); ++i) {  // each sequence's rows, after the work that wrote them
    CudaQwen35& q = *seqs[i];
    if (&q != this) {
      CUDA_CHECK(cudaEventRecord(q.group_event_, q.stream_));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, q.group_event_, 0));
    }
  }
  // The counters before and after the call: ws_.h_head as of the last
  // fetch and of this call's fetch (its one sync).
  const HeadCounters before = *ws_.h_head.get();
  size_t at = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const CudaQwen35& q = *seqs[i];
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(ws_.head_in) + at * row_bytes,
                               static_cast<const char*>(q.ws_.hidden) + size_t(rows[i].first) * row_bytes,
                               size_t(rows[i].count) * row_bytes, cudaMemcpyDeviceToDevice, stream_));
    at += size_t(rows[i].count);
  }
  const HeadTally t = tally(HeadPath::Batched);
  cuda::matmul(w_->head, ws_.head_in, act_, R, H_, ws_.logits, V_, false, nullptr, stream_, t);
  cuda::argmax_rows(ws_.logits, R, V_, V_, ws_.argmax_scratch, ws_.d_out, stream_, t.counters);
  ws_.fetch(ws_.d_out, sizeof(int32_t) * size_t(R), out, stream_);
  const HeadCounters after = *ws_.h_head.get();
  // The device counted the whole call on the lead: each sequence gets its own
  // rows and logits, the head read once, one call.
  const HeadWork call = head_work_of(after), was = head_work_of(before);
  const int64_t bytes = call.head_bytes_read - was.head_bytes_read;
  const int64_t logits_per_row = int64_t(V_) * int64_t(sizeof(float));
  for (size_t i = 0; i < seqs.size(); ++i) {
    HeadWork& shift = seqs[i]->state_.head_shift;
    const int64_t rows_i = rows[i].count, counted = seqs[i] == this ? R : 0;
    shift.rows_projected += rows_i - counted;
    shift.logits_bytes_written += (rows_i - counted) * logits_per_row;
    if (seqs[i] != this) {
      shift.head_bytes_read += bytes;
      shift.head_calls += 1;
    }
    shift.last_path = HeadPath::Batched;
  }
}

namespace {

class CudaSequenceGroup final : public SequenceGroup {
 public:
  CudaSequenceGroup(const Qwen35Checkpoint& ckpt, const RuntimeOptions& options)
      : options_(options),
        weights_(std::make_shared<const CudaQwen35Weights>(ckpt, 0, options)),
        info_(qwen35_info(ckpt.config())),
        max_positions_(ckpt.config().max_position_embeddings) {}
  const char* backend_name() const override { return "cuda"; }
  ModelInfo info() const override { return info_; }
  int max_sequences() const override { return kMaxGroupSequences; }
  bool shares_forwards() const override { return true; }
  // Forwards on the graphs are batch-invariant row by row; the prefill GEMMs' rows depend on the cut.
  int chunk_invariant_rows() const override { return graph_only_rows(options_.prefill_gemm, weights_->act); }
  std::unique_ptr<ModelRuntime> add_sequence(int max_tokens) override {
    if (max_tokens > max_positions_)
      fail("a sequence of up to {} positions exceeds config.json's max_position_embeddings {}", max_tokens,
           max_positions_);
    auto seq = std::make_unique<CudaQwen35>(weights_, max_tokens, kMaxRows, options_, kv_pool_);
    seq->share_allocator(allocator_);
    return seq;
  }
  void set_allocator(Allocator* allocator) override { *allocator_ = allocator; }
  std::vector<KvPoolUse> kv_pools() override {
    if (!kv_pool_) return {};
    return {KvPoolUse{"attention", kv_pool_.get()}};
  }
  void forward_together(std::span<ModelRuntime* const> sequences,
                        std::span<const std::span<const int32_t>> tokens) override;
  void head_argmax_together(std::span<const SequenceRows> rows, int32_t* out) override;
  void wait_for(std::span<ModelRuntime* const> sequences) override {
    if (sequences.empty()) return;
    const std::vector<CudaQwen35*> seqs = members(sequences, "wait_for");
    seqs[0]->wait_with(seqs);
  }
  void mtp_forward_together(std::span<ModelRuntime* const> sequences,
                            std::span<const std::span<const int32_t>> next_tokens) override;
  void mtp_draft_together(std::span<ModelRuntime* const> sequences, std::span<const int> n, int32_t* out) override;
  void rollback_together(std::span<ModelRuntime* const> sequences, std::span<const int> keep) override;

 private:
  // The group's own sequences, each listed once (Error otherwise).
  std::vector<CudaQwen35*> members(std::span<ModelRuntime* const> sequences, const char* what) const;

  RuntimeOptions options_;  // every sequence's (the weights carry options_.act)
  std::shared_ptr<const CudaQwen35Weights> weights_;
  std::shared_ptr<KvBlockPool> kv_pool_ = make_kv_pool(*weights_);  // every sequence's KV blocks
  std::shared_ptr<Allocator*> allocator_ = std::make_shared<Allocator*>(nullptr);  // set_allocator: every sequence's
  ModelInfo info_;
  int max_positions_;
};

std::vector<CudaQwen35*> CudaSequenceGroup::members(std::span<ModelRuntime* const> sequences,
                                                   const char* what) const {
  return own_sequences<CudaQwen35>(sequences, what, [&](const CudaQwen35& q) { return q.weights() == weights_.get(); });
}

// The sequences' rows in chunks of at most kMaxRows rows, each sequence
// whole, in the order of the sequences' ids whatever order the caller lists
// them in (the server's threads arrive in any order): the same batch gets
// the same lead and the same graph key every step, and no sequence's result
// depends on its place. `solo` runs a sequence of more rows than a chunk
// holds, or a chunk of one; `group` a chunk of several (its lead first).
template <typename Solo, typename Group>
void in_row_chunks(std::span<CudaQwen35* const> seqs, std::span<const std::span<const int32_t>> tokens, Solo&& solo,
                   Group&& group) {
  std::vector<size_t> order(seqs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return seqs[a]->sequence_id() < seqs[b]->sequence_id(); });
  std::vector<GroupSlice> chunk;
  std::vector<std::span<const int32_t>> chunk_tokens;
  int rows = 0;
  auto flush = [&] {
    if (chunk.size() == 1) solo(*chunk[0].seq, chunk_tokens[0]);
    else if (!chunk.empty()) group(std::span<const GroupSlice>(chunk), std::span(std::as_const(chunk_tokens)));
    chunk.clear();
    chunk_tokens.clear();
    rows = 0;
  };
  for (const size_t i : order) {
    const int T = int(tokens[i].size());
    if (T > kMaxRows) {
      solo(*seqs[i], tokens[i]);
      continue;
    }
    if (rows + T > kMaxRows) flush();
    chunk.push_back({seqs[i], rows, T});
    chunk_tokens.push_back(tokens[i]);
    rows += T;
  }
  flush();
}

void CudaSequenceGroup::forward_together(std::span<ModelRuntime* const> sequences,
                                         std::span<const std::span<const int32_t>> tokens) {
  if (sequences.size() != tokens.size())
    fail("internal: forward_together of {} sequences and {} token lists", sequences.size(), tokens.size());
  const std::vector<CudaQwen35*> seqs = members(sequences, "forward_together");
  // All checked, a prompt's workspace taken, before any sequence changes.
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->reserve_step(tokens[i], 0);
  // A sequence longer than one chunk (a prompt) runs its own target_forward
  // (the prefill GEMMs, then the graphs), and so does a chunk of one.
  std::vector<CudaQwen35*> alone;  // sequences forwarded on their own streams
  in_row_chunks(
      seqs, tokens,
      [&alone](CudaQwen35& q, std::span<const int32_t> t) {
        q.target_forward(t);
        alone.push_back(&q);
      },
      [](std::span<const GroupSlice> chunk, std::span<const std::span<const int32_t>> t) {
        chunk[0].seq->forward_group(chunk, t);
      });
  if (seqs.size() > 1)
    for (CudaQwen35* q : alone) q->join_streams(seqs);
}

void CudaSequenceGroup::mtp_forward_together(std::span<ModelRuntime* const> sequences,
                                             std::span<const std::span<const int32_t>> next_tokens) {
  if (sequences.size() != next_tokens.size())
    fail("internal: mtp_forward_together of {} sequences and {} token lists", sequences.size(), next_tokens.size());
  const std::vector<CudaQwen35*> seqs = members(sequences, "mtp_forward_together");
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->check_mtp_forward(next_tokens[i], 0);  // all before any change
  // A longer pairing (after a prompt chunk) and a chunk of one run the sequence's own mtp_forward.
  in_row_chunks(seqs, next_tokens,
                [&](CudaQwen35& q, std::span<const int32_t> t) {
                  q.mtp_forward(t, 0);
                  ++step_work_.mtp_forward_launches;
                },
                [&](std::span<const GroupSlice> chunk, std::span<const std::span<const int32_t>> t) {
                  chunk[0].seq->mtp_forward_group(chunk, t);
                  ++step_work_.mtp_forward_launches;
                });
}

void CudaSequenceGroup::mtp_draft_together(std::span<ModelRuntime* const> sequences, std::span<const int> n,
                                           int32_t* out) {
  if (sequences.size() != n.size())
    fail("internal: mtp_draft_together of {} sequences and {} counts", sequences.size(), n.size());
  const std::vector<CudaQwen35*> seqs = members(sequences, "mtp_draft_together");
  // Each chain's place in `out` (list order), checked before any change.
  struct Chain {
    CudaQwen35* seq;
    int n;
    int32_t* out;
  };
  std::vector<Chain> chains;
  int32_t* at = out;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (n[i] <= 0) continue;
    seqs[i]->check_mtp_draft(n[i]);
    chains.push_back({seqs[i], n[i], at});
    at += n[i];
  }
  if (chains.empty()) return;
  for (const Chain& c : chains)
    if (c.seq->draft_vocab() != chains[0].seq->draft_vocab()) {  // one head projection needs one vocabulary
      SequenceGroup::mtp_draft_together(sequences, n, out);
      return;
    }
  // Longest chains first (the ones still drafting at step j are a prefix),
  // then by id: the same batch gets the same lead and graph key every step.
  std::stable_sort(chains.begin(), chains.end(), [](const Chain& a, const Chain& b) {
    return a.n != b.n ? a.n > b.n : a.seq->sequence_id() < b.seq->sequence_id();
  });
  for (size_t first = 0; first < chains.size(); first += kMaxGroupSequences) {
    const size_t last = std::min(chains.size(), first + kMaxGroupSequences);
    if (last - first == 1) {
      chains[first].seq->mtp_draft(chains[first].n, chains[first].out);
    } else {
      std::vector<CudaQwen35*> group_seqs;
      std::vector<int> group_n;
      std::vector<int32_t*> group_out;
      for (size_t i = first; i < last; ++i) {
        group_seqs.push_back(chains[i].seq);
        group_n.push_back(chains[i].n);
        group_out.push_back(chains[i].out);
      }
      group_seqs[0]->mtp_draft_group(group_seqs, group_n, group_out);
    }
    step_work_.mtp_draft_launches += chains[first].n;  // one launch per chained step for the whole chunk
  }
}

void CudaSequenceGroup::rollback_together(std::span<ModelRuntime* const> sequences, std::span<const int> keep) {
  if (sequences.size() != keep.size())
    fail("internal: rollback_together of {} sequences and {} counts", sequences.size(), keep.size());
  const std::vector<CudaQwen35*> seqs = members(sequences, "rollback_together");
  // The ones that undo rows, checked before any change, in id order (the
  // same batch, the same lead and graph key); one launch per
  // kMaxGroupSequences of them.
  std::vector<size_t> order;
  for (size_t i = 0; i < seqs.size(); ++i)
    if (seqs[i]->rollback_replay_of(keep[i]) >= 0) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return seqs[a]->sequence_id() < seqs[b]->sequence_id(); });
  for (size_t first = 0; first < order.size(); first += kMaxGroupSequences) {
    std::vector<CudaQwen35*> chunk;
    std::vector<int> chunk_keep;
    for (size_t j = first; j < std::min(order.size(), first + kMaxGroupSequences); ++j) {
      chunk.push_back(seqs[order[j]]);
      chunk_keep.push_back(keep[order[j]]);
    }
    chunk[0]->rollback_group(chunk, chunk_keep);
    ++step_work_.rollback_launches;
  }
}

}  // namespace
void CudaSequenceGroup::head_argmax_together(std::span<const SequenceRows> rows, int32_t* out) {
  // Chunks of whole sequences, in list order, of at most the lead's rows:
  // each chunk one projection (the lead is the chunk's first sequence).
  std::vector<CudaQwen35*> chunk;
  std::vector<SequenceRows> chunk_rows;
  int n = 0;
  auto flush = [&] {
    if (chunk.empty()) return;
    chunk[0]->head_argmax_group(chunk, chunk_rows, out);
    out += n;
    ++step_work_.lm_head_launches;
    chunk.clear();
    chunk_rows.clear();
    n = 0;
  };
  for (const SequenceRows& r : rows) {
    auto* q = dynamic_cast<CudaQwen35*>(r.sequence);
    if (q == nullptr || q->weights() != weights_.get())
      fail("internal: head_argmax_together over a sequence of another group");
    if (std::find(chunk.begin(), chunk.end(), q) != chunk.end())
      fail("internal: head_argmax_together lists one sequence twice");
    if (!chunk.empty() && n + r.count > chunk[0]->max_rows()) flush();
    chunk.push_back(q);
    chunk_rows.push_back(r);
    n += r.count;
  }
  flush();
}

}  // namespace cuda

std::unique_ptr<SequenceGroup> make_cuda_sequence_group(const Qwen35Checkpoint& ckpt, const RuntimeOptions& options) {
  return std::make_unique<cuda::CudaSequenceGroup>(ckpt, options);
}

}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
