#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/dense_upload.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "backend/cuda/check.h"
#include "core/dtype.h"

namespace nextn::cuda {

void upload_dense_parts(const std::vector<WeightRef>& parts, size_t esz, uint8_t* dst) {
  std::vector<uint8_t> host;
  for (const auto& p : parts) {
    const size_t n = size_t(p.rows) * size_t(p.cols);
    const DType dt = p.weight->dtype;
    if ((dt == DType::BF16 && esz == 2) || (dt == DType::F32 && esz == 4)) {
      CUDA_CHECK(cudaMemcpy(dst, p.weight->data, n * esz, cudaMemcpyHostToDevice));
    } else {
      host.resize(n * esz);
      for (size_t i = 0; i < n; ++i) {
        const float f = load_float(dt, p.weight->data, i);
        if (esz == 4) {
          std::memcpy(&host[i * 4], &f, 4);
        } else {
          const uint16_t b = f32_to_bf16(f);
          std::memcpy(&host[i * 2], &b, 2);
        }
      }
      CUDA_CHECK(cudaMemcpy(dst, host.data(), n * esz, cudaMemcpyHostToDevice));
    }
    dst += n * esz;
  }
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
