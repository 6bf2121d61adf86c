// libFuzzer target: parse_safetensors_header on an arbitrary file image must
// either succeed or throw nextn::Error; a crash, sanitizer report or any
// other exception is a bug. A header that parses must also describe spans
// that lie inside the image, which we touch to let ASan check it.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    nextn::SafetensorsHeader h = nextn::parse_safetensors_header(data, size, "fuzz.safetensors");
    volatile uint8_t sink = 0;
    for (const auto& t : h.tensors)
      if (t.end > t.begin) sink = sink ^ data[h.data_offset + t.begin] ^ data[h.data_offset + t.end - 1];
    (void)sink;
  } catch (const nextn::Error&) {
  }
  return 0;
}
