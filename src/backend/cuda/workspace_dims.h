// The CUDA runtime's workspace row widths and row counts, derived from the
// config and the capacity in checked 64-bit arithmetic (core/checked_int.h):
// each is held in an int by the kernels' launch arguments, and the config's
// own checks bound its fields one product at a time, not these sums. Plain
// C++ (no CUDA types), built in every configuration so that CPU-only CI
// tests the limits too.
#pragma once
#include "io/config.h"

namespace nextn::cuda {

// kernels.h's kMaxRows (qwen35.cpp asserts they agree; this header has no CUDA types).
inline constexpr int kWorkspaceRows = 64;

struct WorkspaceDims {
  int proj_ld = 0;      // fp32 projections per row: max(q|gate + k + v, gate + up)
  int act_ld = 0;       // act inputs of o_proj / out_proj / down per row
  int gdn_ld = 0;       // GDN in-projections per row: qkv (conv_dim) + z + b + a
  int hidden_rows = 0;  // rows of the target's (and MTP's) post-norm hidden buffer
  int partial_positions = 0;  // positions the attention partials start with (they grow, Workspace::grow_partials)
};

// Positions the attention partials hold at first: 4 splits of 256 keys.
inline constexpr int kFirstPartialPositions = 1024;
// kernels.h's kAttnSplit: keys per attention split (this header has no CUDA types).
inline constexpr int kPartialSplitKeys = 256;

// The positions attention partials of `held` positions grow to for
// `positions` (CudaQwen35::hold_positions): `held` itself when it suffices,
// else the next doubling of its splits that holds them, at most `max_tokens`.
int grown_partial_positions(int held, int positions, int max_tokens);

// Throws Error unless 1 <= max_rows <= kWorkspaceRows: the rows per forward
// a CUDA sequence is built for (the size of its row-count workspaces).
void check_max_rows(int max_rows);

// Throws Error naming the first quantity that does not fit in an int, or a
// max_tokens below 1.
WorkspaceDims workspace_dims(const Qwen35Config& c, int max_tokens);

}  // namespace nextn::cuda
