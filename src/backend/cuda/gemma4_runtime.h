// Private to the CUDA Gemma 4 runtime (gemma4.cpp, gemma4_head.cpp): the
// CudaGemma4 class, its per-layer device weights and its buffers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/gemma4_kernels.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/weight_upload.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/gemma4_config.h"
#include "model/bench_interfaces.h"
#include "model/gemma4_runtime.h"
#include "model/runtime.h"

namespace nextn {
class Gemma4Checkpoint;
}

namespace nextn::cuda {

// A MoE layer's routed half (enable_moe_block; backend/cpu/gemma4_moe.cpp
// has the formulas), beside the dense MLP.
struct Gemma4DevMoe {
  int E = 0, k = 0, I = 0;          // experts, per token, expert width (E 0: a dense layer)
  DevMatrix router;                 // [E][H]
  float* router_scale = nullptr;    // [H]
  float* expert_scale = nullptr;    // [E] per_expert_scale
  DevExperts gate_up;               // E x [2I][H]: gate rows, then up
  DevExperts down;                  // E x [H][I]
  float *post_mlp_norm = nullptr;   // [H] post_feedforward_layernorm_1
  float *pre_experts_norm = nullptr;  // [H] pre_feedforward_layernorm_2
  float *post_experts_norm = nullptr; // [H] post_feedforward_layernorm_2
};

struct Gemma4DevLayer {
  Gemma4LayerSpec spec;
  float *input_norm = nullptr, *post_attn_norm = nullptr;  // [H]
  float *pre_ff_norm = nullptr, *post_ff_norm = nullptr;   // [H]
  float *q_norm = nullptr, *k_norm = nullptr;              // [head_dim]
  float* inv_freq = nullptr;  // [head_dim/2]: RoPE frequencies, 0 past spec.rope_pairs
  DevMatrix qkv;              // [Hq*hd + kv*hd (+ kv*hd unless k_eq_v)][H]: q | k | v
  DevMatrix o;                // [H][Hq*hd]
  DevMatrix gate_up;          // [2I][H]: gate | up
  DevMatrix down;             // [H][I]
  Gemma4DevMoe moe;           // E 0 unless enable_moe_block
  float layer_scalar = 1.0f;
  int slots = 0;                                   // ring slots: position p at p % slots
  float *k_cache = nullptr, *v_cache = nullptr;    // fp32 [slots][kv*hd]
};

// The host copy of one layer's ring for the assistant (it reads two layers,
// many positions each, per draft): positions below `upto` are current in it;
// a read first copies the positions [upto, length) the device wrote since.
struct KvMirror {
  int upto = 0;
  std::vector<float> k, v;  // [rows][kv*hd], slot order (rows: min(slots, positions copied))
};

class CudaGemma4 final : public Gemma4Runtime, public VerifyHeadArms {
 public:
  CudaGemma4(const Gemma4Checkpoint& ck, int max_tokens, Activations act);
  ~CudaGemma4() override;

  ModelInfo info() const override { return info_; }
  const char* backend_name() const override { return "cuda"; }
  void target_forward(std::span<const int32_t> tokens) override;
  void target_rollback(int keep) override;
  // The product's head: exactly its rows (the padded arm at width count).
  void head_argmax(int first, int count, int32_t* out) override { head_argmax_padded(first, count, count, out); }
  void head_logits(int row, float* out) override;
  HeadWork head_work() const override;
  void reset() override;

  // ---- VerifyHeadArms (model/bench_interfaces.h) ----
  void head_argmax_padded(int first, int count, int width, int32_t* out) override;
  void head_argmax_fused(int first, int count, int32_t* out) override;
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override;

  // ---- Gemma4Target (copies from the device) ----
  const Gemma4TextConfig& gemma4_config() const override { return cfg_; }
  void last_hidden(float* out) const override;
  void scaled_embedding(int32_t token, float* out) const override;
  const float* cached_key(int layer, int pos) const override { return cached(layer, pos, true); }
  const float* cached_value(int layer, int pos) const override { return cached(layer, pos, false); }

 private:
  // loading (gemma4.cpp)
  float* upload_floats(const std::vector<float>& v, const char* what);
  DevMatrix upload_matrix(const std::vector<WeightRef>& parts, const char* what, bool splittable,
                          WeightUse use = WeightUse::Matmul);
  Gemma4DevLayer load_layer(const Gemma4Checkpoint& ck, int index);
  Gemma4DevMoe load_moe(const Gemma4Checkpoint& ck, int index);  // gemma4_moe.cpp
  // the forward
  void forward_chunk(const int32_t* tokens, int pos, int T, void* hidden_out);
  void decoder_layer(const Gemma4DevLayer& L, int pos, int T);
  // y_ (the dense MLP's output) = post_mlp_norm(y_) + post_experts_norm(experts(x_)) (gemma4_moe.cpp)
  void moe_half(const Gemma4DevMoe& M, int T);
  // the head (gemma4_head.cpp)
  void gather_hidden(int first, int n_real, int width);
  HeadTally tally(HeadPath path) const { return {d_head_, int(path)}; }
  // host side
  void fetch(const void* src, size_t bytes, void* dst) const;
  const float* cached(int layer, int pos, bool key) const;
  // Positions from `pos` on may have changed on the device.
  void invalidate_mirrors(int pos) const;

  Gemma4TextConfig cfg_;
  ModelInfo info_;
  Act act_ = Act::BF16;
  int H_ = 0, V_ = 0, I_ = 0, Hq_ = 0;
  float eps_ = 1e-6f;
  float embed_scale_ = 1.0f;

  // Owning members, released in reverse: the stream, then device memory.
  DeviceMemory mem_;
  Stream stream_;

  // weights
  DevMatrix embed_, head_;  // head_ is embed_ when tied
  float* final_norm_ = nullptr;
  std::vector<Gemma4DevLayer> layers_;

  // workspace (R = kMaxRows rows)
  int32_t* d_tokens_ = nullptr;  // [R]
  float* x_ = nullptr;           // [R][H] fp32 residual
  void* xn_ = nullptr;           // [R][H] act: norm outputs (matmul inputs)
  float* proj_ = nullptr;        // [R][proj_ld_] fp32: q|k|v, or gate|up
  int proj_ld_ = 0;
  float* q_ = nullptr;           // [R][Hq*max hd] fp32: prepared queries
  void* act_buf_ = nullptr;      // [R][act_ld_] act: attention output / GeGLU output
  int act_ld_ = 0;
  float* y_ = nullptr;           // [R][H] fp32: o_proj / down outputs before their norm
  MoeScratch moe_;               // R rows of the MoE layers' routing and expert rows (a MoE target)
  float* splitk_ = nullptr;      // split-K scratch (bf16 mode)
  void* hidden_ = nullptr;       // [max_tokens][H] act: post-norm rows of the last forward
  void* head_in_ = nullptr;      // [R][H] act
  float* logits_ = nullptr;      // [R][V]
  void* pairs_ = nullptr;        // fused argmax (value, index) pairs
  void* argmax_scratch_ = nullptr;
  int* d_rows_ = nullptr;        // [2]: gather's first row, real rows
  int32_t* d_drafts_ = nullptr;  // [R]
  int32_t* d_out_ = nullptr;     // [R + 2]
  int* d_walk_ = nullptr;        // [2]: the walk's stop flag, rows taken
  HeadCounters* d_head_ = nullptr;
  int32_t* d_embed_token_ = nullptr;  // scaled_embedding's token
  float* d_embed_row_ = nullptr;      // [H]

  // sequence state

  mutable std::vector<KvMirror> mirrors_;  // per layer
  mutable std::vector<uint16_t> bf16_row_;  // last_hidden's bf16 staging
};

}  // namespace nextn::cuda
