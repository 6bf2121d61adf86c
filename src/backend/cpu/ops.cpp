#include "backend/cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/simd.h"
#include "core/error.h"
#include "io/checkpoint.h"

namespace nextn::cpu {

std::shared_ptr<Matrix> Matrix::load(const WeightRef& w) {
  auto m = std::make_shared<Matrix>();
  m->rows_ = w.rows;
  m->cols_ = w.cols;
  if (!w.quantized() && (w.weight->dtype == DType::BF16 || w.weight->dtype == DType::F16)) {
    auto& bits = w.weight->dtype == DType::BF16 ? m->bf16_ : m->f16_;
    bits.resize(size_t(w.rows) * size_t(w.cols));
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = load_unaligned<uint16_t>(w.weight->data + 2 * i);
    return m;
  }
  if (!w.quantized()) {
    m->dense_.resize(size_t(w.rows) * size_t(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w, r, m->dense_.data() + r * w.cols);
    return m;
  }
  m->bits_ = w.quant.bits;
  m->group_ = w.quant.group_size;
  const int64_t words = w.rows * (w.cols * m->bits_ / 32);
  m->packed_.resize(static_cast<size_t>(words));
  for (int64_t i = 0; i < words; ++i) m->packed_[size_t(i)] = load_unaligned<uint32_t>(w.weight->data + 4 * i);
  const int64_t groups = w.rows * (w.cols / m->group_);
  m->scales_.resize(static_cast<size_t>(groups));
  m->biases_.resize(static_cast<size_t>(groups));
  for (int64_t i = 0; i < groups; ++i) {
    m->scales_[size_t(i)] = load_float(w.scales->dtype, w.scales->data, size_t(i));
    m->biases_[size_t(i)] = load_float(w.biases->dtype, w.biases->data, size_t(i));
  }
  return m;
}

int64_t Matrix::row_bytes() const {
  if (!quantized()) return cols_ * int64_t(sizeof(float));
  return cols_ * bits_ / 8 + 2 * (cols_ / group_) * int64_t(sizeof(float));
}

void Matrix::row(int64_t r, float* out) const {
  if (!bf16_.empty()) {
    const uint16_t* src = bf16_.data() + r * cols_;
    for (int64_t c = 0; c < cols_; ++c) out[c] = bf16_to_f32(src[c]);
    return;
  }
  if (!f16_.empty()) {
    const uint16_t* src = f16_.data() + r * cols_;
    for (int64_t c = 0; c < cols_; ++c) out[c] = f16_to_f32(src[c]);
    return;
  }
  if (!quantized()) {
    const float* src = dense_.data() + r * cols_;
    for (int64_t c = 0; c < cols_; ++c) out[c] = src[c];
    return;
  }
  const int64_t groups = cols_ / group_;
  dequantize_row(packed_.data() + r * (cols_ * bits_ / 32), scales_.data() + r * groups, biases_.data() + r * groups,
                 bits_, group_, cols_, out);
}

float dot(const float* a, const float* b, int64_t n) {
  float out = 0.0f;
  dot_rows(a, &b, 1, n, &out);
  return out;
}

void rmsnorm(const float* x, const float* gamma, float eps, int64_t n, float* y) {
  const float ss = dot(x, x, n);
  const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * inv) * gamma[i];
}

void l2norm(float* x, int64_t n, float eps) {
  const float inv = 1.0f / std::sqrt(dot(x, x, n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float gelu_tanh(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
}
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void rope_angles(int64_t pos, int rotary_dim, double theta, float* cos, float* sin) {
  const int half = rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    // As transformers: inv_freq in fp32, angle = fp32(inv_freq * pos).
    const float inv_freq = float(1.0 / std::pow(theta, double(2 * i) / double(rotary_dim)));
    const float angle = inv_freq * float(pos);
    cos[i] = std::cos(angle);
    sin[i] = std::sin(angle);
  }
}

void rope(float* head, int rotary_dim, const float* cos, const float* sin) {
  const int half = rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float a = head[i], b = head[i + half];
    head[i] = a * cos[i] - b * sin[i];
    head[i + half] = b * cos[i] + a * sin[i];
  }
}

int32_t argmax(const float* x, int64_t n) {
  // Greater value, then lower index; NaN never wins (as the fused head pass
  // and the CUDA kernels): the first non-NaN value seeds the running best.
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i)
    if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
  return int32_t(best < 0 ? 0 : best);
}

}  // namespace nextn::cpu
