// The MTP head over a group's sequences (docs/cuda-backend.md, "Several
// sequences"; docs/engine.md): the step's pairing forward and its draft
// chain, each one pass over every sequence instead of one per sequence.
//
// Like the group trunk forward (qwen35_group.cpp), a pass runs on the lead's
// stream and decode workspace over the concatenated rows of its slices: the
// embedding, the MTP norms, its fc, the MTP layer's matmuls and the MTP head
// projection once over all the rows; the layer's attention over the pass's
// table (each sequence its own KV cache at its own position), and the final
// norm over all rows, then each sequence's rows into its own mtp_hidden (Workspace).
// The matmuls (the fused head argmax included) are batch-invariant and
// every other op is per row or per entry, so each sequence ends bit for bit
// as its own mtp_forward / mtp_draft would leave it, and drafts the same
// tokens.
//
// The chain: draft 0 of every sequence is the argmax of its latest entry;
// chained step j runs the MTP layer for every sequence with more than j
// drafts (a prefix: the lead orders them by draft count), fed by its draft
// j-1 straight from the lead's device table d_group_drafts (row j-1), and
// writes draft j into row j. The per-step arguments of every sequence (position,
// source row) are staged once per call in its own d_chain_args, as its
// solo mtp_draft stages them; one copy back of the table at the end.
#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/qwen35_runtime.h"
#include "core/error.h"

namespace nextn::cuda {

void CudaQwen35::group_mtp_chunk(const GroupPass& pass, int rows, const int32_t* tokens) {
  const float eps = cfg_.rms_norm_eps;
  const size_t row_bytes = size_t(H_) * size_t(act_size(act_));
  const LayerContext c = layer_context();
  profiler_.set_prefix("mtp.");
  c.mark("inputs");
  cuda::gather_rows_group(pass.entries, pass.n, pass.max_T, H_, ws_.mtp_src, act_, stream_);
  cuda::embed_rows(w_->embed, tokens, rows, ws_.x, H_, stream_);
  char* xn = static_cast<char*>(ws_.xn);
  cuda::rmsnorm(ws_.x, Act::F32, H_, w_->mtp_norm_emb, eps, rows, H_, xn, act_, 2 * H_, nullptr, stream_);
  cuda::rmsnorm(ws_.mtp_src, act_, H_, w_->mtp_norm_hid, eps, rows, H_, xn + row_bytes, act_, 2 * H_, nullptr,
                stream_);
  c.mark("fc");
  cuda::matmul(w_->mtp_fc, ws_.xn, act_, rows, 2 * H_, ws_.x, H_, false, ws_.splitk, stream_);
  StepBuffers b = decode_buffers();
  b.group = &pass;
  decoder_layer(c, w_->mtp_layer, rows, b, sequence_view());
  c.mark("norm");
  // mtp_src is read: the norm of every row there, then each entry's rows out.
  cuda::rmsnorm(ws_.x, Act::F32, H_, w_->mtp_norm, eps, rows, H_, ws_.mtp_src, act_, H_, nullptr, stream_);
  cuda::scatter_rows_group(pass.entries, pass.n, pass.max_T, H_, ws_.mtp_src, act_, stream_);
  profiler_.set_prefix({});
}

void CudaQwen35::mtp_forward_group(std::span<const GroupSlice> slices,
                                   std::span<const std::span<const int32_t>> next_tokens) {
  if (slices.empty() || slices.size() != next_tokens.size() || slices[0].seq != this || slices[0].row != 0)
    fail("internal: mtp_forward_group must be called on the sequence of its first slice");
  if (slices.size() > size_t(kMaxGroupSequences))
    fail("internal: mtp_forward_group of {} sequences above {}", slices.size(), kMaxGroupSequences);
  int rows = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].row != rows || slices[i].T != int(next_tokens[i].size()) || slices[i].seq->w_ != w_ ||
        slices[i].args != nullptr)
      fail("internal: mtp_forward_group slices out of order");
    rows += slices[i].T;
  }
  if (rows > max_rows_) fail("internal: mtp_forward_group of {} rows above {}", rows, max_rows_);
  const GroupPassShape shape = group_pass_shape(slices, max_rows_);
  cuda::GroupEntry* table = staged_group_table(0);
  for (size_t i = 0; i < slices.size(); ++i) {
    CudaQwen35& q = *slices[i].seq;
    // What its own mtp_forward(next_tokens, 0) uploads for one chunk; the
    // lead's arguments also carry every row's token (the padding rows' 0).
    StepArgs a = q.args();
    a.pos = q.state_.mtp_length;
    a.out_row = 0;
    a.first_row = 0;
    a.n_real = slices[i].T;
    if (i == 0) {
      for (size_t j = 0; j < slices.size(); ++j)
        std::copy(next_tokens[j].begin(), next_tokens[j].end(), a.tokens + slices[j].row);
      std::fill(a.tokens + rows, a.tokens + shape.padded_rows, 0);
    }
    q.hold_positions(q.state_.mtp_length + slices[i].T);
    q.ws_.upload(a, q.stream_);
    if (&q != this) {  // its target rows and its upload before the pass
      CUDA_CHECK(cudaEventRecord(q.group_event_, q.stream_));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, q.group_event_, 0));
    }
    table[i] = q.group_entry(slices[i].row, slices[i].T, q.ws_.d_args);
    table[i].in = q.ws_.hidden;
    table[i].out = q.ws_.mtp_hidden;
  }
  std::fill(table + slices.size(), table + shape.entries, cuda::GroupEntry{});
  upload_group_tables(1);
  const GroupPass pass{group_table(0), shape.entries, shape.max_T};
  graphs_.group_replay(GraphKind::GroupMtpForward, shape.key(),
               [&] { group_mtp_chunk(pass, shape.padded_rows, ws_.d_args->tokens); });
  CUDA_CHECK(cudaEventRecord(group_event_, stream_));
  for (const GroupSlice& s : slices) {
    CudaQwen35& q = *s.seq;
    if (&q != this) CUDA_CHECK(cudaStreamWaitEvent(q.stream_, group_event_, 0));
    q.state_.mtp_length += s.T;
    q.state_.mtp_last_n = s.T;
    q.state_.mtp_work.entries += s.T;
  }
}

void CudaQwen35::mtp_draft_group(std::span<CudaQwen35* const> seqs, std::span<const int> n,
                                 std::span<int32_t* const> out) {
  const int S = int(seqs.size());
  if (S == 0 || seqs[0] != this || n.size() != seqs.size() || out.size() != seqs.size())
    fail("internal: mtp_draft_group must be called on the sequence of its first chain");
  if (S > kMaxGroupSequences || S > max_rows_)
    fail("internal: mtp_draft_group of {} sequences above {}", S, std::min(kMaxGroupSequences, max_rows_));
  const int steps = n[0];
  for (int i = 0; i < S; ++i)
    if (n[size_t(i)] < 1 || n[size_t(i)] > steps || (i > 0 && n[size_t(i)] > n[size_t(i) - 1]) ||
        seqs[size_t(i)]->w_ != w_ || seqs[size_t(i)]->draft_vocab() != draft_vocab())
      fail("internal: mtp_draft_group chains out of order");
  check_rows("mtp_draft", steps);

  // Every sequence's chain arguments, as its own mtp_draft stages them:
  // [0] the argmax of its latest entry; per step k >= 1, [2k-1] the step
  // (position, source row) and [2k] the argmax of its output row 0.
  for (int i = 0; i < S; ++i) {
    CudaQwen35& q = *seqs[size_t(i)];
    const int ni = n[size_t(i)];
    StepArgs head = q.args();
    head.first_row = q.state_.mtp_last_n - 1;
    head.n_real = 1;
    q.ws_.h_chain_args[0] = head;
    for (int k = 1; k < ni; ++k) {
      StepArgs step = q.args();
      step.pos = q.state_.mtp_length + k - 1;
      step.out_row = 0;
      step.first_row = k == 1 ? q.state_.mtp_last_n - 1 : 0;
      step.n_real = 1;
      q.ws_.h_chain_args[2 * k - 1] = step;
      StepArgs am = q.args();
      am.first_row = 0;
      am.n_real = 1;
      q.ws_.h_chain_args[2 * k] = am;
    }
    q.hold_positions(q.state_.mtp_length + ni - 1);
    CUDA_CHECK(cudaMemcpyAsync(q.ws_.d_chain_args, q.ws_.h_chain_args, sizeof(StepArgs) * size_t(2 * ni - 1),
                               cudaMemcpyHostToDevice, q.stream_));
    if (&q != this) {  // its MTP rows and its staged arguments before the chain
      CUDA_CHECK(cudaEventRecord(q.group_event_, q.stream_));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, q.group_event_, 0));
    }
  }

  // The chain's tables: [0] the heads' gather of draft 0; per step j >= 1,
  // [2j-1] the MTP layer of the sequences still drafting, [2j] their head
  // gather (each sequence at row t, one row, its staged arguments).
  auto active_at = [&](int j) {
    int active = 0;
    while (active < S && n[size_t(active)] > j) ++active;
    return active;
  };
  for (int k = 0; k < 2 * steps - 1; ++k) {
    cuda::GroupEntry* table = staged_group_table(k);
    const int active = active_at((k + 1) / 2);
    for (int t = 0; t < active; ++t) {
      CudaQwen35& q = *seqs[size_t(t)];
      table[t] = q.group_entry(t, 1, q.ws_.d_chain_args + k);
      table[t].in = q.ws_.mtp_hidden;
      table[t].out = q.ws_.mtp_hidden;
    }
  }
  upload_group_tables(2 * steps - 1);

  const DevMatrix drafting_head = draft_head();  // drafts over ids [0, draft_vocab())
  // Draft j of the first `active` sequences: each one's row 0 (or, for
  // j = 0, its latest entry) into the head input, one fused projection.
  auto argmax_into = [&](int j, int active) {
    cuda::gather_rows_group(group_table(2 * j), active, 1, H_, ws_.head_in, act_, stream_);
    cuda::matmul_argmax(drafting_head, ws_.head_in, act_, active, H_, ws_.pairs,
                        ws_.d_group_drafts + size_t(j) * kMaxGroupSequences, nullptr, stream_);
  };
  // Keyed by the chain lengths, not by the sequences: the tables say whose.
  std::vector<std::pair<uint64_t, int>> key;
  for (int i = 0; i < S; ++i) key.emplace_back(0, n[size_t(i)]);
  key.emplace_back(~uint64_t(0) - 1, drafting_head.rows);
  graphs_.group_replay(GraphKind::GroupMtpDraft, std::move(key), [&] {
    argmax_into(0, S);
    for (int j = 1; j < steps; ++j) {
      const int active = active_at(j);
      const GroupPass pass{group_table(2 * j - 1), active, 1};
      group_mtp_chunk(pass, active, ws_.d_group_drafts + size_t(j - 1) * kMaxGroupSequences);
      argmax_into(j, active);
    }
  });
  std::vector<int32_t> table(size_t(steps) * kMaxGroupSequences);
  // Also orders the staged uploads.
  ws_.fetch(ws_.d_group_drafts, table.size() * sizeof(int32_t), table.data(), stream_);
  CUDA_CHECK(cudaEventRecord(group_event_, stream_));
  for (int i = 0; i < S; ++i) {
    CudaQwen35& q = *seqs[size_t(i)];
    if (&q != this) CUDA_CHECK(cudaStreamWaitEvent(q.stream_, group_event_, 0));
    const int ni = n[size_t(i)];
    for (int j = 0; j < ni; ++j) out[size_t(i)][j] = table[size_t(j) * kMaxGroupSequences + size_t(i)];
    if (ni > 1) {
      q.state_.mtp_length += ni - 1;
      q.state_.mtp_last_n = 1;
    }
    q.state_.mtp_work.entries += ni - 1;
    q.state_.mtp_work.chained_steps += ni - 1;
    q.state_.mtp_work.argmax_rows += ni;
  }
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
