// The LM head's CPU ops: the projections behind head_argmax,
// head_argmax_fused and head_walk. Each op counts its own work into a
// HeadWork (model/runtime.h) while it does it: the runtime only hands the
// counters out, and no caller writes them.
#pragma once
#include <cstdint>
#include <span>

#include "backend/cpu/ops.h"
#include "model/runtime.h"

namespace nextn::cpu {

// Threads the head ops may use (none: the calling thread). Results are the
// same bits for any pool: threads split the vocabulary, never one sum.
struct HeadThreads {
  ThreadPool* pool = nullptr;
  int64_t min_chunk_work = int64_t(1) << 16;
};

// x: [width][cols] rows (rows past the real ones are zero padding). Projects
// all `width` rows to full fp32 logits, writes the argmax of the first
// `count`. Path Batched when width == count, else Padded.
void head_project_argmax(const Matrix& head, const float* x, int width, int count, int32_t* out, HeadWork& work,
                         const HeadThreads& threads);

// head_project_argmax over rows [first, first + width) of a runtime's
// hidden rows ([rows][cols]); rows past `rows` are zero padding. Throws Error
// for a range outside the rows. The runtimes' head_argmax.
void head_argmax_of_rows(const Matrix& head, const float* hidden, int rows, int first, int count, int width,
                         int32_t* out, HeadWork& work, const HeadThreads& threads);

// One sequence's rows in head_argmax_together: rows [first, first + count)
// of its hidden rows ([last_T][cols]); its counters get its share.
struct SequenceHeadRows {
  const float* hidden = nullptr;
  int last_T = 0;
  int first = 0;
  int count = 0;
  HeadWork* work = nullptr;
};

// The argmax of every listed row in one projection (the engine step's
// LM head over several sequences: the backends' groups), concatenated in
// list order into out. Each sequence's counters get its own rows and
// logits, the head read once, one call. Throws Error (nothing projected)
// for rows outside a sequence's last forward.
void head_argmax_together(const Matrix& head, std::span<const SequenceHeadRows> rows, int32_t* out,
                          const HeadThreads& threads);

// One pass over the head with a running (max, index) per row; no logits are
// written. x: [count][cols]. Path Fused.
void head_fused_argmax(const Matrix& head, const float* x, int count, int32_t* out, HeadWork& work,
                       const HeadThreads& threads);

// Early-exit walk: row j of x ([rows][cols]) is projected on its own, its
// argmax goes to out[j], and the walk stops after the first j with
// out[j] != drafts[j] (or after `rows` rows). Returns the rows projected.
// Path Walk.
int head_walk_rows(const Matrix& head, const float* x, int rows, std::span<const int32_t> drafts, int32_t* out,
                   HeadWork& work, const HeadThreads& threads);

}  // namespace nextn::cpu
