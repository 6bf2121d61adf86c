// The GPU fields of the machine record (bench/machine.h), read in-process:
// the device name from the CUDA runtime (the device the backend runs on),
// clocks, utilization, temperature and power from NVML, the library the
// driver ships (libnvidia-ml.so.1, opened at run time: a build machine
// without a driver links and runs, and the fields say why they are empty).
// Any field that cannot be read is "unavailable (<reason>)", never a guess.
#pragma once
#include <string>

namespace nextn::bench {

// CUDA device 0's name ("NVIDIA H200"), or "unavailable (<reason>)".
std::string gpu_name();
// CUDA device 0 through NVML, found by its PCI bus id:
// "<sm> MHz SM, <mem> MHz memory, <util>% util, <temp> C, <power> W", a
// reading the GPU does not give as "<what> unavailable (<reason>)" in its
// place; "unavailable (<reason>)" when NVML or the device cannot be reached.
std::string gpu_state();

}  // namespace nextn::bench
