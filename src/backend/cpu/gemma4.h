// Gemma 4 (dense text model) on the CPU backend: fp32 activations, weights
// as stored (docs/gemma4.md). Same exactness contract as the Qwen3.5 runtime
// (model/runtime.h): row j of a multi-row forward equals a one-row forward.
#pragma once
#include <memory>

#include "backend/cpu/qwen35.h"
#include "model/runtime.h"

namespace nextn {
class Gemma4Checkpoint;
std::unique_ptr<ModelRuntime> make_cpu_gemma4_runtime(const Gemma4Checkpoint& ckpt, int max_tokens,
                                                      const CpuRuntimeOptions& options = {});
}  // namespace nextn
