// libFuzzer target: parse_qwen35_config must either succeed or throw
// nextn::Error; anything else (crash, UB, other exception) is a bug.
// Input: config.json text, optionally followed by a NUL byte and the
// generation_config.json text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  try {
    if (nul == std::string::npos) {
      nextn::parse_qwen35_config(in, "config.json");
    } else {
      const std::string gen = in.substr(nul + 1);
      nextn::parse_qwen35_config(in.substr(0, nul), "config.json", &gen, "generation_config.json");
    }
  } catch (const nextn::Error&) {
  }
  return 0;
}
