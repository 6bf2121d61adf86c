#include "io/calibration_file.h"

#include "core/error.h"

namespace nextn {
namespace {

constexpr const char* kArms[] = {"batched", "walk", "pad", "fused"};

bool is_arm(const std::string& s) {
  for (const char* a : kArms)
    if (s == a) return true;
  return false;
}

void check_entry(const nlohmann::ordered_json& e, size_t i, const std::string& path) {
  auto where = [&](const char* field) { return fmt::format("{}: entries[{}].{}", path, i, field); };
  if (!e.is_object()) fail("{}: entries[{}] is not an object", path, i);
  for (const char* f : {"backend", "hardware", "checkpoint_hash", "drafter", "winner"}) {
    if (!e.contains(f) || !e[f].is_string()) fail("{} is missing or not a string", where(f));
  }
  if (!e.contains("block_size") || !e["block_size"].is_number_integer()) fail("{} is missing or not an integer", where("block_size"));
  const int64_t K = e["block_size"].get<int64_t>();
  if (K < 2 || K > 64) fail("{} = {} is outside [2, 64]", where("block_size"), K);
  const std::string winner = e["winner"].get<std::string>();
  if (!is_arm(winner)) fail("{} = '{}' is not an arm (batched, walk, pad, fused)", where("winner"), winner);
  if (!e.contains("pad_width") || !e["pad_width"].is_number_integer()) fail("{} is missing or not an integer", where("pad_width"));
  const int64_t P = e["pad_width"].get<int64_t>();
  if (winner == "pad" ? (P <= K || P > 64) : P != 0)
    fail("{} = {} does not fit winner '{}' at K = {}", where("pad_width"), P, winner, K);
  const auto it = e.find("tokens_per_second_median");
  if (it == e.end() || !it->is_object()) fail("{} is missing or not an object", where("tokens_per_second_median"));
  for (auto m = it->begin(); m != it->end(); ++m) {
    if (!is_arm(m.key())) fail("{}: '{}' is not an arm", where("tokens_per_second_median"), m.key());
    if (!m.value().is_number()) fail("{}.{} is not a number", where("tokens_per_second_median"), m.key());
  }
  if (!it->contains(winner)) fail("{} has no median for the winner '{}'", where("tokens_per_second_median"), winner);
  if (e.contains("commit") && !e["commit"].is_string()) fail("{} is not a string", where("commit"));
}

bool same_key(const nlohmann::ordered_json& e, const CalibrationEntryKey& k) {
  return e["backend"] == k.backend && e["hardware"] == k.hardware && e["checkpoint_hash"] == k.checkpoint_hash &&
         e["drafter"] == k.drafter && e["block_size"].get<int64_t>() == k.block_size;
}

}  // namespace

nlohmann::ordered_json empty_calibration_file() {
  return {{"version", 2}, {"entries", nlohmann::ordered_json::array()}};
}

nlohmann::ordered_json parse_calibration_file(const std::string& text, const std::string& path) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not JSON ({})", path, e.what());
  }
  if (!j.is_object()) fail("{}: not a JSON object", path);
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != 2)
    fail("{}: version is missing or not 2", path);
  if (!j.contains("entries") || !j["entries"].is_array()) fail("{}: entries is missing or not an array", path);
  for (size_t i = 0; i < j["entries"].size(); ++i) check_entry(j["entries"][i], i, path);
  return j;
}

std::optional<CalibratedWinner> find_calibrated_winner(const nlohmann::ordered_json& file, const CalibrationEntryKey& key) {
  for (const auto& e : file["entries"]) {
    if (!same_key(e, key)) continue;
    CalibratedWinner w;
    w.winner = e["winner"].get<std::string>();
    w.pad_width = int(e["pad_width"].get<int64_t>());
    w.tokens_per_second = e["tokens_per_second_median"][w.winner].get<double>();
    w.commit = e.value("commit", std::string("?"));
    return w;
  }
  return std::nullopt;
}

void put_calibration_entry(nlohmann::ordered_json& file, nlohmann::ordered_json entry) {
  check_entry(entry, file["entries"].size(), "internal calibration entry");
  const CalibrationEntryKey k{entry["backend"], entry["hardware"], entry["checkpoint_hash"], entry["drafter"],
                              int(entry["block_size"].get<int64_t>())};
  nlohmann::ordered_json kept = nlohmann::ordered_json::array();
  for (auto& e : file["entries"])
    if (!same_key(e, k)) kept.push_back(std::move(e));
  kept.push_back(std::move(entry));
  file["entries"] = std::move(kept);
}

}  // namespace nextn
