// Gemma 4 (dense text model) on the CPU backend: fp32 activations, weights
// as stored (docs/gemma4.md). Same exactness contract as the Qwen3.5 runtime
// (model/runtime.h): row j of a multi-row forward equals a one-row forward.
#pragma once
#include <memory>

#include "backend/cpu/qwen35.h"
#include "model/runtime.h"

namespace nextn {
class Gemma4Checkpoint;
class SequenceGroup;
std::unique_ptr<ModelRuntime> make_cpu_gemma4_runtime(const Gemma4Checkpoint& ckpt, int max_tokens,
                                                      const CpuRuntimeOptions& options = {});
// Sequences over one copy of the weights whose forwards run as one
// (model/batch_runtime.h): one trunk forward over every sequence's rows, one
// LM-head projection over every row that needs a token; each sequence ends
// bit for bit as make_cpu_gemma4_runtime's would. The Gemma 4 assistant
// drafts against each sequence (it is a Gemma4Target).
std::unique_ptr<SequenceGroup> make_cpu_gemma4_group(const Gemma4Checkpoint& ckpt,
                                                     const CpuRuntimeOptions& options = {});
}  // namespace nextn
