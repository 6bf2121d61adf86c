#include "backend/cpu/head.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace nextn::cpu {
namespace {

// Full logits of `width` rows: cpu::matmul reads each head row once for all
// of them (threads split the vocabulary, never a sum); counts what it reads
// and writes.
std::vector<float> project(const Matrix& head, const float* x, int width, HeadWork& work, const HeadThreads& threads) {
  const int64_t V = head.rows();
  std::vector<float> logits(size_t(width) * size_t(V));
  matmul(head, x, width, logits.data(), 0, -1, threads.pool, threads.min_chunk_work);
  work.head_bytes_read += V * head.row_bytes();
  work.rows_projected += width;
  work.logits_bytes_written += int64_t(width) * V * int64_t(sizeof(float));
  return logits;
}

}  // namespace

void head_project_argmax(const Matrix& head, const float* x, int width, int count, int32_t* out, HeadWork& work,
                         const HeadThreads& threads) {
  const std::vector<float> logits = project(head, x, width, work, threads);
  for (int r = 0; r < count; ++r) out[r] = argmax(&logits[size_t(r) * size_t(head.rows())], head.rows());
  ++work.head_calls;
  work.last_path = width == count ? HeadPath::Batched : HeadPath::Padded;
}

void head_fused_argmax(const Matrix& head, const float* x, int count, int32_t* out, HeadWork& work,
                       const HeadThreads& threads) {
  const int64_t V = head.rows(), H = head.cols();
  // Vocabulary chunks in parallel, each a running (max, first index) per row;
  // merged in chunk order with the same rule, which gives the serial pass's
  // answer (strictly greater wins, so the lowest index among ties; NaN never).
  const int chunks = threads.pool ? threads.pool->size() : 1;
  std::vector<float> best(size_t(chunks) * size_t(count), -INFINITY);
  std::vector<int32_t> index(size_t(chunks) * size_t(count), -1);
  std::vector<int64_t> bytes(size_t(chunks), 0);
  auto pass = [&](int64_t c0, int64_t c1) {
    std::vector<float> w(static_cast<size_t>(H));
    for (int64_t c = c0; c < c1; ++c) {
      float* cb = &best[size_t(c) * size_t(count)];
      int32_t* ci = &index[size_t(c) * size_t(count)];
      for (int64_t o = V * c / chunks; o < V * (c + 1) / chunks; ++o) {
        head.row(o, w.data());
        bytes[size_t(c)] += head.row_bytes();
        for (int r = 0; r < count; ++r) {
          const float s = dot(x + r * H, w.data(), H);
          if (s > cb[r]) {
            cb[r] = s;
            ci[r] = int32_t(o);
          }
        }
      }
    }
  };
  if (threads.pool)
    threads.pool->parallel_for(chunks, 1, pass);
  else
    pass(0, chunks);
  for (int r = 0; r < count; ++r) {
    float b = -INFINITY;
    out[r] = 0;
    for (int c = 0; c < chunks; ++c)
      if (index[size_t(c) * size_t(count) + size_t(r)] >= 0 && best[size_t(c) * size_t(count) + size_t(r)] > b) {
        b = best[size_t(c) * size_t(count) + size_t(r)];
        out[r] = index[size_t(c) * size_t(count) + size_t(r)];
      }
  }
  for (int64_t b : bytes) work.head_bytes_read += b;
  work.rows_projected += count;
  ++work.head_calls;
  work.last_path = HeadPath::Fused;
}

int head_walk_rows(const Matrix& head, const float* x, int rows, std::span<const int32_t> drafts, int32_t* out,
                   HeadWork& work, const HeadThreads& threads) {
  int taken = 0;
  for (int j = 0; j < rows; ++j) {
    const std::vector<float> logits = project(head, x + int64_t(j) * head.cols(), 1, work, threads);
    out[j] = argmax(logits.data(), head.rows());
    ++taken;
    if (j == int(drafts.size()) || out[j] != drafts[size_t(j)]) break;
  }
  work.walk_rows += taken;
  ++work.head_calls;
  work.last_path = HeadPath::Walk;
  return taken;
}

void head_argmax_of_rows(const Matrix& head, const float* hidden, int rows, int first, int count, int width,
                         int32_t* out, HeadWork& work, const HeadThreads& threads) {
  if (first < 0 || count < 0 || width < count || first + count > rows)
    fail("head_argmax: rows [{}, {}) of width {} outside the last forward's {} rows", first, first + count, width, rows);
  const int64_t H = head.cols();
  std::vector<float> x(size_t(width) * size_t(H), 0.0f);  // rows past the forward are zero padding
  const int real = std::min(width, rows - first);
  std::copy(hidden + size_t(first) * H, hidden + size_t(first + real) * H, x.begin());
  head_project_argmax(head, x.data(), width, count, out, work, threads);
}

}  // namespace nextn::cpu
