// The LM head's device counters (kernels.h) as the runtime reports them
// (model/runtime.h): one field for one field, copied, never recomputed.
#pragma once
#include <cstdint>

#include "backend/cuda/kernels.h"
#include "model/runtime.h"

namespace nextn::cuda {

inline HeadWork head_work_of(const HeadCounters& c) {
  HeadWork w;
  w.rows_projected = int64_t(c.rows_projected);
  w.head_bytes_read = int64_t(c.head_bytes_read);
  w.logits_bytes_written = int64_t(c.logits_bytes_written);
  w.walk_rows = int64_t(c.walk_rows);
  w.head_calls = int64_t(c.head_calls);
  w.last_path = HeadPath(c.last_path);
  return w;
}

}  // namespace nextn::cuda
