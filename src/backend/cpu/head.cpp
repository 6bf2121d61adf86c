#include "backend/cpu/head.h"

#include <cmath>
#include <vector>

namespace nextn::cpu {
namespace {

// Full logits of `width` rows, the head read once (row by row) for all of
// them; counts what it reads and writes.
std::vector<float> project(const Matrix& head, const float* x, int width, HeadWork& work) {
  const int64_t V = head.rows(), H = head.cols();
  std::vector<float> w(static_cast<size_t>(H));
  std::vector<float> logits(size_t(width) * size_t(V));
  for (int64_t o = 0; o < V; ++o) {
    head.row(o, w.data());
    work.head_bytes_read += head.row_bytes();
    for (int t = 0; t < width; ++t) logits[size_t(t) * size_t(V) + size_t(o)] = dot(x + t * H, w.data(), H);
  }
  work.rows_projected += width;
  work.logits_bytes_written += int64_t(width) * V * int64_t(sizeof(float));
  return logits;
}

}  // namespace

void head_project_argmax(const Matrix& head, const float* x, int width, int count, int32_t* out, HeadWork& work) {
  const std::vector<float> logits = project(head, x, width, work);
  for (int r = 0; r < count; ++r) out[r] = argmax(&logits[size_t(r) * size_t(head.rows())], head.rows());
  ++work.head_calls;
  work.last_path = width == count ? HeadPath::Batched : HeadPath::Padded;
}

void head_fused_argmax(const Matrix& head, const float* x, int count, int32_t* out, HeadWork& work) {
  const int64_t V = head.rows(), H = head.cols();
  std::vector<float> w(static_cast<size_t>(H));
  std::vector<float> best(size_t(count), -INFINITY);
  std::fill(out, out + count, 0);
  for (int64_t o = 0; o < V; ++o) {
    head.row(o, w.data());
    work.head_bytes_read += head.row_bytes();
    for (int r = 0; r < count; ++r) {
      const float s = dot(x + r * H, w.data(), H);
      if (s > best[size_t(r)]) {  // NaN never wins, ties keep the lower index (as argmax)
        best[size_t(r)] = s;
        out[r] = int32_t(o);
      }
    }
  }
  work.rows_projected += count;
  ++work.head_calls;
  work.last_path = HeadPath::Fused;
}

int head_walk_rows(const Matrix& head, const float* x, int rows, std::span<const int32_t> drafts, int32_t* out,
                   HeadWork& work) {
  int taken = 0;
  for (int j = 0; j < rows; ++j) {
    const std::vector<float> logits = project(head, x + int64_t(j) * head.cols(), 1, work);
    out[j] = argmax(logits.data(), head.rows());
    ++taken;
    if (j == int(drafts.size()) || out[j] != drafts[size_t(j)]) break;
  }
  work.walk_rows += taken;
  ++work.head_calls;
  work.last_path = HeadPath::Walk;
  return taken;
}

}  // namespace nextn::cpu
