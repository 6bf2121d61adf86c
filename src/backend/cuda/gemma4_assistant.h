// The Gemma 4 assistant drafter on the device of its CUDA target (docs/gemma4.md,
// "The assistant on the GPU"): its weights uploaded once per target model,
// and one draft chain per target sequence that reads the sequence's hidden
// row and ring caches in place. The step is the CPU assistant's
// (backend/cpu/gemma4_assistant.cpp), op for op:
//   u  = pre_projection(embed(token) * embed_scale | hidden)
//   per layer: u += post_attn_norm(o(attend(q))), q at the round's position over
//              the target's K/V of its last layer of the same kind (positions
//              before it; a sliding layer the last sliding_window + 1 of them);
//              u = (u + post_ff_norm(down(gelu_tanh(gate(n)) * up(n)))) * layer_scalar
//   d = norm(u); next hidden = post_projection(d); draft = argmax of the tied
//   head over d (centroid masked: the top-k centroids' tokens only).
// A chain's drafts stay on the device from step to step: a round of n
// greedy drafts is n chained steps and one copy back. The greedy rounds of
// several sequences run together (AssistantChain::propose_together): step
// j is one pass with a row per sequence still drafting, each row reading
// its own sequence's caches through a row table (Gemma4Row), as the
// target's passes do; every kernel is batch-invariant, so a row's drafts
// are the ones its chain would make alone.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/gemma4_runtime.h"
#include "io/gemma4_checkpoint.h"

namespace nextn::cuda {

struct CudaAssistantLayer {
  Gemma4LayerSpec spec;
  float *input_norm = nullptr, *post_attn_norm = nullptr;  // [Ha]
  float *pre_ff_norm = nullptr, *post_ff_norm = nullptr;   // [Ha]
  float* q_norm = nullptr;                                 // [head_dim]
  float* inv_freq = nullptr;                               // [head_dim/2]
  DevMatrix q;        // [Hq*hd][Ha]
  DevMatrix o;        // [Ha][Hq*hd]
  DevMatrix gate_up;  // [2I][Ha]
  DevMatrix down;     // [Ha][I]
  float layer_scalar = 1.0f;
  int target_layer = 0;  // the target layer whose K/V it reads
};

// An assistant's weights and the scratch of one pass (up to kMaxRows rows)
// on a target model's device (its memory and stream). The chains of one
// target model run on its thread (the engine's), so they share the scratch.
class CudaAssistant {
 public:
  CudaAssistant(const Gemma4Checkpoint& ck, CudaGemma4Model& target);
  // One step over R rows: row r's token tokens[r] (device), its hidden row
  // (hidden_act [R][Hb]) and its rope / attention rows (device, [R] each:
  // the round's position and position - 1 in its sequence's caches); writes
  // next_hidden fp32 [R][Hb] and leaves the final-norm rows for a head call.
  void forward_rows(int R, const int32_t* tokens, const void* hidden, Act hidden_act, const Gemma4Row* rope_rows,
                    const Gemma4Row* attn_rows, float* next_hidden);
  // The head over the last forward's R rows: each row's draft into out[r] (device).
  void head_argmax_rows(int R, int32_t* out);
  // The head's logits [V] of the last forward's row 0 into logits().
  void head_logits_row();
  float* logits() const { return logits_; }  // [V]

  std::string dir;
  Gemma4AssistantConfig cfg;
  CudaGemma4Model& target;
  int Ha = 0, Hb = 0, V = 0;

  // A pass over several chains' rounds (gemma4_assistant.cpp): its tables
  // and its tokens and hidden rows from step to step.
  Gemma4Row* d_rope_rows = nullptr;   // [R]
  Gemma4Row* d_attn_rows = nullptr;   // [R]
  int32_t* d_tokens[2] = {};          // [R] each: step j reads d_tokens[j & 1], writes the other
  void* first_hidden = nullptr;       // [R][Hb] act: the targets' last hidden rows (step 0)
  float* step_hidden[2] = {};         // [R][Hb] fp32 each: step j writes step_hidden[j & 1]
  int32_t* d_drafts = nullptr;        // [R][kMaxRows]: row r's draft j at r * kMaxRows + j

 private:
  // The centroid-masked head of last-forward row r into *out, or its logits.
  void centroid_head(int r, int32_t* out, float* logits);

  DevMatrix pre_projection_;   // [Ha][2Hb]
  DevMatrix post_projection_;  // [Hb][Ha]
  DevMatrix embed_;            // [V][Ha]: the tied head
  DevMatrix centroids_;        // [C][Ha] (use_ordered_embeddings)
  float* final_norm_ = nullptr;
  int32_t* ordering_ = nullptr;  // [V]: centroid c owns entries [c V/C, (c+1) V/C)
  std::vector<CudaAssistantLayer> layers_;
  // scratch (R = kMaxRows rows)
  float* embedding_ = nullptr;  // [R][Hb] fp32
  void* in_ = nullptr;          // [R][2Hb] act
  float* u_ = nullptr;          // [R][Ha] fp32 residual
  void* xn_ = nullptr;          // [R][Ha] act
  float* proj_ = nullptr;       // [R][proj_ld_] fp32: q, or gate|up
  int proj_ld_ = 0;
  float* q_ = nullptr;          // [R][Hq*max hd] fp32
  void* act_buf_ = nullptr;     // [R][act_ld_] act
  int act_ld_ = 0;
  float* y_ = nullptr;          // [R][Ha] fp32
  void* d_ = nullptr;           // [R][Ha] act: the final norm
  float* splitk_ = nullptr;
  void* pairs_ = nullptr;       // the full head's fused argmax
  float* centroid_logits_ = nullptr;  // [R][C]
  int32_t* candidates_ = nullptr;     // [k * V/C]
  float* candidate_rows_ = nullptr;   // [k * V/C][Ha] fp32
  float* scores_ = nullptr;           // [k * V/C]
  float* logits_ = nullptr;           // [V]
};

// One target sequence's chain (model/gemma4_target.h) over `assistant`.
std::unique_ptr<AssistantChain> make_cuda_assistant_chain(std::shared_ptr<CudaAssistant> assistant, CudaGemma4& seq);

}  // namespace nextn::cuda
