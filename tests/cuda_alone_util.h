// Solo CUDA runtimes for the tests that compare a group of sequences with
// each sequence alone (tests/test_cuda_batch.cpp, tests/test_cuda_moe.cpp):
// the activation mode and graphs as runtime options, and a RuntimeMaker.
#pragma once
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35.h"
#include "batch_checks.h"
#include "core/options.h"
#include "io/checkpoint.h"

namespace nextn::test {

inline RuntimeOptions cuda_mode_options(bool fp32, bool graphs = true) {
  return {.act = fp32 ? Activations::Fp32 : Activations::Bf16, .cuda_graphs = graphs};
}

// `ck` must outlive the maker.
inline RuntimeMaker cuda_alone(const Qwen35Checkpoint& ck, bool fp32, bool graphs = true) {
  return [&ck, fp32, graphs](int cap) {
    return make_cuda_runtime(ck, cap, kMaxForwardRows, cuda_mode_options(fp32, graphs));
  };
}

}  // namespace nextn::test
#endif  // NEXTN_HAVE_CUDA
