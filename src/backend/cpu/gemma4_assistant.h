// The Gemma 4 assistant drafter's forward on the CPU (docs/gemma4.md): one
// draft step from (token, backbone hidden) at a held query position, reading
// the target's cached K/V of its last sliding and last full layer.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cpu/gemma4_layer.h"
#include "core/thread_pool.h"
#include "io/gemma4_config.h"
#include "model/gemma4_target.h"

namespace nextn {

class Gemma4Checkpoint;
class ModelRuntime;

class CpuGemma4Assistant {
 public:
  // Throws Error (one line naming the assistant's field) when the assistant
  // does not fit the target: backbone hidden size, vocabulary, the head
  // shapes of the layers whose K/V it reads, its sliding window.
  CpuGemma4Assistant(const Gemma4Checkpoint& assistant, const Gemma4TextConfig& target, int threads = 0);

  // One draft: u = pre_projection([target.scaled_embedding(token); hidden]),
  // the assistant's layers with queries at `position` over the target's keys
  // before it, d = norm(u); returns argmax of the (centroid-masked) tied head
  // over d and writes post_projection(d) to hidden_out [backbone hidden].
  int32_t step(const Gemma4Target& target, int32_t token, const float* hidden, int position, float* hidden_out);
  // The same step, writing the head's logits [vocab] instead of taking their
  // argmax (for sampled drafts): the tied head over d, softcapped as the
  // config says; with use_ordered_embeddings only the tokens of the top-k
  // centroids are scored and every other token gets -inf.
  void step_logits(const Gemma4Target& target, int32_t token, const float* hidden, int position, float* hidden_out,
                   float* logits);

  int64_t steps() const { return steps_; }

 private:
  void attention(const cpu::Gemma4Layer& L, const Gemma4Target& target, int position, const float* xn, float* out);
  // The layers and post_projection of one step; writes d = norm(u) [hidden] and hidden_out.
  void forward(const Gemma4Target& target, int32_t token, const float* hidden, int position, float* d,
               float* hidden_out);
  int32_t head_argmax(const float* d);
  void head_logits(const float* d, float* logits);
  // The centroid-masked head's candidates: the tokens of the top-k centroids by d's centroid logits.
  template <typename Visit>
  void for_each_candidate(const float* d, Visit visit);

  Gemma4AssistantConfig cfg_;
  int target_layer_[2] = {-1, -1};  // the target layer read by [full, sliding] assistant layers
  ThreadPool pool_;
  std::shared_ptr<cpu::Matrix> pre_projection_, post_projection_, embed_, centroids_;
  std::vector<float> final_norm_;
  std::vector<cpu::Gemma4Layer> layers_;
  std::vector<int32_t> token_ordering_;  // [vocab]: centroid c owns entries c*V/C .. (c+1)*V/C - 1
  int64_t steps_ = 0;
};

// The CPU assistant's chain (model/gemma4_target.h) for the target sequence
// `rt` (a Gemma 4 runtime of either backend: it reads the target through
// Gemma4Target). Both must outlive the chain. Error when rt is not Gemma 4.
std::unique_ptr<AssistantChain> make_cpu_assistant_chain(CpuGemma4Assistant& assistant, ModelRuntime& rt);

}  // namespace nextn
