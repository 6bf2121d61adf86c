// The machine record every benchmark prints with its numbers: where and on
// what the numbers were taken, and how loaded the machine was.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nextn::bench {

struct MachineRecord {
  std::string host;
  std::string cpu;   // /proc/cpuinfo model name
  int cores = 0;     // hardware threads
  std::string gpu;   // backend cuda: CUDA device 0's name, or "unavailable (reason)" (empty otherwise)
  std::string commit;
  std::string build;    // compiler, optimisation, sanitizers, CUDA
  std::string command;  // the command line, as run
  std::string started;  // UTC, ISO 8601
  std::string load_before, load_after;  // /proc/loadavg: 1, 5, 15 min
  std::string gpu_before, gpu_after;    // cuda: NVML clocks, utilization, temperature, power (bench/gpu_state.h)
};

// The record at the start of a benchmark (load_after/gpu_after empty).
MachineRecord machine_begin(const std::string& backend);
// Fills the "after" fields.
void machine_end(MachineRecord& m, const std::string& backend);

// The source commit stamped into the binary at build time
// (cmake/build_stamp.cmake): `git rev-parse HEAD` of the source tree, with
// "-dirty" when tracked files differed; without git, the first line of the
// file COMMIT at the source root; else "unknown". Nothing runs git at run time.
std::string source_commit();
// Where the stamp came from: "git", "file COMMIT" or "none (no git at build time)".
std::string source_commit_origin();
// A stable description of the hardware a calibration belongs to.
std::string hardware_id(const std::string& backend);

nlohmann::ordered_json machine_json(const MachineRecord& m);
std::string machine_text(const MachineRecord& m);  // a few "key: value" lines

}  // namespace nextn::bench
