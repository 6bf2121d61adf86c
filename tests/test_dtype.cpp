// dtype names/sizes and the bf16/f16 <-> f32 conversions: exhaustive round
// trips over all 16-bit patterns, known values, rounding ties, subnormals,
// inf and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/dtype.h"

namespace nextn {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(DType, NamesAndSizes) {
  struct Case {
    const char* name;
    DType t;
    size_t size;
  };
  const Case cases[] = {{"F64", DType::F64, 8},  {"F32", DType::F32, 4}, {"F16", DType::F16, 2},  {"BF16", DType::BF16, 2},
                        {"I64", DType::I64, 8},  {"I32", DType::I32, 4}, {"I16", DType::I16, 2},  {"I8", DType::I8, 1},
                        {"U64", DType::U64, 8},  {"U32", DType::U32, 4}, {"U16", DType::U16, 2},  {"U8", DType::U8, 1},
                        {"BOOL", DType::BOOL, 1}, {"F8_E4M3", DType::F8_E4M3, 1}, {"F8_E5M2", DType::F8_E5M2, 1}};
  for (const auto& c : cases) {
    auto t = dtype_from_name(c.name);
    ASSERT_TRUE(t.has_value()) << c.name;
    EXPECT_EQ(*t, c.t);
    EXPECT_EQ(dtype_name(c.t), c.name);
    EXPECT_EQ(dtype_size(c.t), c.size) << c.name;
  }
  EXPECT_FALSE(dtype_from_name("bf16"));  // names are case-sensitive, as safetensors writes them
  EXPECT_FALSE(dtype_from_name(""));
  EXPECT_FALSE(dtype_from_name("F8_E4M3FN"));  // safetensors' name is F8_E4M3
  EXPECT_FALSE(dtype_from_name("F32 "));
  EXPECT_TRUE(is_float_dtype(DType::BF16));
  EXPECT_FALSE(is_float_dtype(DType::F64));
  EXPECT_FALSE(is_float_dtype(DType::F8_E4M3));  // only through a scale (io/hf_quant)
}

// Every float8_e4m3fn code against its definition (torch.float8_e4m3fn).
TEST(DType, Fp8E4m3DecodesEveryCode) {
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> 3) & 15, m = b & 7;
    const float v = fp8_e4m3_to_f32(uint8_t(b));
    if (e == 15 && m == 7) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    const double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
    EXPECT_EQ(double(v), (b & 0x80) ? -mag : mag) << b;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);  // the largest finite value
}

TEST(DType, Bf16KnownValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  EXPECT_EQ(bf16_to_f32(0x7f7f), from_bits(0x7f7f0000));  // max finite
  // Ties go to even: 1 + 2^-8 is halfway between 0x3f80 and 0x3f81.
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f807fff)), 0x3f80);  // below it
  // Largest float rounds up to inf.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  // Subnormals are kept (bf16 shares f32's exponent range).
  EXPECT_EQ(f32_to_bf16(from_bits(0x00010000)), 0x0001);
  EXPECT_EQ(bf16_to_f32(0x0001), from_bits(0x00010000));
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);  // rounds to zero
}

TEST(DType, Bf16NaNStaysNaN) {
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  // A NaN whose payload is only in the low 16 bits must not become inf.
  uint16_t h = f32_to_bf16(from_bits(0x7f800001));
  EXPECT_TRUE(std::isnan(bf16_to_f32(h))) << std::hex << h;
  h = f32_to_bf16(from_bits(0xff800001));
  EXPECT_TRUE(std::isnan(bf16_to_f32(h)));
  EXPECT_EQ(h & 0x8000, 0x8000);  // sign kept
}

TEST(DType, Bf16ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_to_f32(uint16_t(h));
    EXPECT_EQ(bits(f), h << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f)))) << h;
    } else {
      ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
    }
  }
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(0.5f), 0x3800);
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);  // max finite
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);  // below the halfway point to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // halfway: rounds (to even) up to inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isinf(f16_to_f32(0xfc00)) && f16_to_f32(0xfc00) < 0);
  // Ties to even in the normal range: 1 + 2^-11 is halfway between 0x3c00 and 0x3c01.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
}

TEST(DType, F16Subnormals) {
  const float unit = std::ldexp(1.0f, -24);  // smallest f16 subnormal
  EXPECT_EQ(f16_to_f32(0x0001), unit);
  EXPECT_EQ(f16_to_f32(0x8001), -unit);
  EXPECT_EQ(f16_to_f32(0x03ff), 1023 * unit);  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f32_to_f16(unit), 0x0001);
  EXPECT_EQ(f32_to_f16(1023 * unit), 0x03ff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(f32_to_f16(0.5f * unit), 0x0000);   // tie to even: 0
  EXPECT_EQ(f32_to_f16(1.5f * unit), 0x0002);   // tie to even: 2
  EXPECT_EQ(f32_to_f16(0.75f * unit), 0x0001);  // above the tie
  EXPECT_EQ(f32_to_f16(0.25f * unit), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.25f * unit), 0x8000);  // underflow keeps the sign
  EXPECT_EQ(f32_to_f16(1023.5f * unit), 0x0400);  // rounds up into the normal range
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(DType, F16NaN) {
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0xfc01)));
  uint16_t h = f32_to_f16(NAN);
  EXPECT_EQ(h & 0x7c00, 0x7c00);
  EXPECT_NE(h & 0x03ff, 0);
  // A NaN with payload only in bits f16 drops must stay NaN.
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(from_bits(0x7f800001)))));
  EXPECT_EQ(f32_to_f16(from_bits(0xffc00000)) & 0x8000, 0x8000);
}

TEST(DType, F16ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      EXPECT_EQ((h & 0x7c00), 0x7c00u);
    } else {
      ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
    }
  }
}

// f32 -> f16 must be correctly rounded: compare against the halfway points
// between neighbouring f16 values, computed exactly in double.
TEST(DType, F16RoundingMatchesReference) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    // Bias towards f16's range: exponents near 0.
    uint32_t u = any(rng);
    if (i % 2) u = (u & 0x807fffffu) | (uint32_t(100 + (u >> 23) % 50) << 23);
    float f = from_bits(u);
    if (std::isnan(f)) continue;
    uint16_t h = f32_to_f16(f);
    double got = f16_to_f32(h);
    double x = f;
    if (std::isinf(got)) {
      ASSERT_GE(std::fabs(x), 65520.0) << f;
      continue;
    }
    // Distance to the neighbours on each side must not be smaller.
    uint16_t mag = h & 0x7fff;
    double err = std::fabs(got - x);
    if (mag < 0x7bff) {
      double up = f16_to_f32(uint16_t((h & 0x8000) | (mag + 1)));
      ASSERT_LE(err, std::fabs(up - x)) << f;
      if (err == std::fabs(up - x)) {
        ASSERT_EQ(h & 1, 0) << "tie not to even at " << f;
      }
    }
    if (mag > 0) {
      double down = f16_to_f32(uint16_t((h & 0x8000) | (mag - 1)));
      ASSERT_LE(err, std::fabs(down - x)) << f;
      if (err == std::fabs(down - x)) {
        ASSERT_EQ(h & 1, 0) << "tie not to even at " << f;
      }
    }
  }
}

TEST(DType, LoadFloatMisaligned) {
  alignas(8) uint8_t buf[16] = {};
  float v = -1.25f;
  std::memcpy(buf + 1, &v, 4);
  EXPECT_EQ(load_float(DType::F32, buf + 1, 0), -1.25f);
  uint16_t b = f32_to_bf16(3.0f), h = f32_to_f16(0.5f);
  std::memcpy(buf + 7, &b, 2);
  std::memcpy(buf + 9, &h, 2);
  EXPECT_EQ(load_float(DType::BF16, buf + 7, 0), 3.0f);
  EXPECT_EQ(load_float(DType::F16, buf + 7, 1), 0.5f);
  EXPECT_EQ(load_unaligned<uint16_t>(buf + 7), b);
}

}  // namespace
}  // namespace nextn
