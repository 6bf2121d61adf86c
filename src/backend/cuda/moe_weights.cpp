// A MoE layer's routed experts to the device, stacked per projection
// (moe.h's DevExperts): one allocation per array for all E experts, so
// expert e is an offset the grouped kernel computes on the device.
#ifdef NEXTN_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/weight_upload.h"
#include "core/dtype.h"
#include "core/error.h"

namespace nextn::cuda {

DevExperts upload_experts(const std::vector<std::vector<WeightRef>>& experts, Act act, DeviceMemory& mem,
                          const char* what) {
  const WeightRef& w0 = experts.front().front();
  DevExperts d;
  d.E = int(experts.size());
  d.cols = int(w0.cols);
  for (const auto& p : experts.front()) d.rows += int(p.rows);
  for (const auto& parts : experts) {
    int rows = 0;
    for (const auto& p : parts) {
      if (p.codec() != w0.codec() || p.quant.bits != w0.quant.bits || p.quant.group_size != w0.quant.group_size ||
          p.cols != w0.cols)
        fail("--backend cuda: {}: stored unlike {} ({}-bit, group {}): the experts of a layer must share one format",
             p.name, w0.name, w0.quant.bits, w0.quant.group_size);
      rows += int(p.rows);
    }
    if (rows != d.rows) fail("internal: {}: expert of {} rows among experts of {}", parts.front().name, rows, d.rows);
  }
  if (w0.codec() != WeightCodec::Dense && w0.codec() != WeightCodec::Affine)
    fail("internal: {}: experts arrive dense or MLX affine (dequantized from {})", w0.name, weight_codec_name(w0.codec()));
  const size_t E = size_t(d.E), elems = size_t(d.rows) * size_t(d.cols);
  if (!w0.quantized()) {
    d.kind = act == Act::F32 ? WKind::F32 : WKind::BF16;
    const size_t esz = act == Act::F32 ? 4 : 2;
    d.w_stride = elems * esz;
    auto* dst = mem.alloc<uint8_t>(E * d.w_stride, what);
    d.w = dst;
    for (size_t e = 0; e < E; ++e) upload_dense_parts(experts[e], esz, dst + e * d.w_stride);
    return d;
  }
  if (w0.quant.bits != 4 && w0.quant.bits != 8)
    fail("--backend cuda: {}: {}-bit quantization is not supported (4 or 8)", w0.name, w0.quant.bits);
  d.kind = w0.quant.bits == 4 ? WKind::Q4 : WKind::Q8;
  d.group = w0.quant.group_size;
  if (d.cols % 32 != 0 || d.group < 32 || d.cols % d.group != 0)
    fail("--backend cuda: {}: [{}, {}] in groups of {}: quantized experts need widths that are multiples of 32 and "
         "of the group (at least 32)",
         w0.name, d.rows, d.cols, d.group);
  d.w_stride = elems * size_t(w0.quant.bits) / 8;
  d.sb_stride = size_t(d.rows) * size_t(d.cols / d.group);
  // Every part's scales and biases in fp32, once; exact in bf16 throughout
  // (as MLX stores them): one u32 pair per group, half the bytes of two fp32 arrays.
  std::vector<std::vector<float>> scales, biases;
  bool exact = true;
  for (const auto& parts : experts)
    for (const auto& p : parts) {
      const size_t groups = size_t(p.rows) * size_t(p.cols / p.quant.group_size);
      auto& s = scales.emplace_back(groups);
      auto& b = biases.emplace_back(groups);
      for (size_t i = 0; i < groups; ++i) {
        s[i] = load_float(p.scales->dtype, p.scales->data, i);
        b[i] = load_float(p.biases->dtype, p.biases->data, i);
        exact = exact && bf16_to_f32(f32_to_bf16(s[i])) == s[i] && bf16_to_f32(f32_to_bf16(b[i])) == b[i];
      }
    }
  auto* dw = mem.alloc<uint8_t>(E * d.w_stride, what);
  d.w = dw;
  uint32_t* d16 = nullptr;
  float *ds = nullptr, *db = nullptr;
  if (exact) {
    d16 = mem.alloc<uint32_t>(E * d.sb_stride * 4, what);
    d.sb16 = d16;
  } else {
    ds = mem.alloc<float>(E * d.sb_stride * 4, what);
    db = mem.alloc<float>(E * d.sb_stride * 4, what);
    d.scales = ds;
    d.biases = db;
  }
  std::vector<uint32_t> pairs;
  size_t part = 0;
  for (const auto& parts : experts)
    for (const auto& p : parts) {
      const std::vector<float>& s = scales[part];
      const std::vector<float>& b = biases[part++];
      const size_t bytes = size_t(p.rows) * size_t(p.cols) * size_t(p.quant.bits) / 8, groups = s.size();
      CUDA_CHECK(cudaMemcpy(dw, p.weight->data, bytes, cudaMemcpyHostToDevice));
      dw += bytes;
      if (exact) {
        pairs.resize(groups);
        for (size_t i = 0; i < groups; ++i) pairs[i] = uint32_t(f32_to_bf16(s[i])) | uint32_t(f32_to_bf16(b[i])) << 16;
        CUDA_CHECK(cudaMemcpy(d16, pairs.data(), groups * 4, cudaMemcpyHostToDevice));
        d16 += groups;
      } else {
        CUDA_CHECK(cudaMemcpy(ds, s.data(), groups * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(db, b.data(), groups * 4, cudaMemcpyHostToDevice));
        ds += groups;
        db += groups;
      }
    }
  if (d.kind == WKind::Q4) {  // the generic kernels' nibble order (kernels.h q4_bit), all experts at once
    DevMatrix all;
    all.kind = WKind::Q4;
    all.rows = int(E) * d.rows;
    all.cols = d.cols;
    all.group = d.group;
    all.w = d.w;
    pack_quant(all, nullptr, nullptr);
  }
  return d;
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
