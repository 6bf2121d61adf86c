// Opens a target checkpoint of any supported family (Qwen3.5, Gemma 4) by
// its config.json model_type, for the commands that only need runtimes.
#pragma once
#include <string>

#include "model/runtime.h"
#include "speculative/generate.h"

namespace nextn {

struct TargetModel {
  std::string family;      // "qwen3_5" or "gemma4"
  ModelInfo info;          // as the runtimes will report it
  RuntimeFactory factory;  // owns the opened checkpoint
};

// Throws Error (a bad checkpoint, or a family the backend does not run).
TargetModel open_target_model(const std::string& dir, BackendKind kind, int cpu_threads = 0);

}  // namespace nextn
