// libFuzzer target: parse_qwen35_config, parse_gemma4_config and
// parse_gemma4_assistant_config must each either succeed or throw
// nextn::Error; anything else (crash, UB, other exception) is a bug.
// Input: config.json text, optionally followed by a NUL byte and the
// generation_config.json text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/config.h"
#include "io/gemma4_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string config = nul == std::string::npos ? in : in.substr(0, nul);
  const std::string gen = nul == std::string::npos ? "" : in.substr(nul + 1);
  const std::string* gen_ptr = nul == std::string::npos ? nullptr : &gen;
  try {
    nextn::parse_qwen35_config(config, "config.json", gen_ptr, "generation_config.json");
  } catch (const nextn::Error&) {
  }
  try {
    nextn::parse_gemma4_config(config, "config.json", gen_ptr, "generation_config.json");
  } catch (const nextn::Error&) {
  }
  try {
    nextn::parse_gemma4_assistant_config(config, "config.json");
  } catch (const nextn::Error&) {
  }
  return 0;
}
