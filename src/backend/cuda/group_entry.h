// One sequence's slice of a group pass, as the group kernels read it from a
// device table (docs/cuda-backend.md, "Several sequences"). The host fills
// one table per pass and copies it before the pass's graph runs, so the
// graph holds only the table's address and the pass's shape (entries, rows,
// widest slice): a server whose batch mix changes every step replays the
// graphs it has instead of launching every kernel again.
#pragma once

namespace nextn::cuda {

struct GdnLayer;

struct GroupEntry {
  int row = 0, T = 0;              // its rows [row, row + T) of the pass; T = 0: padding, no work
  const int* pos = nullptr;        // its first position (device)
  const int* parity = nullptr;     // its GDN state buffer parity (device)
  const GdnLayer* gdn = nullptr;   // [GDN layers] its GDN table (conv state, S, private projection rows)
  void* const* kv_blocks = nullptr;  // its KV block table (kernels.h, KvBlocks)
  float* attn_partial = nullptr;   // its attention partials, for its max_splits
  int max_splits = 0;              // ceil(its Workspace::partial_positions / kAttnSplit)
  int pad_ = 0;
  const void* in = nullptr;        // gather: its source rows (hidden or MTP hidden) [rows][width]
  void* out = nullptr;             // scatter: its destination rows [rows][width]
  const int* first_row = nullptr;  // gather: first source row (device)
  const int* n_real = nullptr;     // gather: rows before zero padding (device)
  const int* out_row = nullptr;    // scatter: first destination row (device)
};

}  // namespace nextn::cuda
