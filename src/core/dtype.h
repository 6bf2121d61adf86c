// Element types as safetensors names them, and the scalar conversions.
// Tensor bytes may sit at any alignment in a mapped file: always read them
// through load_* (memcpy), never through a cast pointer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace nextn {

// F8_E4M3 / F8_E5M2 are safetensors' names for torch.float8_e4m3fn / float8_e5m2
// (FP8 checkpoints); only E4M3 is decoded (fp8_e4m3_to_f32).
enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2 };

std::optional<DType> dtype_from_name(std::string_view name);  // "BF16" -> BF16
std::string_view dtype_name(DType t);
size_t dtype_size(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
// float8_e4m3fn (1 sign, 4 exponent bits biased 7, 3 mantissa bits, no
// infinities, 0x7f/0xff NaN): exact in fp32.
float fp8_e4m3_to_f32(uint8_t b);
// The float8_e4m3fn code nearest x, for |x| <= 448 (ties: the smaller
// magnitude; -0 gives code 0): writers of FP8 tensors and tests.
uint8_t f32_to_fp8_e4m3(float x);
uint16_t f32_to_f16(float f);

template <typename T>
inline T load_unaligned(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Element i of a tensor of dtype t (F32, F16, BF16 only) as float.
inline float load_float(DType t, const uint8_t* base, size_t i) {
  switch (t) {
    case DType::F32: return load_unaligned<float>(base + 4 * i);
    case DType::BF16: return bf16_to_f32(load_unaligned<uint16_t>(base + 2 * i));
    case DType::F16: return f16_to_f32(load_unaligned<uint16_t>(base + 2 * i));
    default: return 0.0f;  // callers check the dtype first
  }
}

inline bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

}  // namespace nextn
