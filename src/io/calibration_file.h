// The calibration file's format (what it is for: bench/calibration.h):
//   {"version": 2, "entries": [
//     {"backend": "cuda", "hardware": "gpu NVIDIA H200", "checkpoint_hash": "0123456789abcdef",
//      "drafter": "oracle rate 0.8 seed 1", "block_size": 4, "winner": "batched", "pad_width": 0,
//      "tokens_per_second_median": {"batched": 250.5, "walk": 238.6, ...},
//      "model_dir": "...", "commit": "...", "repeats": 5, "max_new_tokens": 48}, ...]}
// Parsing checks every field auto reads; anything malformed is an Error
// naming the file, the entry and the field.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace nextn {

struct CalibrationEntryKey {
  std::string backend, hardware, checkpoint_hash, drafter;
  int block_size = 0;
};

struct CalibratedWinner {
  std::string winner;  // batched | walk | pad | fused
  int pad_width = 0;   // pad: the width measured
  double tokens_per_second = 0;
  std::string commit;
};

// Throws Error (naming `path`) unless `text` is a calibration file.
nlohmann::ordered_json parse_calibration_file(const std::string& text, const std::string& path);
// An empty file object ({"version": 2, "entries": []}).
nlohmann::ordered_json empty_calibration_file();
// The entry for `key` in a parsed file, if any.
std::optional<CalibratedWinner> find_calibrated_winner(const nlohmann::ordered_json& file, const CalibrationEntryKey& key);
// Replaces (or adds) the entry with the key of `entry` (an object with the
// fields above).
void put_calibration_entry(nlohmann::ordered_json& file, nlohmann::ordered_json entry);

}  // namespace nextn
