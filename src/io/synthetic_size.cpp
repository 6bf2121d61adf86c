// `make-checkpoint --size-only`: the bytes a Qwen3.5 preset's checkpoint
// holds, in total and per tensor-parallel rank, from the generator's own
// tensor list (qwen35_synthetic_specs) and the plan the CPU ranks load
// (io/tensor_parallel_plan.h), so that the numbers are what make_checkpoint
// would write and what each rank would hold, without generating anything.
#include <algorithm>
#include <utility>

#include "core/error.h"
#include "io/config.h"
#include "io/synthetic.h"
#include "io/synthetic_specs.h"

namespace nextn {

namespace {

// The bytes rank s holds of one tensor.
uint64_t rank_bytes_of(const Spec& t, const Qwen35Config& c, const TensorParallelShard& s) {
  if (t.tp.split == TensorParallelSplit::Replicated) return t.nbytes();
  if (t.tp.axis < 0 || size_t(t.tp.axis) >= t.shape.size() || t.tp.per < 1)
    fail("internal: {}: split along axis {} of {} (per {})", t.name, t.tp.axis, t.shape.size(), t.tp.per);
  const int64_t extent = t.shape[size_t(t.tp.axis)];
  // The stored indices the ranges touch, [floor(b / per), ceil(e / per)),
  // merged: ranges that meet inside one group or block count it once.
  std::vector<std::pair<int64_t, int64_t>> idx;
  for (const IndexRange& r : tensor_parallel_ranges(t.tp.split, t.tp.unit, c, s))
    if (r.size() > 0) idx.push_back({r.begin / t.tp.per, (r.end + t.tp.per - 1) / t.tp.per});
  std::sort(idx.begin(), idx.end());
  int64_t held = 0, end = 0;
  for (const auto& [b, e] : idx) {
    const int64_t from = std::max(b, end);
    if (e > from) held += e - from;
    end = std::max(end, e);
  }
  if (end > extent)
    fail("internal: {}: the rank's ranges reach index {} of its axis of {}", t.name, end, extent);
  return t.nbytes() / uint64_t(extent) * uint64_t(held);
}

}  // namespace

uint64_t rank_tensor_bytes(const std::vector<Spec>& specs, const Qwen35Config& c, const TensorParallelShard& s) {
  uint64_t n = 0;
  for (const Spec& t : specs) n += rank_bytes_of(t, c, s);
  return n;
}

SyntheticCheckpointSize synthetic_checkpoint_size(const SyntheticPreset& p, const std::string& quant, int degree) {
  const std::vector<Spec> specs = qwen35_synthetic_specs(p, quant);  // checks the quant
  SyntheticCheckpointSize r;
  r.tensors = int(specs.size());
  for (const Spec& t : specs) r.total += t.nbytes();
  // The ranks' parts as the loader sees the config this preset writes.
  const Qwen35Config c = parse_qwen35_config(synthetic_config_json(p, quant), "config.json");
  check_tensor_parallel(c, degree);
  for (int rank = 0; rank < degree; ++rank)
    r.per_rank.push_back(rank_tensor_bytes(specs, c, tensor_parallel_shard(c, degree, rank)));
  return r;
}

}  // namespace nextn
