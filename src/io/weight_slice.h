// A part of a stored matrix, copied out in the stored format: the rows and
// columns a tensor-parallel rank holds (io/tensor_parallel_plan.h). Dense
// matrices keep their dtype; an MLX affine one keeps its packing when the
// columns cut along its groups, and is decoded to exact fp32 values
// otherwise (each value as dequantize_row computes it, so the products see
// the same numbers).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "io/checkpoint.h"

namespace nextn {

// Indices [begin, end).
struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// The copied part and a WeightRef over it, valid while this lives.
class WeightSlice {
 public:
  // w's rows in `rows` then its columns in `cols`, each list's ranges
  // concatenated in order; an empty list keeps all. Throws Error for a range
  // outside w.
  WeightSlice(const WeightRef& w, std::span<const IndexRange> rows, std::span<const IndexRange> cols);
  WeightSlice(const WeightSlice&) = delete;
  WeightSlice& operator=(const WeightSlice&) = delete;
  const WeightRef& ref() const { return ref_; }

 private:
  std::vector<uint8_t> weight_, scales_, biases_;
  TensorView weight_view_, scales_view_, biases_view_;
  WeightRef ref_;
};

// A float vector's elements in `ranges`, concatenated.
std::vector<float> slice_vector(const std::vector<float>& v, std::span<const IndexRange> ranges);

}  // namespace nextn
