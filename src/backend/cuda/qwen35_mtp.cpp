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
// row (target rows [first_row, ...) of `hidden_`, or the MTP's own row
// first_row of `mtp_hidden_` for a chained step).
void CudaQwen35::mtp_chunk(int n, bool from_target) {
  const float eps = cfg_.rms_norm_eps;
  prof_prefix_ = "mtp.";
  mark("inputs");
  cuda::gather_rows(from_target ? hidden_ : mtp_hidden_, H_, &d_args_->first_row, &d_args_->n_real, n, mtp_src_, act_,
                    stream_);
  cuda::embed_rows(w_->embed, d_args_->tokens, n, x_, H_, stream_);
  char* xn = static_cast<char*>(xn_);
  cuda::rmsnorm(x_, Act::F32, H_, w_->mtp_norm_emb, eps, n, H_, xn, act_, 2 * H_, nullptr, stream_);
  cuda::rmsnorm(mtp_src_, act_, H_, w_->mtp_norm_hid, eps, n, H_, xn + size_t(H_) * act_size(act_), act_, 2 * H_,
                nullptr, stream_);
  mark("fc");
  cuda::matmul(w_->mtp_fc, xn_, act_, n, 2 * H_, x_, H_, false, splitk_, stream_);
  decoder_layer(w_->mtp_layer, n, decode_buffers());
  mark("norm");
  cuda::rmsnorm(x_, Act::F32, H_, w_->mtp_norm, eps, n, H_, mtp_hidden_, act_, H_, &d_args_->out_row, stream_);
  mark("head");  // what follows in the same graph (mtp_draft: the argmax)
  prof_prefix_.clear();
}

void CudaQwen35::check_mtp_forward(std::span<const int32_t> next_tokens, int first_row) const {
  if (!w_->has_mtp) fail("this checkpoint has no MTP head (mtp_num_hidden_layers is 0 and no mtp.layers.* tensors)");
  const int n = int(next_tokens.size());
  if (n <= 0 || first_row < 0 || first_row + n > last_T_)
    fail("mtp_forward: rows [{}, {}) outside the last forward's {} rows", first_row, first_row + n, last_T_);
  if (mtp_length_ + n > max_tokens_) fail("MTP cache capacity {} exceeded", max_tokens_);
  check_tokens(next_tokens);
}

void CudaQwen35::mtp_forward(std::span<const int32_t> next_tokens, int first_row) {
  check_mtp_forward(next_tokens, first_row);
  const int n = int(next_tokens.size());
  for (int done = 0; done < n;) {
    const int m = std::min(max_rows_, n - done);
    StepArgs a = args();
    a.pos = mtp_length_ + done;
    a.out_row = done;
    a.first_row = first_row + done;
    a.n_real = m;
    std::copy(next_tokens.begin() + done, next_tokens.begin() + done + m, a.tokens);
    upload(a);
    replay(GraphKind::MtpForward, m, 0, [&] { mtp_chunk(m, true); });
    done += m;
  }
  mtp_length_ += n;
  mtp_last_n_ = n;
  mtp_work_.entries += n;
}

void CudaQwen35::mtp_step(int32_t token) {
  if (mtp_last_n_ == 0) fail("mtp_step before any mtp_forward");
  check_tokens({&token, 1});
  if (mtp_length_ + 1 > max_tokens_) fail("MTP cache capacity {} exceeded", max_tokens_);
  StepArgs a = args();
  a.pos = mtp_length_;
  a.out_row = 0;
  a.first_row = mtp_last_n_ - 1;
  a.n_real = 1;
  a.tokens[0] = token;
  upload(a);
  replay(GraphKind::MtpStep, 1, 0, [&] { mtp_chunk(1, false); });
  mtp_length_ += 1;
  mtp_last_n_ = 1;
  ++mtp_work_.entries;
  ++mtp_work_.chained_steps;
}

void CudaQwen35::mtp_argmax(int count, int32_t* out) {
  if (count < 0 || count > mtp_last_n_) fail("mtp_argmax: {} entries, last call made {}", count, mtp_last_n_);
  mtp_work_.argmax_rows += count;  // counted before the launch below (which throws only on a bad count)
  check_rows("mtp_argmax", count);
  fused_argmax_rows(GraphKind::MtpArgmax, draft_head(), mtp_hidden_, mtp_last_n_ - count, count, out, {});
}

// The draft chain on the device: argmax of the latest entry, then per draft
// one MTP step fed by the previous argmax (a device-to-device copy into the
// step's token slot) and its argmax. The arguments of every step are staged
// in one upload; one graph per n; one copy back.
void CudaQwen35::check_mtp_draft(int n) const {
  if (mtp_last_n_ == 0) fail("mtp_draft before any mtp_forward");
  check_rows("mtp_draft", n);
  if (mtp_length_ + n - 1 > max_tokens_) fail("MTP cache capacity {} exceeded", max_tokens_);
}

void CudaQwen35::mtp_draft(int n, int32_t* out) {
  if (n <= 0) return;
  check_mtp_draft(n);
  // Entry 0: argmax args for the last row of the latest call; then per step
  // i >= 1: the step's args (2i-1) and the argmax args for its row 0 (2i).
  StepArgs head = args();
  head.first_row = mtp_last_n_ - 1;
  head.n_real = 1;
  h_chain_args_[0] = head;
  for (int i = 1; i < n; ++i) {
    StepArgs step = args();
    step.pos = mtp_length_ + i - 1;
    step.out_row = 0;
    step.first_row = i == 1 ? mtp_last_n_ - 1 : 0;
    step.n_real = 1;
    h_chain_args_[2 * i - 1] = step;
    StepArgs am = args();
    am.first_row = 0;
    am.n_real = 1;
    h_chain_args_[2 * i] = am;
  }
  CUDA_CHECK(cudaMemcpyAsync(d_chain_args_, h_chain_args_, sizeof(StepArgs) * size_t(2 * n - 1),
                             cudaMemcpyHostToDevice, stream_));
  auto set_args = [&](int k) {
    CUDA_CHECK(cudaMemcpyAsync(d_args_, d_chain_args_ + k, sizeof(StepArgs), cudaMemcpyDeviceToDevice, stream_));
  };
  const DevMatrix drafting_head = draft_head();  // drafts over ids [0, draft_vocab())
  auto argmax_into = [&](int slot) {
    cuda::gather_rows(mtp_hidden_, H_, &d_args_->first_row, &d_args_->n_real, 1, head_in_, act_, stream_);
    cuda::matmul_argmax(drafting_head, head_in_, act_, 1, H_, pairs_, d_out_ + slot, nullptr, stream_);
  };
  replay(GraphKind::MtpDraft, n, drafting_head.rows, [&] {
    set_args(0);
    argmax_into(0);
    for (int i = 1; i < n; ++i) {
      set_args(2 * i - 1);
      CUDA_CHECK(cudaMemcpyAsync(&d_args_->tokens[0], d_out_ + i - 1, sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                 stream_));
      mtp_chunk(1, false);
      set_args(2 * i);
      argmax_into(i);
    }
  });
  fetch(d_out_, sizeof(int32_t) * size_t(n), out);  // also orders the staged upload before the next call
  if (n > 1) {
    mtp_length_ += n - 1;
    mtp_last_n_ = 1;
  }
  mtp_work_.entries += n - 1;
  mtp_work_.chained_steps += n - 1;
  mtp_work_.argmax_rows += n;
}

void CudaQwen35::mtp_rollback(int length) {
  if (length < 0 || length > mtp_length_) fail("mtp_rollback: length {} outside [0, {}]", length, mtp_length_);
  mtp_length_ = length;
}


}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
