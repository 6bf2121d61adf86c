// cpu::matmul (declared in ops.h): the work split of the blocked product.
// A work item is one panel of kPanelRows weight rows x one block of
// kInputBlockRows input rows; items are numbered panel-major so that a
// thread's contiguous chunk reuses one panel (and, for quantized weights,
// its dequantized copy) across the input blocks that follow.
#include <algorithm>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/ops.h"
#include "core/thread_pool.h"

namespace nextn::cpu {

void matmul(const Matrix& w, const float* x, int T, float* y, int64_t first, int64_t count, ThreadPool* pool,
            int64_t min_chunk_work) {
  if (count < 0) count = w.rows() - first;
  if (count == 0 || T == 0) return;
  const int64_t cols = w.cols();
  const int64_t panels = (count + kPanelRows - 1) / kPanelRows;
  const int64_t blocks = (T + kInputBlockRows - 1) / kInputBlockRows;
  auto items = [&](int64_t begin, int64_t end) {
    std::vector<float> panel_f32;  // quantized weights: the current panel dequantized
    int64_t dequantized_panel = -1;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t panel = item / blocks, block = item % blocks;
      const int64_t o = panel * kPanelRows;  // first output row of the panel, relative to `first`
      const int rows = int(std::min<int64_t>(kPanelRows, count - o));
      const int64_t t0 = block * kInputBlockRows;
      const int nt = int(std::min<int64_t>(kInputBlockRows, T - t0));
      const float* xb = x + t0 * cols;
      float* yb = y + t0 * count + o;
      if (!w.bf16_.empty()) {
        gemm_block(xb, cols, nt, w.bf16_.data() + (first + o) * cols, cols, rows, cols, yb, count);
      } else if (!w.f16_.empty()) {
        gemm_block_f16(xb, cols, nt, w.f16_.data() + (first + o) * cols, cols, rows, cols, yb, count);
      } else if (!w.quantized()) {
        gemm_block(xb, cols, nt, w.dense_.data() + (first + o) * cols, cols, rows, cols, yb, count);
      } else {
        if (dequantized_panel != panel) {
          panel_f32.resize(size_t(kPanelRows) * size_t(cols));
          for (int r = 0; r < rows; ++r) w.row(first + o + r, panel_f32.data() + size_t(r) * size_t(cols));
          dequantized_panel = panel;
        }
        gemm_block(xb, cols, nt, panel_f32.data(), cols, rows, cols, yb, count);
      }
    }
  };
  // A chunk holds at least min_chunk_work multiply-adds (an item does up to
  // kPanelRows * cols * min(T, kInputBlockRows)); where the cuts fall cannot
  // change a value.
  const int64_t item_work = kPanelRows * cols * std::min<int64_t>(T, kInputBlockRows);
  const int64_t grain = std::max<int64_t>(1, min_chunk_work / std::max<int64_t>(1, item_work));
  if (pool)
    pool->parallel_for(panels * blocks, grain, items);
  else
    items(0, panels * blocks);
}

}  // namespace nextn::cpu
