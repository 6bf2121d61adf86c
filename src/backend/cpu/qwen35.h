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
};
// The CPU backend's part of `options` (threads, fault).
CpuRuntimeOptions cpu_options(const RuntimeOptions& options);
std::unique_ptr<ModelRuntime> make_cpu_runtime(const Qwen35Checkpoint& ckpt, int max_tokens,
                                               const CpuRuntimeOptions& options = {});
// Sequences over one copy of the weights whose forwards run as one
// (model/batch_runtime.h); make_cpu_runtime is one such sequence alone.
std::unique_ptr<SequenceGroup> make_cpu_sequence_group(const Qwen35Checkpoint& ckpt, const CpuRuntimeOptions& options = {});
}  // namespace nextn
