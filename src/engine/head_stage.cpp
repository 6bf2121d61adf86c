#include "engine/head_stage.h"

#include <algorithm>
#include <vector>

namespace nextn {

void BatchedHead::pick(SequenceGroup& group, std::span<const HeadPick> picks) {
  if (picks.empty()) return;
  std::vector<SequenceRows> rows;
  size_t total = 0;
  for (const HeadPick& p : picks) {
    rows.push_back({p.sequence, p.first, p.count});
    total += size_t(p.count);
  }
  std::vector<int32_t> out(total);
  group.head_argmax_together(rows, out.data());
  size_t at = 0;
  for (const HeadPick& p : picks) {
    std::copy_n(out.begin() + long(at), p.count, p.out);
    at += size_t(p.count);
  }
}

}  // namespace nextn
