#include "core/dtype.h"

#include <array>
#include <cmath>
#include <cstring>
#include <utility>

namespace nextn {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 15> kInfo{{
    {DType::F64, "F64", 8},  {DType::F32, "F32", 4},   {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2},
    {DType::I64, "I64", 8},  {DType::I32, "I32", 4},   {DType::I16, "I16", 2}, {DType::I8, "I8", 1},
    {DType::U64, "U64", 8},  {DType::U32, "U32", 4},   {DType::U16, "U16", 2}, {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1}, {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
}};
}  // namespace

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}

std::string_view dtype_name(DType t) {
  for (const auto& i : kInfo)
    if (i.type == t) return i.name;
  return "?";
}

size_t dtype_size(DType t) {
  for (const auto& i : kInfo)
    if (i.type == t) return i.size;
  return 0;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float fp8_e4m3_to_f32(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, man = b & 0x7u;
  if (exp == 0xfu && man == 0x7u) return std::nanf("");
  float v;
  if (exp == 0) {
    v = std::ldexp(float(man), -9);  // subnormal: man * 2^-6 * 2^-3
  } else {
    const uint32_t u = (exp + 127 - 7) << 23 | man << 20;
    std::memcpy(&v, &u, 4);
  }
  return sign ? -v : v;
}

uint8_t f32_to_fp8_e4m3(float x) {
  const float a = std::fabs(x);
  uint8_t best = 0;
  for (int c = 1; c < 0x7f; ++c)
    if (std::fabs(fp8_e4m3_to_f32(uint8_t(c)) - a) < std::fabs(fp8_e4m3_to_f32(best) - a)) best = uint8_t(c);
  return uint8_t((x < 0 ? 0x80 : 0) | best);
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf (rounding included)
  if (a < 0x38800000u) {  // subnormal or zero in f16
    float af;
    std::memcpy(&af, &a, 4);
    // Scale so the f16 subnormal unit (2^-24) becomes 1, then round to nearest even.
    float scaled = af * 16777216.0f;
    uint32_t m = uint32_t(std::nearbyint(scaled));
    return uint16_t(sign | m);
  }
  uint32_t e = ((a >> 23) - 127 + 15);
  uint32_t man = a & 0x7fffffu;
  uint32_t r = (e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return uint16_t(sign | r);
}

}  // namespace nextn
