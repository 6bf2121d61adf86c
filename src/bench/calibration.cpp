#include "bench/calibration.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/machine.h"
#include "core/error.h"

namespace nextn::bench {
namespace fs = std::filesystem;
namespace {

uint64_t fnv1a(const std::string& s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::string CalibrationKey::file_name() const {
  const uint64_t h = fnv1a(backend + "\n" + model_dir + "\n" + model_fingerprint + "\n" + hardware);
  return fmt::format("verify-calibration-{:016x}.json", h);
}

CalibrationKey calibration_key(const std::string& model_dir, const std::string& backend) {
  CalibrationKey k;
  k.backend = backend;
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(fs::path(model_dir), ec);
  k.model_dir = ec ? model_dir : dir.string();
  uint64_t h = fnv1a(read_all(fs::path(k.model_dir) / "config.json"));
  std::vector<std::string> weights;
  for (const auto& e : fs::directory_iterator(k.model_dir, ec))
    if (e.path().extension() == ".safetensors")
      weights.push_back(e.path().filename().string() + ":" + std::to_string(e.file_size(ec)));
  std::sort(weights.begin(), weights.end());
  for (const auto& w : weights) h = fnv1a(w + "\n", h);
  k.model_fingerprint = fmt::format("{:016x}", h);
  k.hardware = hardware_id(backend);
  return k;
}

std::string calibration_dir() {
  if (const char* d = std::getenv("NEXTN_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/nextn";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/nextn";
  return ".nextn-cache";
}

std::string calibration_path(const CalibrationKey& key) { return calibration_dir() + "/" + key.file_name(); }

std::string drafter_signature(DraftKind draft, const OracleSpec& o) {
  if (draft != DraftKind::Oracle) return draft_kind_name(draft);
  if (o.accept_rate >= 0) return fmt::format("oracle rate {} seed {}", o.accept_rate, o.seed);
  return fmt::format("oracle pattern {}", o.pattern);
}

std::string write_calibration(const CalibrationKey& key, const VerifyBenchReport& r, const VerifyBenchOptions& o,
                              const std::string& commit) {
  if (!r.timed || !r.refusals.empty()) fail("internal: calibrating from an untimed or refused benchmark");
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["key"] = {{"backend", key.backend},
              {"model_dir", key.model_dir},
              {"model_fingerprint", key.model_fingerprint},
              {"hardware", key.hardware}};
  j["drafter"] = drafter_signature(o.draft, o.oracle);
  j["commit"] = commit;
  j["repeats"] = o.repeats;
  j["max_new_tokens"] = o.max_new_tokens;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const ArmResult& a : r.arms)
    rows.push_back({{"block_size", a.block_size},
                    {"verify", verify_arm_name(a.arm)},
                    {"pad_width", a.counters.pad_width},
                    {"tokens_per_second_median", a.tps.median},
                    {"acceptance", a.acceptance}});
  j["measured"] = std::move(rows);
  const std::string path = calibration_path(key);
  std::error_code ec;
  fs::create_directories(calibration_dir(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("--calibrate: cannot write {}", tmp);
    f << j.dump(2) << "\n";
    if (!f) fail("--calibrate: cannot write {}", tmp);
  }
  fs::rename(tmp, path, ec);
  if (ec) fail("--calibrate: cannot write {}: {}", path, ec.message());
  return path;
}

AutoChoice choose_auto(const CalibrationKey& key, DraftKind draft, const OracleSpec& oracle, int requested_block_size) {
  AutoChoice c;
  const std::string path = calibration_path(key);
  const std::string fallback = requested_block_size > 0 ? fmt::format("at the requested K = {}", requested_block_size)
                                                        : std::string("at the default K");
  if (!fs::exists(path)) {
    c.reason = fmt::format("no calibration for this backend, model and hardware ({} missing; run `nextn bench verify "
                           "--calibrate`): fell back to batched {}",
                           path, fallback);
    return c;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_all(path));
    const auto& k = j.at("key");
    if (k.at("backend") != key.backend || k.at("model_dir") != key.model_dir ||
        k.at("model_fingerprint") != key.model_fingerprint || k.at("hardware") != key.hardware) {
      c.reason = fmt::format("calibration {} belongs to another backend, model or hardware: fell back to batched {}",
                             path, fallback);
      return c;
    }
    const std::string want = drafter_signature(draft, oracle);
    if (j.at("drafter") != want) {
      c.reason = fmt::format("calibration {} was measured with drafter '{}', this run drafts with '{}': fell back to "
                             "batched {}",
                             path, j.at("drafter").get<std::string>(), want, fallback);
      return c;
    }
    double best = -1;
    for (const auto& row : j.at("measured")) {
      const int K = row.at("block_size").get<int>();
      if (requested_block_size > 0 && K != requested_block_size) continue;
      const double tps = row.at("tokens_per_second_median").get<double>();
      if (tps > best) {
        best = tps;
        c.arm = parse_verify_arm(row.at("verify").get<std::string>());
        c.block_size = K;
        c.pad_width = row.at("pad_width").get<int>();
      }
    }
    if (best < 0 || c.arm == VerifyArm::Auto) {
      c = AutoChoice{};
      c.reason = fmt::format("calibration {} has no measurement {}: fell back to batched", path, fallback);
      return c;
    }
    c.reason = fmt::format("calibration {}: fastest measured arm{} is {} at K = {} ({:.1f} tokens/s median)", path,
                           requested_block_size > 0 ? " at the requested K" : " and K", verify_arm_name(c.arm),
                           c.block_size, best);
    if (c.arm != VerifyArm::Pad) c.pad_width = 0;
    return c;
  } catch (const nlohmann::json::exception& e) {
    c = AutoChoice{};
    c.reason = fmt::format("calibration {} is unreadable ({}): fell back to batched {}", path, e.what(), fallback);
    return c;
  } catch (const Error& e) {
    c = AutoChoice{};
    c.reason = fmt::format("calibration {} is unreadable ({}): fell back to batched {}", path, e.what(), fallback);
    return c;
  }
}

}  // namespace nextn::bench
