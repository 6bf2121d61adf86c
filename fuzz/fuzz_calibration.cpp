// libFuzzer target: parse_calibration_file must either succeed or throw
// nextn::Error; a parsed file must then answer find_calibrated_winner and
// take put_calibration_entry without anything else escaping (crash, UB,
// another exception).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/calibration_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  try {
    auto file = nextn::parse_calibration_file(in, "calibration.json");
    for (const auto& e : file["entries"]) {
      const nextn::CalibrationEntryKey key{e["backend"], e["hardware"], e["checkpoint_hash"], e["drafter"],
                                           int(e["block_size"].get<int64_t>())};
      if (!nextn::find_calibrated_winner(file, key)) __builtin_trap();  // every parsed entry is findable
    }
    nextn::put_calibration_entry(file, {{"backend", "cpu"},
                                        {"hardware", "h"},
                                        {"checkpoint_hash", "0"},
                                        {"drafter", "mtp"},
                                        {"block_size", 3},
                                        {"winner", "walk"},
                                        {"pad_width", 0},
                                        {"tokens_per_second_median", {{"walk", 1.0}}}});
    if (!nextn::find_calibrated_winner(file, {"cpu", "h", "0", "mtp", 3})) __builtin_trap();
  } catch (const nextn::Error&) {
  }
  return 0;
}
