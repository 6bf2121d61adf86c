// Dense checkpoint matrices to the device (the Qwen3.5 and Gemma 4 loaders):
// parts concatenated along the rows, as fp32 or bf16, converted on the host
// where the stored dtype differs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/checkpoint.h"

namespace nextn::cuda {

// Copies the parts (dense F32 / BF16 / F16) into `dst`, device memory of
// sum(rows * cols) * esz bytes; esz 4: fp32, 2: bf16. Synchronous.
void upload_dense_parts(const std::vector<WeightRef>& parts, size_t esz, uint8_t* dst);

}  // namespace nextn::cuda
