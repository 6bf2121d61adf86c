// A checkpoint's tensors as an editable map (name -> dtype, shape, bytes), for
// tests that rewrite a fixture into another layout or break one tensor.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"

namespace nextn::test {

struct StoredTensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
using TensorMap = std::map<std::string, StoredTensor>;

// Every tensor of the checkpoint in `dir` (one file or several shards).
inline TensorMap read_tensors(const std::string& dir) {
  TensorMap m;
  const TensorStore s = TensorStore::open(dir);
  for (const auto& n : s.names()) {
    const TensorView& t = s.get(n);
    m[n] = {t.dtype, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
  }
  return m;
}

// All of `tensors` as one safetensors file.
inline void write_tensors(const std::string& file, const TensorMap& tensors) {
  std::vector<TensorToWrite> tw;
  for (const auto& [name, t] : tensors) tw.push_back({name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  write_safetensors(file, tw);
}

// `n` fp32 values as a tensor's bytes.
inline StoredTensor f32_tensor(std::vector<int64_t> shape, const std::vector<float>& values) {
  return {DType::F32, std::move(shape),
          std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float))};
}

// A stored float tensor's values as fp32.
inline std::vector<float> f32_values(const StoredTensor& t) {
  const size_t n = t.bytes.size() / dtype_size(t.dtype);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = load_float(t.dtype, reinterpret_cast<const uint8_t*>(t.bytes.data()), i);
  return v;
}

}  // namespace nextn::test
