#include "io/weight_slice.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace nextn {
namespace {

std::vector<IndexRange> all_if_empty(std::span<const IndexRange> ranges, int64_t n, const std::string& name,
                                     const char* what) {
  if (ranges.empty()) return {IndexRange{0, n}};
  for (const IndexRange& r : ranges)
    if (r.begin < 0 || r.end > n || r.begin > r.end)
      fail("internal: {}: {} [{}, {}) outside [0, {})", name, what, r.begin, r.end, n);
  return {ranges.begin(), ranges.end()};
}

int64_t total(const std::vector<IndexRange>& ranges) {
  int64_t n = 0;
  for (const IndexRange& r : ranges) n += r.size();
  return n;
}

// Copies elements [r.begin, r.end) of each range of one row of `elem`-byte
// elements starting at `src`, scaled by `per` stored units per element range
// unit (packed words or groups per column), to `dst`; returns the new end.
uint8_t* copy_ranges(const uint8_t* src, const std::vector<IndexRange>& ranges, int64_t divisor, size_t elem,
                     uint8_t* dst) {
  for (const IndexRange& r : ranges) {
    const size_t n = size_t(r.size() / divisor) * elem;
    std::memcpy(dst, src + size_t(r.begin / divisor) * elem, n);
    dst += n;
  }
  return dst;
}

}  // namespace

WeightSlice::WeightSlice(const WeightRef& w, std::span<const IndexRange> row_list, std::span<const IndexRange> col_list) {
  if (!w.weight) fail("internal: slice of an empty weight");
  const std::vector<IndexRange> rows = all_if_empty(row_list, w.rows, w.name, "rows");
  const std::vector<IndexRange> cols = all_if_empty(col_list, w.cols, w.name, "columns");
  const int64_t out_rows = total(rows), out_cols = total(cols);
  ref_.name = w.name;
  ref_.rows = out_rows;
  ref_.cols = out_cols;
  weight_view_.name = w.weight->name;
  weight_view_.file = w.weight->file;
  weight_view_.shape = {out_rows, out_cols};
  bool keep_packing = w.quantized();
  if (w.quantized())
    for (const IndexRange& c : cols)
      if (c.begin % w.quant.group_size != 0 || c.size() % w.quant.group_size != 0) keep_packing = false;
  if (!w.quantized() && w.weight->dtype != DType::F32 && w.weight->dtype != DType::F16 &&
      w.weight->dtype != DType::BF16)
    fail("internal: {}: slicing a {} matrix", w.name, dtype_name(w.weight->dtype));
  if (!w.quantized()) {  // dense: the stored dtype, element by element
    const size_t elem = dtype_size(w.weight->dtype);
    weight_.resize(size_t(out_rows * out_cols) * elem);
    uint8_t* dst = weight_.data();
    for (const IndexRange& r : rows)
      for (int64_t i = r.begin; i < r.end; ++i)
        dst = copy_ranges(w.weight->data + size_t(i * w.cols) * elem, cols, 1, elem, dst);
    weight_view_.dtype = w.weight->dtype;
  } else if (keep_packing) {  // MLX affine: whole words and whole groups
    const int64_t per_word = 32 / w.quant.bits, group = w.quant.group_size;
    const int64_t words = w.cols / per_word, groups = w.cols / group;
    const size_t s_elem = dtype_size(w.scales->dtype), b_elem = dtype_size(w.biases->dtype);
    weight_.resize(size_t(out_rows * (out_cols / per_word)) * 4);
    scales_.resize(size_t(out_rows * (out_cols / group)) * s_elem);
    biases_.resize(size_t(out_rows * (out_cols / group)) * b_elem);
    uint8_t *dw = weight_.data(), *ds = scales_.data(), *db = biases_.data();
    for (const IndexRange& r : rows)
      for (int64_t i = r.begin; i < r.end; ++i) {
        dw = copy_ranges(w.weight->data + size_t(i * words) * 4, cols, per_word, 4, dw);
        ds = copy_ranges(w.scales->data + size_t(i * groups) * s_elem, cols, group, s_elem, ds);
        db = copy_ranges(w.biases->data + size_t(i * groups) * b_elem, cols, group, b_elem, db);
      }
    weight_view_.dtype = DType::U32;
    weight_view_.shape = {out_rows, out_cols / per_word};
    scales_view_ = *w.scales;
    scales_view_.shape = {out_rows, out_cols / group};
    biases_view_ = *w.biases;
    biases_view_.shape = {out_rows, out_cols / group};
    scales_view_.data = scales_.data();
    scales_view_.nbytes = scales_.size();
    biases_view_.data = biases_.data();
    biases_view_.nbytes = biases_.size();
    ref_.scales = &scales_view_;
    ref_.biases = &biases_view_;
    ref_.quant = w.quant;
  } else {  // columns that cut MLX groups: the decoded fp32 values
    weight_.resize(size_t(out_rows * out_cols) * sizeof(float));
    std::vector<float> row(size_t(w.cols));
    uint8_t* dst = weight_.data();
    for (const IndexRange& r : rows)
      for (int64_t i = r.begin; i < r.end; ++i) {
        dequantize_row(w, i, row.data());
        dst = copy_ranges(reinterpret_cast<const uint8_t*>(row.data()), cols, 1, sizeof(float), dst);
      }
    weight_view_.dtype = DType::F32;
  }
  weight_view_.data = weight_.data();
  weight_view_.nbytes = weight_.size();
  ref_.weight = &weight_view_;
}

std::vector<float> slice_vector(const std::vector<float>& v, std::span<const IndexRange> ranges) {
  std::vector<float> out;
  for (const IndexRange& r : ranges) {
    if (r.begin < 0 || r.end > int64_t(v.size()) || r.begin > r.end)
      fail("internal: vector range [{}, {}) outside [0, {})", r.begin, r.end, v.size());
    out.insert(out.end(), v.begin() + r.begin, v.begin() + r.end);
  }
  return out;
}

}  // namespace nextn
