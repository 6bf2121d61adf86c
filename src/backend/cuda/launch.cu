// PDL switch for launch_kernel (launch.cuh).
#include "backend/cuda/launch.cuh"

namespace nextn::cuda {
namespace {

thread_local int t_suspended = 0;

}  // namespace

bool pdl_active() { return t_suspended == 0; }

PdlSuspend::PdlSuspend() { ++t_suspended; }
PdlSuspend::~PdlSuspend() { --t_suspended; }

}  // namespace nextn::cuda
