// Private to the synthetic-checkpoint generators (synthetic.cpp for Qwen3.5,
// synthetic_gemma4.cpp for Gemma 4, synthetic_hf_quant.cpp for the
// transformers formats): what one tensor holds and the sharded writer both
// use. Every element is a function of (seed, key_name, index).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/synthetic.h"
#include "io/tensor_parallel_plan.h"

namespace nextn {

enum class Fill {
  Uniform,      // bf16 uniform in [lo, hi)
  Packed,       // u32 random words (4-bit nibbles / 8-bit bytes uniform)
  Scales,       // bf16 per-group scale ±std/sd(q) (std in hi), key of the module; sd(q) 4.61 (4-bit), 73.9 (8-bit)
  Biases,       // bf16 -(2^bits - 1)/2 * scale of the same group
  ALogF32,      // f32 log(U(1, 16))
  DtBias,       // bf16 log(expm1(dt)), dt = exp(U(log 1e-3, log 1e-1))
  Permutation,  // i64 i -> (a i + b) mod n, a bijection of [0, n) (n = numel)
  // transformers' formats (synthetic_hf_quant.cpp); std in hi.
  Fp8Codes,     // F8_E4M3 codes, symmetric about 0, no NaN
  Fp8ScaleInv,  // f32 per-block weight_scale_inv: std / sd(codes), times U(0.8, 1.2)
  GptqQweight,  // i32 words of 8 nibbles in [1, 15] (q - 8 symmetric about 0)
  GptqZeros,    // i32 words of 8 nibbles 7 (zero 8 stored minus one: sym)
  GptqScales,   // f16 per (group, out): std / sd(q - 8), times U(0.8, 1.2)
  GroupIndex,   // i32 g_idx: i / group (no activation order)
};

// The part of a stored tensor that a tensor-parallel rank holds: the
// rank's `split` ranges (heads of `unit` elements) of the logical axis
// stored as dimension `axis`, each stored index of which covers `per`
// logical elements (packed words, quantization groups, fp8 blocks).
struct SpecSplit {
  TensorParallelSplit split = TensorParallelSplit::Replicated;
  int64_t unit = 1;
  int axis = 0;
  int64_t per = 1;
};

// How a rank splits a logical [rows, cols] matrix: by `split` ranges of its
// rows (outputs) or, with `cols`, of its columns (inputs).
struct MatrixSplit {
  TensorParallelSplit split = TensorParallelSplit::Replicated;
  int64_t unit = 1;
  bool cols = false;
};

struct Spec {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  Fill fill = Fill::Uniform;
  float lo = 0, hi = 0;
  std::string key_name;  // RNG stream (the tensor's own name, or its module's for scales/biases)
  int bits = 4;          // Scales, Biases: the quantization's bits
  int64_t group = 0;     // GroupIndex: the group size
  SpecSplit tp{};        // what a tensor-parallel rank holds (replicated unless set)
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
// `split`: how a tensor-parallel rank cuts it (every stacked matrix alike).
void push_matrix_specs(std::vector<Spec>& v, const std::string& mod, int64_t rows, int64_t cols, float std_, int bits,
                       int64_t stack = 0, MatrixSplit split = {});
constexpr int kSyntheticGroup = 64;

// transformers' formats make-checkpoint writes beside MLX q4 (--quant fp8,
// gptq4; docs/formats.md "Synthetic checkpoints in these formats").
enum class HfSyntheticQuant { Fp8, Gptq4 };
std::optional<HfSyntheticQuant> hf_synthetic_quant(const std::string& quant);
constexpr int64_t kFp8Block = 128;   // weight_block_size [128, 128], as Qwen's FP8 releases
constexpr int64_t kGptqGroup = 128;  // group_size, unless a preset's inputs need a smaller one

// One [rows, cols] Linear of module `mod` in format q with dequantized std
// `std_`: fp8 (weight F8_E4M3 + weight_scale_inv f32 per 128x128 block) or
// gptq 4-bit symmetric (qweight, qzeros, fp16 scales, trivial g_idx) with
// `group` inputs per group (must divide cols; rows a multiple of 8; else Error).
void push_hf_quant_matrix_specs(std::vector<Spec>& v, const std::string& mod, int64_t rows, int64_t cols, float std_,
                                HfSyntheticQuant q, int64_t group, MatrixSplit split = {});

// `split` on a stored tensor whose logical rows are its dimension row_axis
// (-1: it has none, so a rank holds all of it when the rows are split) and
// whose columns are col_axis, each index covering row_per / col_per
// logical elements.
SpecSplit stored_split(const MatrixSplit& split, int row_axis, int64_t row_per, int col_axis, int64_t col_per);

// Every tensor of a Qwen3.5 preset's checkpoint, sorted by name (what
// make_checkpoint writes, in that order).
std::vector<Spec> qwen35_synthetic_specs(const SyntheticPreset& p, const std::string& quant);

// The bytes rank s holds of each tensor in `specs`, summed: a replicated
// tensor whole, a split one the stored indices its ranges touch along the
// split axis (a range that cuts a quantization group or an fp8 block
// counts the whole group or block, which both neighbouring ranks then hold).
// `c`: the whole model's config. At degree 1, every tensor's nbytes.
uint64_t rank_tensor_bytes(const std::vector<Spec>& specs, const Qwen35Config& c, const TensorParallelShard& s);
// Fills [begin, end) of a tensor with one of the formats' fills; false (and
// nothing written) for any other fill. `key`: the spec's RNG stream.
bool fill_hf_quant_range(const Spec& s, uint64_t key, int64_t begin, int64_t end, uint8_t* out);
// config.json's quantization_config for q; `not_converted`: the Linear
// modules left bf16 (fp8's modules_to_not_convert; gptq lists none).
nlohmann::ordered_json hf_quantization_config(HfSyntheticQuant q, int64_t group,
                                              const std::vector<std::string>& not_converted);

// Generates `specs` (in their order) into shards of about o.shard_bytes under
// out_dir (created; must hold no safetensors), with the index and config.json.
// `format`: the safetensors metadata format ("pt" or "mlx"). Throws Error.
MakeCheckpointReport write_synthetic(const std::vector<Spec>& specs, const std::string& config_json,
                                     const std::string& format, const MakeCheckpointOptions& o,
                                     const std::string& out_dir);

}  // namespace nextn
