// The CUDA Gemma 4 sequence group: one CudaGemma4Model (weights, workspace,
// stream) and sequences over it; their forwards share passes of up to
// kMaxRows rows (gemma4_sequence.cpp) and their LM-head rows one projection
// per kMaxRows rows (gemma4_head.cpp). Rollback moves positions only (the
// caches keep the undone rows' slots until a later forward rewrites them), so
// it launches nothing. Gemma 4 has no MTP head: the step's MTP calls are
// never made for it (its ModelInfo says 0 MTP layers).
#ifdef NEXTN_HAVE_CUDA
#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/gemma4.h"
#include "backend/cuda/gemma4_runtime.h"
#include "core/error.h"
#include "io/gemma4_checkpoint.h"

namespace nextn {
namespace cuda {
namespace {

class CudaGemma4Group final : public SequenceGroup {
 public:
  CudaGemma4Group(const Gemma4Checkpoint& ck, const RuntimeOptions& options)
      : dir_(ck.dir()), model_(std::make_shared<CudaGemma4Model>(ck, options)) {}
  const char* backend_name() const override { return "cuda"; }
  ModelInfo info() const override { return model_->info; }
  int max_sequences() const override { return kMaxRows; }  // a decode row of each fits one pass
  bool shares_forwards() const override { return true; }
  // Every forward runs in passes of at most kMaxRows rows (no prefill GEMM): any cut gives the same bits.
  int chunk_invariant_rows() const override { return std::numeric_limits<int>::max(); }
  std::vector<KvPoolUse> kv_pools() override { return model_->kv_pools(); }
  // Every sequence's passes run on the model's one stream.
  void wait_for(std::span<ModelRuntime* const>) override { CUDA_CHECK(cudaStreamSynchronize(model_->stream)); }
  std::unique_ptr<ModelRuntime> add_sequence(int max_tokens) override {
    check_gemma4_capacity(dir_, model_->cfg, max_tokens);
    return std::make_unique<CudaGemma4>(model_, max_tokens);
  }
  void forward_together(std::span<ModelRuntime* const> sequences,
                        std::span<const std::span<const int32_t>> tokens) override {
    CudaGemma4::forward_together(members(sequences, tokens.size(), "forward_together"), tokens);
  }
  // Chunks of whole sequences, in list order, of at most kMaxRows rows: one
  // projection each.
  void head_argmax_together(std::span<const SequenceRows> rows, int32_t* out) override {
    std::vector<ModelRuntime*> listed;
    for (const SequenceRows& r : rows) listed.push_back(r.sequence);
    const std::vector<CudaGemma4*> seqs = members(listed, rows.size(), "head_argmax_together");
    for (size_t i = 0; i < seqs.size();) {
      size_t j = i;
      int n = 0;
      while (j < seqs.size() && n + rows[j].count <= kMaxRows) n += rows[j++].count;
      if (j == i) fail("head_argmax: {} rows of one sequence above {}", rows[i].count, kMaxRows);
      CudaGemma4::head_argmax_together(std::span(seqs).subspan(i, j - i), rows.subspan(i, j - i), out);
      ++step_work_.lm_head_launches;
      out += n;
      i = j;
    }
  }
  // Every call checked first; positions only, no launch.
  void rollback_together(std::span<ModelRuntime* const> sequences, std::span<const int> keep) override {
    const std::vector<CudaGemma4*> seqs = members(sequences, keep.size(), "rollback_together");
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->check_rollback(keep[i]);
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->target_rollback(keep[i]);
  }

 private:
  std::vector<CudaGemma4*> members(std::span<ModelRuntime* const> sequences, size_t lists, const char* what) const {
    return own_sequences<CudaGemma4>(sequences, lists, what,
                                     [&](const CudaGemma4& g) { return g.model() == model_.get(); });
  }

  std::string dir_;  // for messages
  std::shared_ptr<CudaGemma4Model> model_;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<ModelRuntime> make_cuda_gemma4_runtime(const Gemma4Checkpoint& ckpt, int max_tokens,
                                                       const RuntimeOptions& options) {
  ckpt.check_target_capacity(max_tokens);
  return std::make_unique<cuda::CudaGemma4>(std::make_shared<cuda::CudaGemma4Model>(ckpt, options), max_tokens);
}

std::unique_ptr<SequenceGroup> make_cuda_gemma4_group(const Gemma4Checkpoint& ckpt, const RuntimeOptions& options) {
  return std::make_unique<cuda::CudaGemma4Group>(ckpt, options);
}

}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
