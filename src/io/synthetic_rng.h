// Private to the synthetic-checkpoint generators: the counter-based RNG that
// makes every element a function of (seed, stream name, index) alone, so the
// bytes do not depend on the thread count or the shard size.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace nextn::synthetic_rng {

inline uint64_t mix64(uint64_t z) {  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t stream_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  return mix64(mix64(seed + 0x9E3779B97F4A7C15ull) ^ h);
}
inline uint64_t draw(uint64_t key, uint64_t i) { return mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull); }
inline float unit(uint64_t r) { return float(r >> 40) * (1.0f / 16777216.0f); }  // [0, 1), 24 bits

inline uint16_t to_bf16(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace nextn::synthetic_rng
