// Which part of Qwen3.5's tensors each tensor-parallel rank holds
// (docs/tensor-parallel.md), backend-neutral: the CPU ranks load these
// parts today, GPU ranks would load the same. Heads are split into
// contiguous equal ranges (rank r holds the r-th); widths that are not
// heads (MLP intermediate columns, vocabulary rows) into ranges differing by
// at most one.
#pragma once
#include <vector>

#include "io/config.h"
#include "io/weight_slice.h"

namespace nextn {

struct TensorParallelShard {
  int rank = 0, degree = 1;
  IndexRange q_heads;          // attention query heads
  IndexRange kv_heads;         // attention KV heads: one, shared by several ranks, when degree > num_key_value_heads
  IndexRange gdn_key_heads;    // Gated DeltaNet key heads (q and k)
  IndexRange gdn_value_heads;  // Gated DeltaNet value heads (v, z, b, a, the recurrent state)
  IndexRange mlp;              // dense MLP intermediate columns (gate/up rows, down columns)
  IndexRange expert_mlp;       // every routed expert's intermediate columns (MoE)
  IndexRange shared_expert_mlp;  // the shared expert's intermediate columns (MoE)
  IndexRange vocab;            // LM head rows: the rank's share of the argmax
  // The full config with this rank's head counts and widths: the shapes its
  // layers compute with (vocab_size stays the whole vocabulary: embeddings
  // and token checks are replicated).
  Qwen35Config config;
};

// Throws Error naming --tensor-parallel when `degree` cannot split `c`: a
// degree below 1; query heads or Gated DeltaNet heads that do not divide
// evenly; KV heads neither divisible by the degree nor dividing it (then a
// rank's query heads would need two KV heads' groups); a width with fewer
// columns than ranks.
void check_tensor_parallel(const Qwen35Config& c, int degree);
// Rank `rank`'s part; check_tensor_parallel first.
TensorParallelShard tensor_parallel_shard(const Qwen35Config& c, int degree, int rank);

// Which of a shard's ranges cut a tensor along its split axis: named once
// here so that the CPU rank loader (backend/cpu/qwen35_shard.cpp) and code
// that walks tensors generically (make-checkpoint's per-rank sizes,
// io/synthetic_size.cpp) cut the same elements.
enum class TensorParallelSplit {
  Replicated,       // every rank holds all of it
  QueryHeads,       // the rank's query heads
  KvHeads,          // its KV heads (one, shared, when they are replicated)
  GdnChannels,      // Gated DeltaNet conv channels [q | k | v] of its key and value heads
  GdnValueHeads,    // its Gated DeltaNet value heads
  Mlp,              // dense MLP intermediate columns
  ExpertMlp,        // every routed expert's intermediate columns
  SharedExpertMlp,  // the shared expert's intermediate columns
  Vocab,            // LM head rows
};

// Rank s's element ranges along a tensor's split axis, in order: head
// ranges times `unit` elements per head (1 for the widths that are not
// heads; ignored for GdnChannels, whose head widths come from `c`). `c` is
// the whole model's config, not the rank's. Empty for Replicated.
std::vector<IndexRange> tensor_parallel_ranges(TensorParallelSplit split, int64_t unit, const Qwen35Config& c,
                                               const TensorParallelShard& s);

}  // namespace nextn
