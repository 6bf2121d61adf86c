// The decoder layer (layer.h): the same launches in the same order for
// decode steps, verify blocks, prefill chunks and group passes.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/layer.h"

#include "backend/cuda/kernels.h"
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

void decoder_layer(const LayerContext& c, const LayerWeights& L, int T, const StepBuffers& b, const SequenceView& s) {
  const auto& cfg = c.w.cfg;
  const float eps = cfg.rms_norm_eps;
  const int H = c.H;
  const Act act = c.act;
  const cudaStream_t stream = c.stream;
  const int* pos = &s.args->pos;
  c.mark("norm");
  cuda::rmsnorm(b.x, Act::F32, H, L.input_norm, eps, T, H, b.xn, act, H, nullptr, stream);
  if (L.full) {
    const int qd = cfg.num_attention_heads * cfg.head_dim;
    c.mark("attn.qkv");
    run_linear(c, L.attn.qkv, b.xn, T, H, b.proj, c.proj_ld, b);
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
    c.mark("gdn.in");
    run_linear(c, L.gdn_in, b.xn, T, H, const_cast<float*>(g.proj), g.proj_ld, b);
    if (b.group != nullptr) {
      c.mark("gdn.rec");
      cuda::gdn_group(c.gdn, b.group->entries, b.group->n, b.group->max_T, L.gdn_index, g.proj, b.act, act, stream);
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
  c.mark("norm");
  cuda::rmsnorm(b.x, Act::F32, H, L.post_norm, eps, T, H, b.xn, act, H, nullptr, stream);
  if (L.is_moe) {
    moe_block(c, L.moe, T, b.xn, H, b.x, H);
    return;
  }
  c.mark("mlp.gate_up");
  run_linear(c, L.gate_up, b.xn, T, H, b.proj, c.proj_ld, b);
  c.mark("mlp.swiglu");
  cuda::swiglu(b.proj, c.proj_ld, cfg.intermediate_size, T, b.act, act, c.act_ld, stream);
  c.mark("mlp.down");
  project(c, L.down, b.act, T, c.act_ld, b.x, H, true, b);
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
