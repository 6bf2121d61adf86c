#include "core/options.h"

#include "core/error.h"

namespace nextn {

Activations parse_activations(const std::string& text) {
  if (text == "bf16") return Activations::Bf16;
  if (text == "fp32") return Activations::Fp32;
  fail("--act '{}': expected bf16 or fp32", text);
}

Fp8Matmul parse_fp8_matmul(const std::string& text) {
  if (text == "w8a16") return Fp8Matmul::W8A16;
  if (text == "w8a8") return Fp8Matmul::W8A8;
  fail("--fp8-matmul '{}': expected w8a16 or w8a8", text);
}

PdlPolicy parse_pdl_policy(const std::string& text) {
  if (text == "on") return PdlPolicy::On;
  if (text == "off") return PdlPolicy::Off;
  if (text == "multi-row-off") return PdlPolicy::MultiRowOff;
  fail("--pdl '{}': expected off, on or multi-row-off", text);
}

WalkVariant parse_walk_variant(const std::string& text) {
  if (text == "flag") return WalkVariant::Flag;
  if (text == "while") return WalkVariant::While;
  fail("--walk '{}': expected flag or while", text);
}

bool parse_prefill_path(const std::string& text) {
  if (text == "gemm") return true;
  if (text == "chunked") return false;
  fail("--prefill '{}': expected gemm or chunked", text);
}

bool parse_graphs(const std::string& text) {
  if (text == "on") return true;
  if (text == "off") return false;
  fail("--graphs '{}': expected on or off", text);
}

}  // namespace nextn
