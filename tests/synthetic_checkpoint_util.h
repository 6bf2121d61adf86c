// A random-weight checkpoint of a synthetic preset written for a test
// (io/synthetic.h), with the options the make-checkpoint tests vary.
#pragma once
#include <cstdint>
#include <string>

#include "io/synthetic.h"

namespace nextn::test {

inline MakeCheckpointReport make_preset(const std::string& preset, const std::string& dir, const std::string& quant,
                                        uint64_t seed, int threads = 2, uint64_t shard_bytes = uint64_t(1) << 30) {
  MakeCheckpointOptions o;
  o.quant = quant;
  o.seed = seed;
  o.threads = threads;
  o.shard_bytes = shard_bytes;
  return make_checkpoint(*synthetic_preset(preset), o, dir);
}

}  // namespace nextn::test
