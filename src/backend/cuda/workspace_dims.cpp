#include "backend/cuda/workspace_dims.h"

#include <algorithm>
#include <cstdint>

#include "core/checked_int.h"
#include "core/error.h"

namespace nextn::cuda {

void check_max_rows(int max_rows) {
  if (max_rows < 1 || max_rows > kWorkspaceRows)
    fail("--backend cuda: rows per forward {} outside [1, {}]", max_rows, kWorkspaceRows);
}

WorkspaceDims workspace_dims(const Qwen35Config& c, int max_tokens) {
  if (max_tokens < 1) fail("--backend cuda: max_tokens {} must be positive", max_tokens);
  const int64_t hd = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, I = c.intermediate_size;
  const int64_t kd = int64_t(c.linear_num_key_heads) * c.linear_key_head_dim;
  const int64_t vd = int64_t(c.linear_num_value_heads) * c.linear_value_head_dim;
  WorkspaceDims d;
  d.proj_ld = checked_int(std::max(Hq * hd * 2 + 2 * Hkv * hd, 2 * I),
                          "--backend cuda: projection row width max(2 * num_attention_heads * head_dim + "
                          "2 * num_key_value_heads * head_dim, 2 * intermediate_size)");
  d.act_ld = checked_int(std::max({I, Hq * hd, vd}), "--backend cuda: activation row width");
  d.gdn_ld = checked_int(2 * kd + vd + vd + 2 * int64_t(c.linear_num_value_heads),
                         "--backend cuda: GDN projection row width (conv_dim + value_dim + 2 * linear_num_value_heads)");
  // A forward of up to 64 rows, and 64 more for the MTP chain's rows: a
  // longer forward (a prompt chunk) grows them (Workspace::grow_hidden).
  d.hidden_rows = 2 * kWorkspaceRows;
  // The attention partials: a few splits, grown with the positions in use.
  d.partial_positions = std::min(max_tokens, kFirstPartialPositions);
  return d;
}

int grown_partial_positions(int held, int positions, int max_tokens) {
  if (positions <= held) return held;
  int64_t splits = std::max<int64_t>(1, (int64_t(held) + kPartialSplitKeys - 1) / kPartialSplitKeys);
  while (splits * kPartialSplitKeys < positions) splits *= 2;
  return int(std::min<int64_t>(splits * kPartialSplitKeys, max_tokens));
}

}  // namespace nextn::cuda
