// MLX affine quantization: the quantizer (bit for bit mlx.core.quantize,
// mode "affine", CPU) and `nextn quantize`, which rewrites a Qwen3.5
// checkpoint in the mlx-community layout, or a Gemma 4 target / assistant
// under its stored names. See docs/config.md §4 and docs/gemma4.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/config.h"

namespace nextn {

// Quantizes a row-major [rows, cols] matrix, groups of `group` consecutive
// elements of a row (cols % group == 0; bits 4 or 8; group 32, 64 or 128):
//   packed  [rows, cols*bits/32]  element c of a row in bits [(c % (32/bits))*bits, +bits)
//                                 of word c / (32/bits) (low nibble / low byte first)
//   scales, biases [rows, cols/group]
// Per group, as MLX: w_min, w_max; scale = max((w_max - w_min) / (2^bits - 1), 1e-7),
// negated unless |w_min| > |w_max|; edge = the larger-magnitude end; if
// q0 = rint(edge / scale) != 0 then scale = edge / q0, bias = edge (the edge is
// exactly representable, so the scale may be negative), else bias = 0;
// q = clamp(rint((w - bias) / scale), 0, 2^bits - 1). All in fp32.
// Non-finite inputs are the caller's problem (quantize_checkpoint rejects them).
void quantize_affine(const float* w, int64_t rows, int64_t cols, int bits, int group, uint32_t* packed,
                     float* scales, float* biases);

struct QuantizeOptions {
  int bits = 4;
  int group_size = 64;
};

struct QuantizeReport {
  std::string out_file;          // <out>/model.safetensors
  int quantized = 0;             // matrices quantized
  int kept = 0;                  // tensors written unquantized
  int shifted_norms = 0;         // (1+w) norms written as 1+w
  int dropped = 0;               // tensors not written (model.visual.*, a duplicate tied head, ...)
  std::vector<std::string> unquantizable;  // 2-D weights kept dense: input size not a multiple of the group
  std::vector<std::string> copied_files;   // generation_config.json, tokenizer files, ...
  uint64_t bytes_out = 0;
};

// Reads the checkpoint in `in_dir` (any layout, dense F32/BF16/F16), writes
// `out_dir`: Qwen3.5 in the MLX layout; Gemma 4 (picked by config.json's
// model_type) with its stored names, the text model's matrices quantized. Throws Error (bad flags, already quantized
// input, output directory that would clobber the input or holds safetensors).
QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& opt);

}  // namespace nextn
