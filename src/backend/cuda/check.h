// Checked CUDA runtime calls: every failure becomes one nextn::Error line
// naming the call site and CUDA's own message.
#pragma once
#include <cuda_runtime_api.h>

#include "core/error.h"

namespace nextn::cuda {

// Errors that leave the CUDA context unusable: every later call fails too.
inline bool cuda_error_is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction: case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc: case cudaErrorAssert: case cudaErrorECCUncorrectable: case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaErrorMemoryAllocation) fail("CUDA: out of device memory in {} ({}:{})", what, file, line);
  if (cuda_error_is_sticky(e))
    throw DeviceFault(fmt::format("CUDA: {} failed: {} ({}) at {}:{}; the device is unusable until the process restarts",
                                  what, cudaGetErrorString(e), cudaGetErrorName(e), file, line));
  fail("CUDA: {} failed: {} ({}) at {}:{}", what, cudaGetErrorString(e), cudaGetErrorName(e), file, line);
}

inline void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) cuda_fail(e, what, file, line);
}

}  // namespace nextn::cuda

// CUDA_CHECK(cudaMalloc(...)): throws nextn::Error on failure.
#define CUDA_CHECK(expr) ::nextn::cuda::cuda_check((expr), #expr, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here.
#define CUDA_CHECK_LAUNCH(name) ::nextn::cuda::cuda_check(cudaGetLastError(), name, __FILE__, __LINE__)
