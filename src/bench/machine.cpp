#include "bench/machine.h"

#include <fmt/format.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "bench/gpu_state.h"
#include "nextn_build_stamp.h"  // generated at build time (cmake/build_stamp.cmake)

namespace nextn::bench {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return trim(line);
}

std::string loadavg() {
  std::istringstream s(read_first_line("/proc/loadavg"));
  std::string a, b, c;
  s >> a >> b >> c;
  return a.empty() ? "unknown" : a + " " + b + " " + c;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return trim(line.substr(colon + 1));
    }
  return "unknown";
}

std::string command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string out;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    std::string arg = raw.substr(start, end - start);
    if (!out.empty()) out += ' ';
    if (arg.find_first_of(" \t'\"$") != std::string::npos) arg = "'" + arg + "'";
    out += arg;
    start = end + 1;
  }
  return out;
}

std::string build_flags() {
  std::string b;
#if defined(__clang__)
  b = "clang " __clang_version__;
#elif defined(__GNUC__)
  b = "gcc " __VERSION__;
#else
  b = "unknown compiler";
#endif
#if defined(__OPTIMIZE__)
  b += ", optimized";
#else
  b += ", not optimized";
#endif
#if defined(NDEBUG)
  b += ", NDEBUG";
#endif
#if defined(__SANITIZE_ADDRESS__)
  b += ", asan";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  b += ", asan";
#endif
#endif
#if defined(NEXTN_HAVE_CUDA)
  b += ", CUDA backend built";
#else
  b += ", no CUDA backend";
#endif
  return b;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string source_commit() { return NEXTN_BUILD_COMMIT; }

std::string source_commit_origin() { return NEXTN_BUILD_COMMIT_SOURCE; }

std::string hardware_id(const std::string& backend) {
  if (backend == "cuda") {
    // A name that could not be read keys no calibration written on a GPU.
    const std::string gpu = gpu_name();
    return "gpu " + (gpu.starts_with("unavailable") ? std::string("unknown") : gpu);
  }
  return fmt::format("cpu {} x {}", cpu_model(), std::thread::hardware_concurrency());
}

MachineRecord machine_begin(const std::string& backend) {
  MachineRecord m;
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) == 0) m.host = host;
  m.cpu = cpu_model();
  m.cores = int(std::thread::hardware_concurrency());
  if (backend == "cuda") {
    m.gpu = gpu_name();
    m.gpu_before = gpu_state();
  }
  m.commit = source_commit();
  m.build = build_flags();
  m.command = command_line();
  m.started = utc_now();
  m.load_before = loadavg();
  return m;
}

void machine_end(MachineRecord& m, const std::string& backend) {
  m.load_after = loadavg();
  if (backend == "cuda") m.gpu_after = gpu_state();
}

nlohmann::ordered_json machine_json(const MachineRecord& m) {
  nlohmann::ordered_json j;
  j["host"] = m.host;
  j["cpu"] = m.cpu;
  j["cores"] = m.cores;
  if (!m.gpu.empty()) j["gpu"] = m.gpu;
  j["commit"] = m.commit;
  j["commit_source"] = source_commit_origin();
  j["build"] = m.build;
  j["command"] = m.command;
  j["started"] = m.started;
  j["load_before"] = m.load_before;
  j["load_after"] = m.load_after;
  if (!m.gpu.empty()) {
    j["gpu_before"] = m.gpu_before;
    j["gpu_after"] = m.gpu_after;
  }
  return j;
}

std::string machine_text(const MachineRecord& m) {
  std::string s;
  s += fmt::format("machine: {} | {} x {} threads{}\n", m.host, m.cpu, m.cores, m.gpu.empty() ? "" : " | " + m.gpu);
  s += fmt::format("commit:  {} (stamped at build time from {})\n", m.commit, source_commit_origin());
  s += fmt::format("build:   {}\n", m.build);
  s += fmt::format("command: {}\n", m.command);
  s += fmt::format("started: {}; load average (1/5/15 min) before {}, after {}\n", m.started, m.load_before,
                   m.load_after.empty() ? "-" : m.load_after);
  if (!m.gpu.empty()) s += fmt::format("gpu state (NVML): before {}; after {}\n", m.gpu_before, m.gpu_after);
  return s;
}

}  // namespace nextn::bench
