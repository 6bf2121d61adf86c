// Checkpoint matrices to the device in the matmul kernels' layout, for both
// loaders (CudaQwen35 in qwen35_load.cpp, CudaGemma4 in gemma4.cpp): dense
// parts as bf16 (fp32 in the fp32 mode), converted on the host where the
// stored dtype differs; MLX affine Q4/Q8 parts as their packed words with
// fp32 scales and biases, then pack_quant's layouts (kernels.h); the native
// FP8 / int-with-zeros codecs of transformers' formats as FP8 / Z4 matrices.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/kernels.h"
#include "io/checkpoint.h"

namespace nextn::cuda {

// Copies the parts (dense F32 / BF16 / F16) into `dst`, device memory of
// sum(rows * cols) * esz bytes; esz 4: fp32, 2: bf16. Synchronous.
void upload_dense_parts(const std::vector<WeightRef>& parts, size_t esz, uint8_t* dst);

// A float vector (norm weights, a RoPE table) copied to new device memory
// from `mem` (`what`: its use). Synchronous.
float* upload_floats(DeviceMemory& mem, const std::vector<float>& v, const char* what);

// Who reads a matrix. RowLookupOnly: only embed_rows (an untied embedding),
// so it gets no streamed copy; a Matmul matrix keeps only its streamed copy
// in the bf16 mode (embed_rows reads that too). SwigluGateUp: a matmul whose
// two parts are a SwiGLU's gate and up; where the streamed layout takes it,
// their rows are interleaved for the SwiGLU epilogue (DevMatrix::swiglu_pairs)
// and the matrix is not split.
enum class WeightUse { Matmul, RowLookupOnly, SwigluGateUp };

// The parts, concatenated along the rows, as one DevMatrix allocated from
// `mem` (`what`: its use). All parts share one storage format (dense, or
// quantized with the same bits and group; else Error naming the tensor).
// `splittable`: split-K allowed (choose_splits), else 1 (an LM head). Dense
// bf16 needs a width that is a multiple of 32 (fp32 takes any); quantized
// matrices must meet check_matrix. Synchronous. Throws Error.
DevMatrix upload_weight_parts(const std::vector<WeightRef>& parts, Act act, DeviceMemory& mem, const char* what,
                              bool splittable, WeightUse use = WeightUse::Matmul);

}  // namespace nextn::cuda
