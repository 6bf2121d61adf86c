// Qwen3.5 split over tensor-parallel ranks on the CPU (docs/tensor-parallel.md):
// one sequence whose every rank holds its part of the weights
// (io/tensor_parallel_plan.h) and its own caches and GDN states, the ranks
// run as threads that meet in the collectives of a CPU communicator
// (core/cpu_comm.h). Results are deterministic (the same bits at any thread
// timing) and keep the runtime's exactness contract, so speculative output
// equals greedy bit for bit at every degree.
#pragma once
#include <memory>

#include "backend/cpu/qwen35.h"
#include "model/runtime.h"

namespace nextn {
class Qwen35Checkpoint;

// Throws Error naming --tensor-parallel when options.tensor_parallel cannot
// split the model (check_tensor_parallel).
std::unique_ptr<ModelRuntime> make_cpu_tensor_parallel_runtime(const Qwen35Checkpoint& ckpt, int max_tokens,
                                                               const CpuRuntimeOptions& options);

}  // namespace nextn
