// How a matrix's values are stored for a backend: the codecs a WeightRef
// (checkpoint.h) carries, and the forms a transformers-format module can be
// handed over in (hf_quant.h, docs/formats.md).
#pragma once

namespace nextn {

// How a module stored in one of transformers' formats (fp8, gptq, awq,
// compressed-tensors) reaches a backend (checkpoint_matrix).
enum class MatrixForm {
  Fp32,     // dequantized into a dense F32 matrix (the CPU; CUDA's fp32 mode)
  Native,   // its codes kept in a codec a kernel reads (CUDA's bf16 mode), Fp32 where none fits (hf_quant.h)
  Checked,  // tensors checked, nothing decoded: `weight` is one of its stored tensors, not for reading
};

// What a WeightRef's tensors hold, element (r, c) of group g = c / group_size.
enum class WeightCodec {
  Dense,   // F32 / BF16 / F16 `weight`
  Affine,  // MLX affine: U32 codes (element j of a word in bits [bits*j, bits*(j+1))), w = scale * q + bias
  Fp8,     // F8_E4M3 `weight` [rows, cols], w = fp8 * scale; no biases
  ZeroInt,  // 4-bit U32 codes packed as Affine, w = scale * (q - zero), a zero per group; no biases
};
const char* weight_codec_name(WeightCodec c);

}  // namespace nextn
