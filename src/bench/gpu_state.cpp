#include "bench/gpu_state.h"

#include <fmt/format.h>

#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#if __has_include(<nvml.h>)
#include <nvml.h>
#define NEXTN_HAVE_NVML_H 1
#endif
#endif

namespace nextn::bench {

#ifndef NEXTN_HAVE_CUDA

std::string gpu_name() { return "unavailable (built without the CUDA backend)"; }
std::string gpu_state() { return "unavailable (built without the CUDA backend)"; }

#else

namespace {

std::string unavailable(const std::string& why) { return "unavailable (" + why + ")"; }

// The part of NVML's C interface read here (stable ABI, versioned symbols);
// where the toolkit ships nvml.h, the declarations are checked against it
// below. Not every toolkit carries the header, and the library is opened at
// run time either way.
namespace nvml {
using Return = int;  // nvmlReturn_t: 0 is NVML_SUCCESS
using Device = struct DeviceOpaque*;
struct Utilization {
  unsigned gpu, memory;  // percent of the last sample period
};
constexpr int kClockSm = 1, kClockMem = 2, kTemperatureGpu = 0;
using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using ByPciBusIdFn = Return (*)(const char*, Device*);
using ClockFn = Return (*)(Device, int, unsigned*);
using UtilizationFn = Return (*)(Device, Utilization*);
using TemperatureFn = Return (*)(Device, int, unsigned*);
using PowerFn = Return (*)(Device, unsigned*);  // milliwatts
}  // namespace nvml

#ifdef NEXTN_HAVE_NVML_H
static_assert(NVML_SUCCESS == 0 && NVML_CLOCK_SM == nvml::kClockSm && NVML_CLOCK_MEM == nvml::kClockMem &&
              NVML_TEMPERATURE_GPU == nvml::kTemperatureGpu);
static_assert(sizeof(nvmlUtilization_t) == sizeof(nvml::Utilization) && sizeof(nvmlDevice_t) == sizeof(nvml::Device));
#endif

// Opens libnvidia-ml.so.1 for one reading and closes it again.
class Nvml {
 public:
  Nvml() {
    lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      const char* e = ::dlerror();
      error_ = fmt::format("NVML: cannot open libnvidia-ml.so.1: {}", e ? e : "unknown dlopen error");
      return;
    }
    const auto init = sym<nvml::InitFn>("nvmlInit_v2");
    error_string_ = sym<nvml::ErrorStringFn>("nvmlErrorString");
    if (!error_.empty()) return;
    if (const nvml::Return r = init(); r != 0) {
      error_ = fmt::format("NVML: nvmlInit failed: {}", error_string_(r));
      return;
    }
    initialized_ = true;
  }
  ~Nvml() {
    if (initialized_)
      if (const auto shutdown = sym<nvml::ShutdownFn>("nvmlShutdown")) shutdown();
    if (lib_) ::dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  const std::string& error() const { return error_; }

  // The state line for the device at `pci_bus_id`, or unavailable(...).
  std::string state(const char* pci_bus_id) {
    const auto by_bus = sym<nvml::ByPciBusIdFn>("nvmlDeviceGetHandleByPciBusId_v2");
    const auto clock = sym<nvml::ClockFn>("nvmlDeviceGetClockInfo");
    const auto util = sym<nvml::UtilizationFn>("nvmlDeviceGetUtilizationRates");
    const auto temp = sym<nvml::TemperatureFn>("nvmlDeviceGetTemperature");
    const auto power = sym<nvml::PowerFn>("nvmlDeviceGetPowerUsage");
    if (!error_.empty()) return unavailable(error_);
    nvml::Device dev = nullptr;
    if (const nvml::Return r = by_bus(pci_bus_id, &dev); r != 0)
      return unavailable(fmt::format("NVML: nvmlDeviceGetHandleByPciBusId failed: {}", error_string_(r)));
    // Each reading on its own: a GPU that does not report one (e.g. power
    // under some virtualisations) still gives the others.
    auto field = [&](nvml::Return r, const std::string& value, const char* what) {
      return r == 0 ? value : fmt::format("{} unavailable ({})", what, error_string_(r));
    };
    unsigned sm = 0, mem = 0, temp_c = 0, mw = 0;
    nvml::Utilization u{};
    const nvml::Return r_sm = clock(dev, nvml::kClockSm, &sm), r_mem = clock(dev, nvml::kClockMem, &mem);
    const nvml::Return r_util = util(dev, &u), r_temp = temp(dev, nvml::kTemperatureGpu, &temp_c);
    const nvml::Return r_power = power(dev, &mw);
    return fmt::format("{}, {}, {}, {}, {}", field(r_sm, fmt::format("{} MHz SM", sm), "SM clock"),
                       field(r_mem, fmt::format("{} MHz memory", mem), "memory clock"),
                       field(r_util, fmt::format("{}% util", u.gpu), "utilization"),
                       field(r_temp, fmt::format("{} C", temp_c), "temperature"),
                       field(r_power, fmt::format("{:.1f} W", double(mw) / 1000.0), "power"));
  }

 private:
  template <typename F>
  F sym(const char* name) {
    if (lib_ == nullptr) return nullptr;
    void* p = ::dlsym(lib_, name);
    if (p == nullptr && error_.empty()) error_ = fmt::format("NVML: libnvidia-ml.so.1 has no {}", name);
    return reinterpret_cast<F>(p);
  }

  void* lib_ = nullptr;
  bool initialized_ = false;
  nvml::ErrorStringFn error_string_ = nullptr;
  std::string error_;
};

// CUDA device 0's PCI bus id (NVML and CUDA number devices differently).
std::string device0_bus_id(std::string* why) {
  char bus[32] = {0};
  const cudaError_t e = cudaDeviceGetPCIBusId(bus, int(sizeof bus), 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    *why = fmt::format("no CUDA device: {}", cudaGetErrorString(e));
    return "";
  }
  return bus;
}

}  // namespace

std::string gpu_name() {
  int n = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return unavailable(e != cudaSuccess ? fmt::format("no CUDA device: {}", cudaGetErrorString(e))
                                        : std::string("no CUDA device"));
  }
  cudaDeviceProp p{};
  if (const cudaError_t e = cudaGetDeviceProperties(&p, 0); e != cudaSuccess) {
    (void)cudaGetLastError();
    return unavailable(fmt::format("cudaGetDeviceProperties: {}", cudaGetErrorString(e)));
  }
  return p.name;
}

std::string gpu_state() {
  std::string why;
  const std::string bus = device0_bus_id(&why);
  if (bus.empty()) return unavailable(why);
  Nvml nvml;
  if (!nvml.error().empty()) return unavailable(nvml.error());
  return nvml.state(bus.c_str());
}

#endif  // NEXTN_HAVE_CUDA

}  // namespace nextn::bench
