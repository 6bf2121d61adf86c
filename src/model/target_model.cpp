#include "model/target_model.h"

#include <memory>

#include "backend/cpu/gemma4.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/gemma4.h"
#endif
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/gemma4_checkpoint.h"

namespace nextn {

TargetModel open_target_model(const std::string& dir, BackendKind kind, const RuntimeOptions& options) {
  TargetModel m;
  const std::string gemma = gemma4_model_type(dir);
  if (gemma == "gemma4_assistant")
    fail("{}: a gemma4_assistant checkpoint is a drafter: pass its target with -m and it with --draft", dir);
  check_backend_options(kind, options);
  if (!gemma.empty()) {
    if (options.tensor_parallel != 1)
      fail("--tensor-parallel {}: {} is a Gemma 4 checkpoint; tensor parallelism splits Qwen3.5 only", options.tensor_parallel, dir);
    if (options.fp8_matmul == Fp8Matmul::W8A8)
      fail("--fp8-matmul w8a8: {} is a Gemma 4 checkpoint; its loader reads no FP8 weights", dir);
    auto ck = std::make_shared<const Gemma4Checkpoint>(Gemma4Checkpoint::open(dir));
#ifndef NEXTN_HAVE_CUDA
    if (kind == BackendKind::Cuda)
      fail("--backend cuda: this nextn was built without the CUDA backend (no nvcc at build time, or -DNEXTN_CUDA=OFF)");
#endif
    const Gemma4TextConfig& c = ck->config();
    m.family = "gemma4";
    m.gemma4 = ck;
    m.info = {c.vocab_size, c.hidden_size, c.max_position_embeddings, 0, c.eos_token_ids};
    m.factory = [ck, kind, options](int cap) -> std::unique_ptr<ModelRuntime> {
      (void)kind;  // read only with the CUDA backend built
#ifdef NEXTN_HAVE_CUDA
      if (kind == BackendKind::Cuda) return make_cuda_gemma4_runtime(*ck, cap, options);
#endif
      return make_cpu_gemma4_runtime(*ck, cap, cpu_options(options));
    };
    m.make_group = [ck, kind, options]() -> std::unique_ptr<SequenceGroup> {
      (void)kind;  // read only with the CUDA backend built
#ifdef NEXTN_HAVE_CUDA
      if (kind == BackendKind::Cuda) return make_cuda_gemma4_group(*ck, options);
#endif
      return make_cpu_gemma4_group(*ck, cpu_options(options));
    };
    return m;
  }
  auto ck = std::make_shared<const Qwen35Checkpoint>(Qwen35Checkpoint::open(dir));
  const Qwen35Config& c = ck->config();
  m.family = "qwen3_5";
  m.info = {c.vocab_size, c.hidden_size, c.max_position_embeddings, ck->mtp_layers(), c.eos_token_ids};
  m.factory = [ck, kind, options](int cap) { return make_runtime(*ck, kind, cap, options); };
  m.make_group = [ck, kind, options] { return make_sequence_group(*ck, kind, options); };
  return m;
}

}  // namespace nextn
