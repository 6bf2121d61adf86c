// Qwen3.5 (+MTP head) on the CPU backend: fp32 weights and activations.
#pragma once
#include <memory>

#include "model/runtime.h"

namespace nextn {
class Qwen35Checkpoint;
std::unique_ptr<ModelRuntime> make_cpu_runtime(const Qwen35Checkpoint& ckpt, int max_tokens);
}  // namespace nextn
