// Gemma 4 (dense and MoE text models) on the CUDA backend (docs/gemma4.md,
// "CUDA"): the forward of backend/cpu/gemma4.cpp with every op on the
// device, each pass's launches captured as a graph per row count, for one
// sequence or a group of them over one copy of the weights. A sequence also implements
// Gemma4Target, so the CPU assistant drafter runs against it (it copies the
// rows it reads back to the host).
//
// Modes, RuntimeOptions::act (--act) as for Qwen3.5: fp32 (weights and
// activations fp32, matmuls on CUDA cores: the parity mode the tests compare
// with transformers) or bf16 (the default: bf16 weights and matmul operands
// on tensor cores, fp32 residual, KV cache and sums). cuda_graphs and pdl
// as for Qwen3.5; the other runtime options are Qwen3.5's only.
#pragma once
#include <memory>

#include "model/batch_runtime.h"
#include "model/runtime.h"

namespace nextn {
class Gemma4Checkpoint;

// Throws Error (one line): no usable device, an assistant checkpoint, a
// capacity outside [1, max_position_embeddings], a shape the kernels cannot
// take, or too little device memory.
std::unique_ptr<ModelRuntime> make_cuda_gemma4_runtime(const Gemma4Checkpoint& ckpt, int max_tokens,
                                                       const RuntimeOptions& options = {});
// Sequences over one copy of the weights on the device whose forwards share
// passes of up to 64 rows and whose LM-head rows share projections
// (model/batch_runtime.h); up to 64 sequences at once. Throws as above.
std::unique_ptr<SequenceGroup> make_cuda_gemma4_group(const Gemma4Checkpoint& ckpt, const RuntimeOptions& options = {});

}  // namespace nextn
