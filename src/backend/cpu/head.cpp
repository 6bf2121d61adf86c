#include "backend/cpu/head.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/gemm.h"
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
    // Head rows a panel at a time (widened or dequantized), each logit summed
    // by gemm_block as cpu::matmul sums it: the same bits as head_logits.
    std::vector<float> w(size_t(kPanelRows) * size_t(H)), scores(size_t(count) * kPanelRows);
    for (int64_t c = c0; c < c1; ++c) {
      float* cb = &best[size_t(c) * size_t(count)];
      int32_t* ci = &index[size_t(c) * size_t(count)];
      const int64_t end = V * (c + 1) / chunks;
      for (int64_t o0 = V * c / chunks; o0 < end; o0 += kPanelRows) {
        const int rows = int(std::min<int64_t>(kPanelRows, end - o0));
        for (int r = 0; r < rows; ++r) head.row(o0 + r, &w[size_t(r) * size_t(H)]);
        bytes[size_t(c)] += rows * head.row_bytes();
        gemm_block(x, H, count, w.data(), H, rows, H, scores.data(), kPanelRows);
        for (int o = 0; o < rows; ++o)
          for (int r = 0; r < count; ++r) {
            const float s = scores[size_t(r) * kPanelRows + size_t(o)];
            if (s > cb[r]) {
              cb[r] = s;
              ci[r] = int32_t(o0 + o);
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

void head_argmax_together(const Matrix& head, std::span<const SequenceHeadRows> rows, int32_t* out,
                          const HeadThreads& threads) {
  const size_t H = size_t(head.cols());
  int R = 0;
  for (const SequenceHeadRows& r : rows) {
    if (r.first < 0 || r.count < 1 || r.first + r.count > r.last_T)
      fail("head_argmax: rows [{}, {}) outside the last forward's {} rows", r.first, r.first + r.count, r.last_T);
    R += r.count;
  }
  std::vector<float> x(size_t(R) * H);  // [R][H]: every listed row, in list order
  size_t row = 0;
  for (const SequenceHeadRows& r : rows) {
    std::copy(r.hidden + size_t(r.first) * H, r.hidden + size_t(r.first + r.count) * H, &x[row * H]);
    row += size_t(r.count);
  }
  HeadWork call;  // what the one projection read and wrote, counted by the op
  head_project_argmax(head, x.data(), R, R, out, call, threads);
  for (const SequenceHeadRows& r : rows) {  // each sequence's share: its rows, the head read once for all
    HeadWork& w = *r.work;
    w.rows_projected += r.count;
    w.head_bytes_read += call.head_bytes_read;
    w.logits_bytes_written += call.logits_bytes_written / R * r.count;
    w.head_calls += 1;
    w.last_path = HeadPath::Batched;
  }
}

}  // namespace nextn::cpu
