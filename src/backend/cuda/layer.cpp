// The decoder layer (layer.h): the same launches in the same order for
// decode steps, verify blocks, prefill chunks and group passes.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/layer.h"

#include "backend/cuda/kernels.h"
#include "backend/cuda/matmul_stream.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/prefill_workspace.h"
#include "backend/cuda/qwen35_runtime.h"

namespace nextn::cuda {

void run_linear(const LayerContext& c, const Linear& lin, const void* x, int T, int ldx, float* y, int ldy,
                const StepBuffers& b) {
  for (const auto& p : lin.parts) project(c, p.m, x, T, ldx, y + p.offset, ldy, false, b);
}

void project(const LayerContext& c, const DevMatrix& W, const void* x, int T, int ldx, float* y, int ldy,
             bool accumulate, const StepBuffers& b) {
  if (b.prefill != nullptr) b.prefill->project(c, W, x, T, ldx, y, ldy, accumulate);
  else cuda::matmul(W, x, c.act, T, ldx, y, ldy, accumulate, c.splitk, c.stream);
}

// The widths where the layer path folds the norm (the kernel takes up to
// kFoldedRows). At 5 to 8 rows the producer once made two passes per stage
// and lost to the norm kernel plus the matmul
// (docs/benchmark_results/decode-h200-2026-12-05c.md); it now loads every
// row of the fragment in one batch (stream_fold.cuh, slice_rows); the fold
// alone still loses at 6 to 8 rows (docs/cuda-backend.md, "The folds").
constexpr int kLayerNormFoldRows = 8;

// Whether the layer path folds the norm before W into W's streamed kernel.
bool layer_folds_norm(const LayerContext& c, const DevMatrix& W, int T, const StepBuffers& b) {
  return b.prefill == nullptr && c.act == Act::BF16 && T <= kLayerNormFoldRows && stream_folds_norm(W, T);
}

// b.xn = rmsnorm(b.x, gamma) for T rows, by the norm kernel.
void norm_rows(const LayerContext& c, const float* gamma, int T, const StepBuffers& b) {
  c.mark("norm");
  cuda::rmsnorm(b.x, Act::F32, c.H, gamma, c.w.cfg.rms_norm_eps, T, c.H, b.xn, c.act, c.H, nullptr, c.stream);
}

// y = lin . rmsnorm(b.x, gamma) for T rows. At up to kLayerNormFoldRows
// rows, where every part's streamed kernel folds the norm into its
// activation load (same bits as the norm kernel's bf16 rows), no norm kernel
// runs and b.xn is not written; otherwise the norm kernel writes b.xn and
// the parts read it.
void norm_then_linear(const LayerContext& c, const char* label, const float* gamma, const Linear& lin, int T, float* y,
                      int ldy, const StepBuffers& b) {
  bool folds = true;
  for (const auto& p : lin.parts) folds = folds && layer_folds_norm(c, p.m, T, b);
  if (folds) {
    c.mark(label);
    for (const auto& p : lin.parts)
      stream_matmul_normed(p.m, b.x, c.H, gamma, c.w.cfg.rms_norm_eps, T, y + p.offset, ldy, false, c.splitk,
                           c.stream);
    return;
  }
  norm_rows(c, gamma, T, b);
  c.mark(label);
  run_linear(c, lin, b.xn, T, c.H, y, ldy, b);
}

// b.x += down . swiglu(gate_up rows in b.proj) for T rows: the swiglu
// kernel writes b.act and down reads it. (Down's SwiGLU fold, which
// bench chain's links use, was slower than the two kernels at every width
// on the 27B: docs/benchmark_results/decode-h200-2026-12-05c.md; gate_up's
// SwiGLU epilogue, dense_mlp below, replaces both at up to 8 rows.)
void swiglu_then_down(const LayerContext& c, const DevMatrix& down, int T, const StepBuffers& b) {
  const int I = c.w.cfg.intermediate_size;
  c.mark("mlp.swiglu");
  cuda::swiglu(b.proj, c.proj_ld, I, T, b.act, c.act, c.act_ld, c.stream);
  c.mark("mlp.down");
  project(c, down, b.act, T, c.act_ld, b.x, c.H, true, b);
}

// b.x += down . swiglu(gate_up . rmsnorm(b.x, post_norm)) for T rows. A
// SwiGLU-paired gate_up (DevMatrix::swiglu_pairs) at up to kFoldedRows
// rows writes b.act from its epilogue (no fp32 gate_up rows, no swiglu
// launch; the same bits), with the norm folded as norm_then_linear folds
// it; otherwise gate_up writes b.proj and the swiglu kernel b.act.
void dense_mlp(const LayerContext& c, const LayerWeights& L, int T, const StepBuffers& b) {
  const Linear& gate_up = L.gate_up;
  const bool fused = b.prefill == nullptr && c.act == Act::BF16 && gate_up.parts.size() == 1 &&
                     stream_fuses_swiglu(gate_up.parts[0].m, T);
  if (!fused) {
    norm_then_linear(c, "mlp.gate_up", L.post_norm, gate_up, T, b.proj, c.proj_ld, b);
    swiglu_then_down(c, L.down, T, b);
    return;
  }
  const DevMatrix& W = gate_up.parts[0].m;
  if (layer_folds_norm(c, W, T, b)) {
    c.mark("mlp.gate_up");
    stream_gate_up_swiglu_normed(W, b.x, c.H, L.post_norm, c.w.cfg.rms_norm_eps, T, b.act, c.act_ld, c.stream);
  } else {
    norm_rows(c, L.post_norm, T, b);
    c.mark("mlp.gate_up");
    stream_gate_up_swiglu(W, b.xn, T, c.H, b.act, c.act_ld, c.stream);
  }
  c.mark("mlp.down");
  project(c, L.down, b.act, T, c.act_ld, b.x, c.H, true, b);
}

void decoder_layer(const LayerContext& c, const LayerWeights& L, int T, const StepBuffers& b, const SequenceView& s) {
  const auto& cfg = c.w.cfg;
  const int H = c.H;
  const Act act = c.act;
  const cudaStream_t stream = c.stream;
  const int* pos = &s.args->pos;
  if (L.full) {
    const int qd = cfg.num_attention_heads * cfg.head_dim;
    norm_then_linear(c, "attn.qkv", L.input_norm, L.attn.qkv, T, b.proj, c.proj_ld, b);
    if (b.group != nullptr) {
      c.mark("attn.core");
      cuda::attention_group(c.attn, b.group->entries, b.group->n, b.group->max_T, L.kv_index, b.proj, c.proj_ld,
                            L.attn.q_norm, L.attn.k_norm, c.w.inv_freq, b.q, b.act, act, stream);
    } else {
      const KvBlocks kv{s.kv_blocks, L.kv_index};
      c.mark("attn.prepare");
      cuda::attn_prepare(c.attn, b.proj, c.proj_ld, T, L.attn.q_norm, L.attn.k_norm, c.w.inv_freq, pos, b.q, kv, act,
                         stream);
      c.mark("attn.core");
      if (b.prefill != nullptr) b.prefill->attention(c, T, kv, b);
      else
        cuda::attention(c.attn, b.q, kv, act, b.proj, c.proj_ld, T, pos, c.partial_positions, c.attn_partial, b.act, stream);
    }
    c.mark("attn.o");
    project(c, L.attn.o, b.act, T, qd, b.x, H, true, b);
  } else {
    const cuda::GdnLayer& g = (*b.gdn_host)[size_t(L.gdn_index)];
    norm_then_linear(c, "gdn.in", L.input_norm, L.gdn_in, T, const_cast<float*>(g.proj), g.proj_ld, b);
    if (b.group != nullptr) {
      c.mark("gdn.rec");
      cuda::gdn_group(c.gdn, b.group->entries, b.group->n, b.group->max_T, L.gdn_index, g.proj, b.act, act, stream);
    } else if (b.prefill == nullptr && cuda::gdn_step_fits(c.gdn, T)) {
      c.mark("gdn.step");
      cuda::gdn_step(c.gdn, b.gdn_table, L.gdn_index, T, &s.args->parity, act, stream);
    } else {
      c.mark("gdn.conv");
      cuda::gdn_conv(c.gdn, b.gdn_table, L.gdn_index, 1, T, &s.args->parity, 0, false, stream);
      c.mark("gdn.rec");
      if (b.prefill != nullptr && c.proj_ld >= cfg.value_dim())  // b.proj is free here: the raw outputs
        cuda::gdn_prefill_recurrence(c.gdn, b.gdn_table, L.gdn_index, T, &s.args->parity, b.proj, stream);
      else
        cuda::gdn_recurrence(c.gdn, b.gdn_table, L.gdn_index, 1, T, &s.args->parity, 0, false, act, stream);
    }
    c.mark("gdn.out");
    project(c, L.gdn_out, b.act, T, cfg.value_dim(), b.x, H, true, b);
  }
  if (L.is_moe) {
    norm_rows(c, L.post_norm, T, b);
    moe_block(c, L.moe, T, b.xn, H, b.x, H);
    return;
  }
  dense_mlp(c, L, T, b);
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
