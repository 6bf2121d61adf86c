// Opens a target checkpoint of any supported family (Qwen3.5, Gemma 4) by
// its config.json model_type, for the commands that only need runtimes.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "model/batch_runtime.h"
#include "model/runtime.h"

namespace nextn {

class Gemma4Checkpoint;

struct TargetModel {
  std::string family;      // "qwen3_5" or "gemma4"
  ModelInfo info;          // as the runtimes will report it
  RuntimeFactory factory;  // owns the opened checkpoint
  // The engine's group of sequences (model/batch_runtime.h): the backend's
  // shared-forward group (Qwen3.5 on either backend, Gemma 4 on the CPU), else
  // a serial group over `factory` (Gemma 4 on CUDA). Owns the checkpoint too.
  std::function<std::unique_ptr<SequenceGroup>()> make_group;
  std::shared_ptr<const Gemma4Checkpoint> gemma4;  // family "gemma4": the checkpoint (its config for an assistant)
};

// Throws Error (a bad checkpoint, or a family the backend does not run).
TargetModel open_target_model(const std::string& dir, BackendKind kind, const RuntimeOptions& options = {});

}  // namespace nextn
