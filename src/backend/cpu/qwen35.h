// Qwen3.5 (+MTP head) on the CPU backend: fp32 weights and activations.
#pragma once
#include <cstdint>
#include <memory>

#include "core/fault.h"
#include "model/runtime.h"

namespace nextn {
class Qwen35Checkpoint;
class SequenceGroup;
struct CpuRuntimeOptions {
  int threads = 0;  // the runtime's thread pool; 0 takes default_thread_count()
  // A matrix product is split across threads in chunks of at least this many
  // multiply-adds (small ones stay on one thread). Tests set 1 so that every
  // split happens on tiny fixtures; results never depend on it.
  int64_t min_chunk_work = int64_t(1) << 16;
  Fault fault = Fault::None;  // a planted runtime fault (RuntimeOptions::fault)
  // Ranks of tensor parallelism (--tensor-parallel, docs/tensor-parallel.md):
  // 1 runs the model alone; N > 1 splits it over N ranks run as threads,
  // each with threads / N of the threads (at least one).
  int tensor_parallel = 1;
};
// The CPU backend's part of `options` (threads, fault).
CpuRuntimeOptions cpu_options(const RuntimeOptions& options);
// A sequence of the model alone, or split over options.tensor_parallel
// ranks (backend/cpu/qwen35_tp.h).
std::unique_ptr<ModelRuntime> make_cpu_runtime(const Qwen35Checkpoint& ckpt, int max_tokens,
                                               const CpuRuntimeOptions& options = {});
// Sequences over one copy of the weights whose forwards run as one
// (model/batch_runtime.h); make_cpu_runtime is one such sequence alone.
// Under tensor parallelism a serial group of make_cpu_runtime's sequences
// (each its own split model); `ckpt` must outlive it then.
std::unique_ptr<SequenceGroup> make_cpu_sequence_group(const Qwen35Checkpoint& ckpt, const CpuRuntimeOptions& options = {});
}  // namespace nextn
