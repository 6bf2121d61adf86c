#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/weight_upload.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "backend/cuda/check.h"
#include "backend/cuda/matmul_stream.h"
#include "core/dtype.h"
#include "core/error.h"

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

namespace {

// A SwiGLU MLP's [gate; up] whose streamed copy can interleave them
// (DevMatrix::swiglu_pairs): then it is never split along k.
void pair_swiglu_rows(DevMatrix& m, const std::vector<WeightRef>& parts, WeightUse use) {
  if (use != WeightUse::SwigluGateUp) return;
  if (parts.size() != 2 || parts[0].rows != parts[1].rows || m.rows % 16 != 0 || !stream_eligible(m)) return;
  m.swiglu_pairs = true;
  m.splits = 1;
}

// FP8 / Z4 parts (a native form of a transformers format): the codes and the
// fp32 scales to the device, the streamed layout from them, then only the
// layout is kept (these kinds have no other reader).
DevMatrix upload_scaled_parts(const std::vector<WeightRef>& parts, Act act, DeviceMemory& mem, const char* what,
                              bool splittable, WeightUse use) {
  const WeightRef& w0 = parts.front();
  if (act != Act::BF16 || use == WeightUse::RowLookupOnly)
    fail("--backend cuda: {}: {} weights run as matmuls in the bf16 mode only", w0.name, weight_codec_name(w0.codec()));
  DevMatrix m;
  m.kind = w0.codec() == WeightCodec::Fp8 ? WKind::FP8 : WKind::Z4;
  const bool zeros = m.kind == WKind::Z4;
  m.cols = int(w0.cols);
  m.group = w0.quant.group_size;
  for (const auto& p : parts) m.rows += int(p.rows);
  m.splits = splittable ? choose_splits(m.rows, m.cols, m.kind) : 1;
  check_matrix(m, w0.name.c_str());
  const size_t code_bytes = m.kind == WKind::FP8 ? size_t(m.cols) : size_t(m.cols) / 2;  // per row
  const size_t groups = size_t(m.cols / m.group);
  auto* dw = mem.alloc<uint8_t>(size_t(m.rows) * code_bytes, what);
  auto* ds = mem.alloc<float>(size_t(m.rows) * groups * 4, what);
  auto* dz = zeros ? mem.alloc<float>(size_t(m.rows) * groups * 4, what) : nullptr;
  m.w = dw;
  m.scales = ds;
  m.biases = dz;  // Z4: the zeros (kernels.h)
  for (const auto& p : parts) {
    if (p.scales->dtype != DType::F32 || (zeros && (p.zeros == nullptr || p.zeros->dtype != DType::F32)))
      fail("internal: {}: native scales or zeros are not F32", p.name);
    CUDA_CHECK(cudaMemcpy(dw, p.weight->data, size_t(p.rows) * code_bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(ds, p.scales->data, size_t(p.rows) * groups * 4, cudaMemcpyHostToDevice));
    if (zeros) CUDA_CHECK(cudaMemcpy(dz, p.zeros->data, size_t(p.rows) * groups * 4, cudaMemcpyHostToDevice));
    dw += size_t(p.rows) * code_bytes;
    ds += size_t(p.rows) * groups;
    if (zeros) dz += size_t(p.rows) * groups;
  }
  pair_swiglu_rows(m, parts, use);
  pack_quant(m, mem.alloc<uint8_t>(size_t(pack_quant_bytes(m)), what), nullptr);
  mem.release(m.w);
  mem.release(m.scales);
  if (zeros) mem.release(m.biases);
  m.w = nullptr;
  m.scales = nullptr;
  m.biases = nullptr;
  return m;
}

}  // namespace

DevMatrix upload_weight_parts(const std::vector<WeightRef>& parts, Act act, DeviceMemory& mem, const char* what,
                              bool splittable, WeightUse use) {
  DevMatrix m;
  const WeightRef& w0 = parts.front();
  m.cols = int(w0.cols);
  auto storage = [](const WeightRef& w) {
    return w.quantized() ? fmt::format("{} {}-bit group {}", weight_codec_name(w.codec()), w.quant.bits,
                                       w.quant.group_size)
                         : std::string("dense");
  };
  for (const auto& p : parts) {
    if (p.codec() != w0.codec() || p.quant.bits != w0.quant.bits || p.quant.group_size != w0.quant.group_size ||
        p.cols != w0.cols)
      fail("--backend cuda: {}: stored as {} but '{}', fused with it into one matrix, as {}", p.name, storage(p),
           w0.name, storage(w0));
    m.rows += int(p.rows);
  }
  if (w0.codec() == WeightCodec::Fp8 || w0.codec() == WeightCodec::ZeroInt)
    return upload_scaled_parts(parts, act, mem, what, splittable, use);
  if (w0.quantized()) {
    if (w0.quant.bits != 4 && w0.quant.bits != 8)
      fail("--backend cuda: {}: {}-bit quantization is not supported (4 or 8)", w0.name, w0.quant.bits);
    m.kind = w0.quant.bits == 4 ? WKind::Q4 : WKind::Q8;
    m.group = w0.quant.group_size;
  } else {
    m.kind = act == Act::F32 ? WKind::F32 : WKind::BF16;
  }
  m.splits = splittable ? choose_splits(m.rows, m.cols, m.kind) : 1;
  // The fp32 kernel takes any width; the tensor-core and quantized ones need multiples of 32.
  if (m.kind == WKind::BF16 && m.cols % 32 != 0)
    fail("--backend cuda: {} is [{}, {}]: the bf16 mode needs a width that is a multiple of 32 "
         "(--act fp32 takes any)",
         w0.name, m.rows, m.cols);
  if (m.kind != WKind::F32) check_matrix(m, w0.name.c_str());

  if (!w0.quantized()) {
    const size_t esz = m.kind == WKind::F32 ? 4 : 2;
    auto* dst = mem.alloc<uint8_t>(size_t(m.rows) * m.cols * esz, what);
    m.w = dst;
    upload_dense_parts(parts, esz, dst);
    return m;
  }
  const int per_word = 32 / w0.quant.bits;
  const size_t words = size_t(m.rows) * (m.cols / per_word), groups = size_t(m.rows) * (m.cols / m.group);
  auto* dw = mem.alloc<uint8_t>(words * 4, what);
  auto* ds = mem.alloc<float>(groups * 4, what);
  auto* db = mem.alloc<float>(groups * 4, what);
  m.w = dw;
  m.scales = ds;
  m.biases = db;
  std::vector<float> s, b;
  for (const auto& p : parts) {
    const size_t pw = size_t(p.rows) * (p.cols / per_word), pg = size_t(p.rows) * (p.cols / p.quant.group_size);
    CUDA_CHECK(cudaMemcpy(dw, p.weight->data, pw * 4, cudaMemcpyHostToDevice));
    s.resize(pg);
    b.resize(pg);
    for (size_t i = 0; i < pg; ++i) {
      s[i] = load_float(p.scales->dtype, p.scales->data, i);
      b[i] = load_float(p.biases->dtype, p.biases->data, i);
      // The fast q4 kernel takes (scale, bias) as bf16: only when that is exact.
      m.sb_exact = m.sb_exact && bf16_to_f32(f32_to_bf16(s[i])) == s[i] && bf16_to_f32(f32_to_bf16(b[i])) == b[i];
    }
    CUDA_CHECK(cudaMemcpy(ds, s.data(), pg * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, b.data(), pg * 4, cudaMemcpyHostToDevice));
    dw += pw * 4;
    ds += pg;
    db += pg;
  }
  pair_swiglu_rows(m, parts, use);
  const int64_t packed_bytes = use != WeightUse::RowLookupOnly ? pack_quant_bytes(m) : 0;
  pack_quant(m, packed_bytes > 0 ? mem.alloc<uint8_t>(size_t(packed_bytes), what) : nullptr, nullptr);
  // The bf16 mode reads a streamed matrix only through its packed copy
  // (embedding lookups included): the MLX words and fp32 scales go.
  if (m.packed != nullptr && act == Act::BF16) {
    mem.release(m.w);
    mem.release(m.scales);
    mem.release(m.biases);
    m.w = nullptr;
    m.scales = m.biases = nullptr;
  }
  return m;
}

float* upload_floats(DeviceMemory& mem, const std::vector<float>& v, const char* what) {
  float* d = mem.alloc<float>(v.size() * sizeof(float), what);
  CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
