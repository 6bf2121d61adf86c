#include "io/tensor_parallel_plan.h"

#include "core/error.h"

namespace nextn {
namespace {

// The r-th of n near-equal contiguous ranges of [0, total).
IndexRange share(int64_t total, int n, int r) { return {total * r / n, total * (r + 1) / n}; }

void check_heads(int heads, const char* field, int degree) {
  if (heads % degree != 0)
    fail("--tensor-parallel {}: the model's {} {} do not split evenly over {} ranks", degree, heads, field, degree);
}

void check_width(int width, const char* field, int degree) {
  if (width < degree)
    fail("--tensor-parallel {}: config.json's {} {} leaves a rank with no columns", degree, field, width);
}

}  // namespace

void check_tensor_parallel(const Qwen35Config& c, int degree) {
  if (degree < 1) fail("--tensor-parallel {}: expected a degree of at least 1", degree);
  check_heads(c.num_attention_heads, "attention query heads (num_attention_heads)", degree);
  if (c.num_key_value_heads % degree != 0 && degree % c.num_key_value_heads != 0)
    fail("--tensor-parallel {}: the model's {} KV heads (num_key_value_heads) neither split evenly over {} ranks "
         "nor replicate evenly across them",
         degree, c.num_key_value_heads, degree);
  check_heads(c.linear_num_key_heads, "Gated DeltaNet key heads (linear_num_key_heads)", degree);
  check_heads(c.linear_num_value_heads, "Gated DeltaNet value heads (linear_num_value_heads)", degree);
  if (c.moe) {
    check_width(c.moe_intermediate_size, "moe_intermediate_size", degree);
    check_width(c.shared_expert_intermediate_size, "shared_expert_intermediate_size", degree);
  } else {
    check_width(c.intermediate_size, "intermediate_size", degree);
  }
  check_width(c.vocab_size, "vocab_size", degree);
}

TensorParallelShard tensor_parallel_shard(const Qwen35Config& c, int degree, int rank) {
  check_tensor_parallel(c, degree);
  if (rank < 0 || rank >= degree) fail("internal: rank {} of {}", rank, degree);
  TensorParallelShard s;
  s.rank = rank;
  s.degree = degree;
  s.q_heads = share(c.num_attention_heads, degree, rank);
  if (c.num_key_value_heads >= degree) {
    s.kv_heads = share(c.num_key_value_heads, degree, rank);
  } else {  // replicated: the KV head of this rank's query heads (all in one group, checked above)
    const int group = c.num_attention_heads / c.num_key_value_heads;
    const int kv = int(s.q_heads.begin / group);
    s.kv_heads = {kv, kv + 1};
  }
  s.gdn_key_heads = share(c.linear_num_key_heads, degree, rank);
  s.gdn_value_heads = share(c.linear_num_value_heads, degree, rank);
  s.mlp = share(c.intermediate_size, degree, rank);
  s.expert_mlp = share(c.moe_intermediate_size, degree, rank);
  s.shared_expert_mlp = share(c.shared_expert_intermediate_size, degree, rank);
  s.vocab = share(c.vocab_size, degree, rank);
  s.config = c;
  s.config.num_attention_heads = int(s.q_heads.size());
  s.config.num_key_value_heads = int(s.kv_heads.size());
  s.config.linear_num_key_heads = int(s.gdn_key_heads.size());
  s.config.linear_num_value_heads = int(s.gdn_value_heads.size());
  s.config.intermediate_size = int(s.mlp.size());
  s.config.moe_intermediate_size = int(s.expert_mlp.size());
  s.config.shared_expert_intermediate_size = int(s.shared_expert_mlp.size());
  return s;
}

std::vector<IndexRange> tensor_parallel_ranges(TensorParallelSplit split, int64_t unit, const Qwen35Config& c,
                                               const TensorParallelShard& s) {
  auto times = [unit](IndexRange r) { return std::vector<IndexRange>{{r.begin * unit, r.end * unit}}; };
  switch (split) {
    case TensorParallelSplit::Replicated: return {};
    case TensorParallelSplit::QueryHeads: return times(s.q_heads);
    case TensorParallelSplit::KvHeads: return times(s.kv_heads);
    case TensorParallelSplit::GdnChannels: {
      const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, kd = c.key_dim();
      const IndexRange q{s.gdn_key_heads.begin * dk, s.gdn_key_heads.end * dk};
      const IndexRange v{s.gdn_value_heads.begin * dv, s.gdn_value_heads.end * dv};
      return {q, {kd + q.begin, kd + q.end}, {2 * kd + v.begin, 2 * kd + v.end}};
    }
    case TensorParallelSplit::GdnValueHeads: return times(s.gdn_value_heads);
    case TensorParallelSplit::Mlp: return times(s.mlp);
    case TensorParallelSplit::ExpertMlp: return times(s.expert_mlp);
    case TensorParallelSplit::SharedExpertMlp: return times(s.shared_expert_mlp);
    case TensorParallelSplit::Vocab: return times(s.vocab);
  }
  fail("internal: tensor-parallel split {}", int(split));
}

}  // namespace nextn
