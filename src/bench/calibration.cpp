#include "bench/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/machine.h"
#include "core/error.h"
#include "io/calibration_file.h"
#include "bench/recorded_winners.h"

namespace nextn::bench {
namespace fs = std::filesystem;
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // as the safetensors reader allows

uint64_t fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}
uint64_t fnv1a(const std::string& s, uint64_t h) { return fnv1a(s.data(), s.size(), h); }

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("{}: cannot read", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The 8-byte little-endian length and the JSON header of one safetensors file.
std::string safetensors_header_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  unsigned char len[8];
  if (!f.read(reinterpret_cast<char*>(len), 8)) fail("{}: too short for a safetensors header", p.string());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeaderBytes) fail("{}: safetensors header length {} exceeds {}", p.string(), n, kMaxHeaderBytes);
  std::string bytes(reinterpret_cast<char*>(len), 8);
  bytes.resize(8 + size_t(n));
  if (!f.read(bytes.data() + 8, std::streamsize(n))) fail("{}: safetensors header truncated", p.string());
  return bytes;
}

AutoChoice from_record(const std::string& backend, int K, const std::string& why_not_calibration) {
  // The row for K, else the nearest measured K below it, else the smallest above.
  const RecordedWinner *exact = nullptr, *below = nullptr, *above = nullptr;
  for (const RecordedWinner& w : kRecordedWinners) {
    if (backend != w.backend) continue;
    if (w.block_size == K)
      exact = &w;
    else if (w.block_size < K && (below == nullptr || w.block_size > below->block_size))
      below = &w;
    else if (w.block_size > K && (above == nullptr || w.block_size < above->block_size))
      above = &w;
  }
  const RecordedWinner* best = exact ? exact : below ? below : above;
  AutoChoice c;
  c.source = "record";
  if (best == nullptr) {
    c.reason = fmt::format("{}; no recorded winner for backend {}: batched", why_not_calibration, backend);
    return c;
  }
  c.arm = best->arm;
  c.reason = fmt::format("{}; recorded winner for {} at K = {}{}: {} ({})", why_not_calibration, backend,
                         best->block_size, best->block_size == K ? "" : fmt::format(" (nearest to K = {})", K),
                         verify_arm_name(best->arm), best->record);
  return c;
}

}  // namespace

std::string checkpoint_hash(const std::string& model_dir) {
  const fs::path dir(model_dir);
  uint64_t h = fnv1a(read_all(dir / "config.json"), kFnvOffset);
  if (fs::exists(dir / "model.safetensors.index.json"))
    h = fnv1a(read_all(dir / "model.safetensors.index.json"), fnv1a("index\n", h));
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  if (ec) fail("{}: cannot list the directory: {}", model_dir, ec.message());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    h = fnv1a(f.filename().string() + "\n", h);
    h = fnv1a(safetensors_header_bytes(f), h);
  }
  return fmt::format("{:016x}", h);
}

CalibrationKey calibration_key(const std::string& model_dir, const std::string& backend) {
  return CalibrationKey{backend, hardware_id(backend), checkpoint_hash(model_dir)};
}

std::string calibration_path() {
  if (const char* p = std::getenv("NEXTN_CALIBRATION"); p && *p) return p;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/nextn/calibration.json";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/nextn/calibration.json";
  return ".nextn-calibration.json";
}

std::string drafter_signature(DraftKind draft, const OracleSpec& o, DraftCost cost) {
  if (draft != DraftKind::Oracle) return draft_kind_name(draft);
  std::string s = o.accept_rate >= 0 ? fmt::format("oracle rate {} seed {}", o.accept_rate, o.seed)
                                     : fmt::format("oracle pattern {}", o.pattern);
  if (cost == DraftCost::Mtp) s += " cost mtp";
  return s;
}

std::string write_calibration(const CalibrationKey& key, const std::string& model_dir, const VerifyBenchReport& r,
                              const VerifyBenchOptions& o, const std::string& commit) {
  if (!r.timed || !r.refusals.empty()) fail("internal: calibrating from an untimed or refused benchmark");
  const std::string path = calibration_path();
  nlohmann::ordered_json file = empty_calibration_file();
  if (fs::exists(path)) {
    try {
      file = parse_calibration_file(read_all(path), path);
    } catch (const Error& e) {
      fail("--calibrate: {} (move it away or set NEXTN_CALIBRATION)", e.what());
    }
  }
  const std::string drafter = drafter_signature(o.draft, o.oracle, o.draft_cost);
  for (int K : o.block_sizes) {
    nlohmann::ordered_json medians = nlohmann::ordered_json::object();
    const ArmResult* best = nullptr;
    for (const ArmResult& a : r.arms) {
      if (a.block_size != K) continue;
      medians[verify_arm_name(a.arm)] = a.tps.median;
      if (best == nullptr || a.tps.median > best->tps.median) best = &a;
    }
    if (best == nullptr) continue;
    put_calibration_entry(file, {{"backend", key.backend},
                                 {"hardware", key.hardware},
                                 {"checkpoint_hash", key.checkpoint_hash},
                                 {"drafter", drafter},
                                 {"block_size", K},
                                 {"winner", verify_arm_name(best->arm)},
                                 {"pad_width", best->arm == VerifyArm::Pad ? best->counters.pad_width : 0},
                                 {"tokens_per_second_median", medians},
                                 {"model_dir", model_dir},
                                 {"commit", commit},
                                 {"repeats", o.repeats},
                                 {"max_new_tokens", o.max_new_tokens}});
  }
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("--calibrate: cannot write {}", tmp);
    f << file.dump(2) << "\n";
    if (!f) fail("--calibrate: cannot write {}", tmp);
  }
  fs::rename(tmp, path, ec);
  if (ec) fail("--calibrate: cannot write {}: {}", path, ec.message());
  return path;
}

AutoChoice choose_auto(const CalibrationKey& key, const std::string& drafter, int K) {
  const std::string path = calibration_path();
  std::string why;
  if (!fs::exists(path)) {
    why = fmt::format("no calibration file ({}; `nextn bench verify --calibrate` writes it)", path);
  } else {
    try {
      const auto file = parse_calibration_file(read_all(path), path);
      const auto w = find_calibrated_winner(file, {key.backend, key.hardware, key.checkpoint_hash, drafter, K});
      if (w) {
        AutoChoice c;
        c.source = "calibration";
        c.arm = parse_verify_arm(w->winner);
        c.pad_width = w->pad_width;
        c.reason = fmt::format("calibration {} (backend {}, {}, checkpoint {}, drafter '{}', K = {}): {} fastest at "
                               "{:.1f} tokens/s median, commit {}",
                               path, key.backend, key.hardware, key.checkpoint_hash, drafter, K, w->winner,
                               w->tokens_per_second, w->commit);
        return c;
      }
      why = fmt::format("calibration {} has no entry for backend {}, {}, checkpoint {}, drafter '{}', K = {}", path,
                        key.backend, key.hardware, key.checkpoint_hash, drafter, K);
    } catch (const Error& e) {
      why = fmt::format("calibration file unreadable ({})", e.what());
    }
  }
  return from_record(key.backend, K, why);
}

}  // namespace nextn::bench
