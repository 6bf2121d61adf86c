// Private to the CUDA Gemma 4 runtime (gemma4*.cpp): the model on the device
// (CudaGemma4Model: weights, workspace, stream) and its sequences
// (CudaGemma4: ring caches, hidden rows, head counters).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/gemma4_kernels.h"
#include "backend/cuda/graph_cache.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_table.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/weight_upload.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/gemma4_config.h"
#include "model/batch_runtime.h"
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
};

class CudaGemma4;
class CudaAssistant;

// The rows of one sequence in a forward pass, in position order.
struct Gemma4Piece {
  CudaGemma4* seq = nullptr;
  std::span<const int32_t> tokens;
  int pos = 0;         // the position of its first row
  int hidden_row = 0;  // its first row among the rows of the sequence's forward
};

// The host copy of one layer's ring for the assistant (it reads two layers,
// many positions each, per draft): positions below `upto` are current in it;
// a read first copies the positions [upto, length) the device wrote since.
struct KvMirror {
  int upto = 0;
  std::vector<float> k, v;  // [rows][kv*hd], slot order (rows: min(slots, positions copied))
};

// One model on the device: its weights, and the workspace and stream that
// every forward and head call of its sequences runs in. A solo runtime owns
// one; the group (gemma4_group.cpp) shares one between its sequences.
class CudaGemma4Model {
 public:
  // options: act (the mode), cuda_graphs and pdl (the forward's graphs).
  CudaGemma4Model(const Gemma4Checkpoint& ck, const RuntimeOptions& options);
  ~CudaGemma4Model();
  CudaGemma4Model(const CudaGemma4Model&) = delete;
  CudaGemma4Model& operator=(const CudaGemma4Model&) = delete;

  // The ring slots of a layer in a sequence of `max_tokens` positions:
  // sliding layers hold the window and one pass of rows more.
  int slots(const Gemma4LayerSpec& spec, int max_tokens) const;
  // The pools of the full layers' KV blocks and of the sliding rings' (null
  // where no layer is of that kind), and their use (model/kv_pool.h).
  std::vector<KvPoolUse> kv_pools() const;
  // One forward over the pieces' rows (at most kMaxRows in all): each row
  // writes its K/V into its sequence's caches at its position, and its
  // final-norm output into its sequence's hidden rows.
  void forward_pass(std::span<const Gemma4Piece> pieces);
  // head_in rows r < width: row first + r of `hidden` for r < n_real, else zeros.
  void gather_hidden(const void* hidden, int first, int n_real, int width);
  // Copies device memory back after the stream's work (one host sync).
  void fetch(const void* src, size_t bytes, void* dst) const;
  // The assistant checkpoint on this model's device, uploaded at its first
  // use (gemma4_assistant.h); every sequence's chains share it. nullptr in
  // the bf16 mode when a width of the assistant is not a multiple of 32 (the
  // tensor-core kernels' rule; tiny test checkpoints): the CPU assistant
  // drafts for it then.
  std::shared_ptr<CudaAssistant> assistant(const Gemma4Checkpoint& ck);

  Gemma4TextConfig cfg;
  ModelInfo info;
  Act act = Act::BF16;
  int H = 0, V = 0, I = 0, Hq = 0;
  float eps = 1e-6f;
  float embed_scale = 1.0f;

  // Owning members, released in reverse: the graphs, the stream, then device memory.
  DeviceMemory mem;
  Stream stream;
  Profiler prof;                        // off: GraphCache marks nothing
  std::unique_ptr<GraphCache> graphs;   // the pass forward's graph per row count

  // weights
  DevMatrix embed, head;  // head is embed when tied
  float* final_norm = nullptr;
  std::vector<Gemma4DevLayer> layers;
  std::vector<size_t> kv_at;  // per layer: floats from its kind's KV block start to its keys (values follow)
  std::shared_ptr<KvBlockPool> full_pool, ring_pool;

  // workspace (R = kMaxRows rows of one pass)
  Gemma4Row* d_rows = nullptr;   // [R] the pass's rows: sequence caches and positions
  int32_t* d_tokens = nullptr;   // [R]
  float* x = nullptr;            // [R][H] fp32 residual
  void* xn = nullptr;            // [R][H] act: norm outputs (matmul inputs)
  float* proj = nullptr;         // [R][proj_ld] fp32: q|k|v, or gate|up
  int proj_ld = 0;
  float* q = nullptr;            // [R][Hq*max hd] fp32: prepared queries
  void* act_buf = nullptr;       // [R][act_ld] act: attention output / GeGLU output
  int act_ld = 0;
  float* y = nullptr;            // [R][H] fp32: o_proj / down outputs before their norm
  void* hidden = nullptr;        // [R][H] act: the pass's final-norm rows, before they go to their sequences
  MoeScratch moe;                // R rows of the MoE layers' routing and expert rows (a MoE target)
  float* splitk = nullptr;       // split-K scratch (bf16 mode)
  void* head_in = nullptr;       // [R][H] act
  float* logits = nullptr;       // [R][V]
  void* pairs = nullptr;         // fused argmax (value, index) pairs
  void* argmax_scratch = nullptr;
  int* d_head_rows = nullptr;    // [2]: gather's first row, real rows
  int32_t* d_drafts = nullptr;   // [R]
  int32_t* d_out = nullptr;      // [R + 2]
  int* d_walk = nullptr;         // [2]: the walk's stop flag, rows taken
  int32_t* d_embed_token = nullptr;  // scaled_embedding's token
  float* d_embed_row = nullptr;      // [H]
  PinnedBuffer<HeadCounters> h_counts;  // [2] a group head call's lead counters, before and after

 private:
  float* upload_floats(const std::vector<float>& v, const char* what);
  DevMatrix upload_matrix(const std::vector<WeightRef>& parts, const char* what, bool splittable,
                          WeightUse use = WeightUse::Matmul);
  Gemma4DevLayer load_layer(const Gemma4Checkpoint& ck, int index);
  Gemma4DevMoe load_moe(const Gemma4Checkpoint& ck, int index);  // gemma4_moe.cpp
  void decoder_layer(const Gemma4DevLayer& L, int layer, int T);
  // The pass's launches over T rows (tokens and row table staged): embedding
  // to final norm into `hidden`. Captured once per T (GraphKind::Forward).
  void forward_rows(int T);
  // y (the dense MLP's output) = post_mlp_norm(y) + post_experts_norm(experts(x)) (gemma4_moe.cpp)
  void moe_half(const Gemma4DevMoe& M, int T);

  std::vector<Gemma4Row> h_rows_;  // the pass's rows, staged
  std::vector<std::shared_ptr<CudaAssistant>> assistants_;  // by checkpoint directory
};

// One sequence: its KV block tables, its hidden rows and its head counters, over
// a shared CudaGemma4Model.
class CudaGemma4 final : public Gemma4Runtime, public VerifyHeadArms {
 public:
  CudaGemma4(std::shared_ptr<CudaGemma4Model> model, int max_tokens);
  ~CudaGemma4() override;

  ModelInfo info() const override { return m_->info; }
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
  const Gemma4TextConfig& gemma4_config() const override { return m_->cfg; }
  void last_hidden(float* out) const override;
  void scaled_embedding(int32_t token, float* out) const override;
  const float* cached_key(int layer, int pos) const override { return cached(layer, pos, true); }
  const float* cached_value(int layer, int pos) const override { return cached(layer, pos, false); }
  // The assistant on this device, reading this sequence's rows in place.
  std::unique_ptr<AssistantChain> device_assistant(const Gemma4Checkpoint& assistant) override;

  // ---- what the assistant's chain reads (gemma4_assistant.cpp) ----
  const Gemma4LayerCache* device_caches() const { return d_caches_; }
  // The last kept row of the last forward (act [H]).
  const void* last_hidden_row() const;

  // ---- the group's calls (gemma4_group.cpp) ----
  // target_forward(tokens[i]) on seqs[i] (distinct sequences of one model):
  // every call is checked before any sequence changes; the rows go through
  // the model in passes of at most kMaxRows rows.
  static void forward_together(std::span<CudaGemma4* const> seqs, std::span<const std::span<const int32_t>> tokens);
  // head_argmax(rows[i].first, rows[i].count) of seqs[i], concatenated, in
  // one projection (at most kMaxRows rows in all). Each sequence's counters
  // get its own rows and one call.
  static void head_argmax_together(std::span<CudaGemma4* const> seqs, std::span<const SequenceRows> rows,
                                   int32_t* out);
  const CudaGemma4Model* model() const { return m_.get(); }

 private:
  friend class CudaGemma4Model;  // forward_pass writes the caches' rows and the hidden rows
  HeadTally tally(HeadPath path) const { return {d_head_, int(path)}; }
  // Before a forward: its tokens fit (ids, capacity).
  void check_forward(std::span<const int32_t> tokens) const;
  const float* cached(int layer, int pos, bool key) const;
  // Positions from `pos` on may have changed on the device.
  void invalidate_mirrors(int pos) const;
  // Gemma4Runtime::hold_forward (rings: blocks up to their slots).
  void hold_forward(int T) override;

  std::shared_ptr<CudaGemma4Model> m_;  // released last: the sequence's memory goes back first
  DeviceMemory mem_;
  KvTable full_kv_, ring_kv_;              // the KV block tables of the full layers and the sliding rings
  int ring_slots_ = 0;
  std::vector<Gemma4LayerCache> caches_;   // per layer (host copy of d_caches_)
  Gemma4LayerCache* d_caches_ = nullptr;   // device [layers]: what the pass's rows point to
  DeviceMemory hidden_mem_;                // hidden_'s, replaced as it grows
  void* hidden_ = nullptr;                 // [hidden_rows_][H] act: post-norm rows of the last forward
  int hidden_rows_ = 0;                    // rows of the longest forward so far, in whole passes
  HeadCounters* d_head_ = nullptr;
  HeadWork head_shift_;                    // the group head's rows of this sequence counted on another's counters

  mutable std::vector<KvMirror> mirrors_;   // per layer
  mutable std::vector<uint16_t> bf16_row_;  // last_hidden's bf16 staging
};

}  // namespace nextn::cuda
