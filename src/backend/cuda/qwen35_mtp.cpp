// The CUDA runtime's MTP head (model/mtp_head.h) for one sequence: its
// pairing forward, chained steps, argmax and the draft chain on the device.
// The group's passes over several sequences are in qwen35_group_mtp.cpp; the
// class is in qwen35_runtime.h.
#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/qwen35_runtime.h"
#include "core/error.h"

namespace nextn::cuda {

// MTP entries for args.tokens[0..n): embedding of the next token and a hidden
// row (target rows [first_row, ...) of the workspace's `hidden`, or the MTP's
// own row first_row of `mtp_hidden` for a chained step).
void CudaQwen35::mtp_chunk(int n, bool from_target) {
  const float eps = cfg_.rms_norm_eps;
  const LayerContext c = layer_context();
  const StepArgs* d_args = ws_.d_args;
  profiler_.set_prefix("mtp.");
  c.mark("inputs");
  cuda::gather_rows(from_target ? ws_.hidden : ws_.mtp_hidden, H_, &d_args->first_row, &d_args->n_real, n,
                    ws_.mtp_src, act_, stream_);
  cuda::embed_rows(w_->embed, d_args->tokens, n, ws_.x, H_, stream_);
  char* xn = static_cast<char*>(ws_.xn);
  cuda::rmsnorm(ws_.x, Act::F32, H_, w_->mtp_norm_emb, eps, n, H_, xn, act_, 2 * H_, nullptr, stream_);
  cuda::rmsnorm(ws_.mtp_src, act_, H_, w_->mtp_norm_hid, eps, n, H_, xn + size_t(H_) * act_size(act_), act_, 2 * H_,
                nullptr, stream_);
  c.mark("fc");
  cuda::matmul(w_->mtp_fc, ws_.xn, act_, n, 2 * H_, ws_.x, H_, false, ws_.splitk, stream_);
  decoder_layer(c, w_->mtp_layer, n, decode_buffers(), sequence_view());
  c.mark("norm");
  cuda::rmsnorm(ws_.x, Act::F32, H_, w_->mtp_norm, eps, n, H_, ws_.mtp_hidden, act_, H_, &d_args->out_row, stream_);
  c.mark("head");  // what follows in the same graph (mtp_draft: the argmax)
  profiler_.set_prefix({});
}

void CudaQwen35::check_mtp_forward(std::span<const int32_t> next_tokens, int first_row) const {
  if (!w_->has_mtp) fail("this checkpoint has no MTP head (mtp_num_hidden_layers is 0 and no mtp.layers.* tensors)");
  const int n = int(next_tokens.size());
  if (n <= 0 || first_row < 0 || first_row + n > state_.last_T)
    fail("mtp_forward: rows [{}, {}) outside the last forward's {} rows", first_row, first_row + n, state_.last_T);
  if (state_.mtp_length + n > max_tokens_) fail("MTP cache capacity {} exceeded", max_tokens_);
  check_tokens(next_tokens);
}

void CudaQwen35::mtp_forward(std::span<const int32_t> next_tokens, int first_row) {
  check_mtp_forward(next_tokens, first_row);
  const int n = int(next_tokens.size());
  hold_positions(state_.mtp_length + n);
  for (int done = 0; done < n;) {
    const int m = std::min(max_rows_, n - done);
    StepArgs a = args();
    a.pos = state_.mtp_length + done;
    a.out_row = done;
    a.first_row = first_row + done;
    a.n_real = m;
    std::copy(next_tokens.begin() + done, next_tokens.begin() + done + m, a.tokens);
    ws_.upload(a, stream_);
    graphs_.replay(GraphKind::MtpForward, m, 0, [&] { mtp_chunk(m, true); });
    done += m;
  }
  state_.mtp_length += n;
  state_.mtp_last_n = n;
  state_.mtp_work.entries += n;
}

void CudaQwen35::mtp_step(int32_t token) {
  if (state_.mtp_last_n == 0) fail("mtp_step before any mtp_forward");
  check_tokens({&token, 1});
  if (state_.mtp_length + 1 > max_tokens_) fail("MTP cache capacity {} exceeded", max_tokens_);
  hold_positions(state_.mtp_length + 1);
  StepArgs a = args();
  a.pos = state_.mtp_length;
  a.out_row = 0;
  a.first_row = state_.mtp_last_n - 1;
  a.n_real = 1;
  a.tokens[0] = token;
  ws_.upload(a, stream_);
  graphs_.replay(GraphKind::MtpStep, 1, 0, [&] { mtp_chunk(1, false); });
  state_.mtp_length += 1;
  state_.mtp_last_n = 1;
  ++state_.mtp_work.entries;
  ++state_.mtp_work.chained_steps;
}

void CudaQwen35::mtp_argmax(int count, int32_t* out) {
  if (count < 0 || count > state_.mtp_last_n)
    fail("mtp_argmax: {} entries, last call made {}", count, state_.mtp_last_n);
  state_.mtp_work.argmax_rows += count;  // counted before the launch below (which throws only on a bad count)
  check_rows("mtp_argmax", count);
  fused_argmax_rows(GraphKind::MtpArgmax, draft_head(), ws_.mtp_hidden, state_.mtp_last_n - count, count, out, {});
}

// The draft chain on the device: argmax of the latest entry, then per draft
// one MTP step fed by the previous argmax (a device-to-device copy into the
// step's token slot) and its argmax. The arguments of every step are staged
// in one upload; one graph per n; one copy back.
void CudaQwen35::check_mtp_draft(int n) const {
  if (state_.mtp_last_n == 0) fail("mtp_draft before any mtp_forward");
  check_rows("mtp_draft", n);
  if (state_.mtp_length + n - 1 > max_tokens_) fail("MTP cache capacity {} exceeded", max_tokens_);
}

void CudaQwen35::mtp_draft(int n, int32_t* out) {
  if (n <= 0) return;
  check_mtp_draft(n);
  hold_positions(state_.mtp_length + n - 1);
  // Entry 0: argmax args for the last row of the latest call; then per step
  // i >= 1: the step's args (2i-1) and the argmax args for its row 0 (2i).
  StepArgs head = args();
  head.first_row = state_.mtp_last_n - 1;
  head.n_real = 1;
  ws_.h_chain_args[0] = head;
  for (int i = 1; i < n; ++i) {
    StepArgs step = args();
    step.pos = state_.mtp_length + i - 1;
    step.out_row = 0;
    step.first_row = i == 1 ? state_.mtp_last_n - 1 : 0;
    step.n_real = 1;
    ws_.h_chain_args[2 * i - 1] = step;
    StepArgs am = args();
    am.first_row = 0;
    am.n_real = 1;
    ws_.h_chain_args[2 * i] = am;
  }
  CUDA_CHECK(cudaMemcpyAsync(ws_.d_chain_args, ws_.h_chain_args, sizeof(StepArgs) * size_t(2 * n - 1),
                             cudaMemcpyHostToDevice, stream_));
  auto set_args = [&](int k) {
    CUDA_CHECK(cudaMemcpyAsync(ws_.d_args, ws_.d_chain_args + k, sizeof(StepArgs), cudaMemcpyDeviceToDevice, stream_));
  };
  const DevMatrix drafting_head = draft_head();  // drafts over ids [0, draft_vocab())
  auto argmax_into = [&](int slot) {
    cuda::gather_rows(ws_.mtp_hidden, H_, &ws_.d_args->first_row, &ws_.d_args->n_real, 1, ws_.head_in, act_, stream_);
    cuda::matmul_argmax(drafting_head, ws_.head_in, act_, 1, H_, ws_.pairs, ws_.d_out + slot, nullptr, stream_);
  };
  graphs_.replay(GraphKind::MtpDraft, n, drafting_head.rows, [&] {
    set_args(0);
    argmax_into(0);
    for (int i = 1; i < n; ++i) {
      set_args(2 * i - 1);
      CUDA_CHECK(cudaMemcpyAsync(&ws_.d_args->tokens[0], ws_.d_out + i - 1, sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                 stream_));
      mtp_chunk(1, false);
      set_args(2 * i);
      argmax_into(i);
    }
  });
  ws_.fetch(ws_.d_out, sizeof(int32_t) * size_t(n), out, stream_);  // orders the staged upload too
  if (n > 1) {
    state_.mtp_length += n - 1;
    state_.mtp_last_n = 1;
  }
  state_.mtp_work.entries += n - 1;
  state_.mtp_work.chained_steps += n - 1;
  state_.mtp_work.argmax_rows += n;
}

void CudaQwen35::mtp_rollback(int length) {
  if (length < 0 || length > state_.mtp_length)
    fail("mtp_rollback: length {} outside [0, {}]", length, state_.mtp_length);
  state_.mtp_length = length;
}


}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
