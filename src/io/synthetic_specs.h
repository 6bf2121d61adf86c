// Private to the synthetic-checkpoint generators (synthetic.cpp for Qwen3.5,
// synthetic_gemma4.cpp for Gemma 4): what one tensor holds and the sharded
// writer both use. Every element is a function of (seed, key_name, index).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/synthetic.h"

namespace nextn {

enum class Fill {
  Uniform,      // bf16 uniform in [lo, hi)
  Packed,       // u32 random words (4-bit nibbles / 8-bit bytes uniform)
  Scales,       // bf16 per-group scale ±std/sd(q) (std in hi), key of the module; sd(q) 4.61 (4-bit), 73.9 (8-bit)
  Biases,       // bf16 -(2^bits - 1)/2 * scale of the same group
  ALogF32,      // f32 log(U(1, 16))
  DtBias,       // bf16 log(expm1(dt)), dt = exp(U(log 1e-3, log 1e-1))
  Permutation,  // i64 i -> (a i + b) mod n, a bijection of [0, n) (n = numel)
};

struct Spec {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  Fill fill = Fill::Uniform;
  float lo = 0, hi = 0;
  std::string key_name;  // RNG stream (the tensor's own name, or its module's for scales/biases)
  int bits = 4;          // Scales, Biases: the quantization's bits
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  uint64_t nbytes() const { return uint64_t(numel()) * dtype_size(dtype); }
};

// One [rows, cols] matrix of module `mod` with values of std `std_`: bf16
// uniform (bits 0), or MLX affine `bits`-bit (4 or 8) group 64 (packed words,
// bf16 scales and biases; cols must be a multiple of 64, else Error). The
// q4 bytes are those the Qwen3.5 presets have always written. stack > 0:
// `stack` such matrices in one [stack, rows, cols] tensor (MoE experts as
// mlx-lm's switch_mlp stores them; the groups run along cols as for 2-D).
void push_matrix_specs(std::vector<Spec>& v, const std::string& mod, int64_t rows, int64_t cols, float std_, int bits,
                       int64_t stack = 0);
constexpr int kSyntheticGroup = 64;

// Generates `specs` (in their order) into shards of about o.shard_bytes under
// out_dir (created; must hold no safetensors), with the index and config.json.
// `format`: the safetensors metadata format ("pt" or "mlx"). Throws Error.
MakeCheckpointReport write_synthetic(const std::vector<Spec>& specs, const std::string& config_json,
                                     const std::string& format, const MakeCheckpointOptions& o,
                                     const std::string& out_dir);

}  // namespace nextn
