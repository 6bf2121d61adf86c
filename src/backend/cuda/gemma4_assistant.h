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
// greedy drafts is n chained steps and one copy back.
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

// An assistant's weights and one row of scratch on a target model's device
// (its memory and stream). The chains of one target model run one step at a
// time (the engine's thread), so they share the scratch.
class CudaAssistant {
 public:
  CudaAssistant(const Gemma4Checkpoint& ck, CudaGemma4Model& target);
  // One chain step for `seq`: `rows` [2] device (rope position, attention
  // row: position - 1), the token at *token, the hidden row (hidden_act
  // [Hb]); writes next_hidden fp32 [Hb] and the argmax into *token_out, or
  // (logits non-null) the head's logits [V] instead.
  void step(const Gemma4Row* rows, const int32_t* token, const void* hidden, Act hidden_act, float* next_hidden,
            int32_t* token_out, float* logits);

  float* logits() const { return logits_; }  // [V] the step's logits when asked for

  std::string dir;
  Gemma4AssistantConfig cfg;
  CudaGemma4Model& target;
  int Ha = 0, Hb = 0, V = 0;

 private:
  void head(int32_t* token_out, float* logits);

  DevMatrix pre_projection_;   // [Ha][2Hb]
  DevMatrix post_projection_;  // [Hb][Ha]
  DevMatrix embed_;            // [V][Ha]: the tied head
  DevMatrix centroids_;        // [C][Ha] (use_ordered_embeddings)
  float* final_norm_ = nullptr;
  int32_t* ordering_ = nullptr;  // [V]: centroid c owns entries [c V/C, (c+1) V/C)
  std::vector<CudaAssistantLayer> layers_;
  // scratch (one row)
  float* embedding_ = nullptr;  // [Hb] fp32
  void* in_ = nullptr;          // [2Hb] act
  float* u_ = nullptr;          // [Ha] fp32 residual
  void* xn_ = nullptr;          // [Ha] act
  float* proj_ = nullptr;       // [proj_ld_] fp32: q, or gate|up
  int proj_ld_ = 0;
  float* q_ = nullptr;          // [Hq*max hd] fp32
  void* act_buf_ = nullptr;     // [act_ld_] act
  int act_ld_ = 0;
  float* y_ = nullptr;          // [Ha] fp32
  void* d_ = nullptr;           // [Ha] act: the final norm
  float* splitk_ = nullptr;
  void* pairs_ = nullptr;       // the full head's fused argmax
  float* centroid_logits_ = nullptr;  // [C]
  int32_t* candidates_ = nullptr;     // [k * V/C]
  float* candidate_rows_ = nullptr;   // [k * V/C][Ha] fp32
  float* scores_ = nullptr;           // [k * V/C]
  float* logits_ = nullptr;           // [V]
};

// One target sequence's chain (model/gemma4_target.h) over `assistant`.
std::unique_ptr<AssistantChain> make_cuda_assistant_chain(std::shared_ptr<CudaAssistant> assistant, CudaGemma4& seq);

}  // namespace nextn::cuda
