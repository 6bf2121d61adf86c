// Qwen3.5 (+MTP head) on the CUDA backend (sm_90a): weights uploaded once
// (bf16, or MLX q4/q8 kept packed), bf16 matmul operands with fp32
// accumulation, fp32 residual stream and GDN state; every per-token op on
// the device; decode and verify steps replayed as CUDA graphs.
// docs/cuda-backend.md has the design and the batch-invariance argument.
#pragma once
#include <memory>

#include "model/runtime.h"

namespace nextn {
class Qwen35Checkpoint;
class SequenceGroup;

// Throws Error (one line) when no CUDA device is usable, the device is not
// sm_90, or the checkpoint does not fit in device memory.
// options.act = Fp32 selects the fp32-activation mode (fp32 weights and
// operands on CUDA cores: slow, for exact parity checks on small models).
// max_rows: the most rows one call works on at once (runtime.h,
// kMaxForwardRows); the row-count workspaces are sized by it.
std::unique_ptr<ModelRuntime> make_cuda_runtime(const Qwen35Checkpoint& ckpt, int max_tokens,
                                                int max_rows = kMaxForwardRows, const RuntimeOptions& options = {});

// Sequences over one copy of the weights whose target forwards run as one
// trunk forward (model/batch_runtime.h; backend/cuda/qwen35_group.cpp).
// Throws what make_cuda_runtime would when no usable device exists.
std::unique_ptr<SequenceGroup> make_cuda_sequence_group(const Qwen35Checkpoint& ckpt, const RuntimeOptions& options = {});

// Throws the same Error make_cuda_runtime would when no usable device exists;
// returns a one-line description of device 0 otherwise.
std::string cuda_device_summary();

}  // namespace nextn
