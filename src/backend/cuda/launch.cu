// PDL switch for launch_kernel (launch.cuh).
#include "backend/cuda/launch.cuh"

#include <cstdlib>
#include <string>

namespace nextn::cuda {
namespace {

bool read_pdl_env() {
  const char* e = std::getenv("NEXTN_CUDA_PDL");
  return e == nullptr || std::string(e) != "0";
}
thread_local int t_suspended = 0;

}  // namespace

bool pdl_active() {
  static const bool enabled = read_pdl_env();
  return enabled && t_suspended == 0;
}

PdlSuspend::PdlSuspend() { ++t_suspended; }
PdlSuspend::~PdlSuspend() { --t_suspended; }

}  // namespace nextn::cuda
