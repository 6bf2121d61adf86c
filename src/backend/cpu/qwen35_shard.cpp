// A tensor-parallel rank's part of Qwen3.5 (docs/tensor-parallel.md), loaded
// into a CpuModel with the rank's shapes, which then runs the ordinary CPU
// forward (qwen35.cpp) over them:
//  - column-parallel (rows of the weight): q/k/v projections by heads, the
//    GDN in_proj_qkv/z/b/a by heads (with the conv taps, A_log and dt_bias of
//    those channels and heads), MLP and expert gate/up by intermediate columns;
//  - row-parallel (columns of the weight): o_proj, out_proj and the down
//    projections, whose partial outputs CpuModel::decoder_layer sums across
//    ranks (Communicator::all_reduce_sum);
//  - vocabulary-parallel: the LM head's rows (projected by qwen35_tp.cpp);
//  - replicated: embeddings, norms, the MoE router and shared-expert gate,
//    mtp.fc (shared with rank 0's copy where it is a matrix).
#include <string>
#include <vector>

#include "backend/cpu/qwen35_tp.h"
#include "backend/cpu/qwen35_model.h"
#include "io/checkpoint.h"
#include "io/moe_experts.h"
#include "io/tensor_parallel_plan.h"
#include "io/weight_slice.h"

namespace nextn {
namespace cpu_qwen35 {
namespace {

// The part of `w` in rows `rows` and columns `cols` (empty: all).
MatrixPtr load_part(const WeightRef& w, std::vector<IndexRange> rows, std::vector<IndexRange> cols = {}) {
  const WeightSlice part(w, rows, cols);
  return Matrix::load(part.ref());
}

// The rank's element ranges of one split kind (io/tensor_parallel_plan.h).
std::vector<IndexRange> part(TensorParallelSplit split, int64_t unit, const Qwen35Checkpoint& ck,
                             const TensorParallelShard& s) {
  return tensor_parallel_ranges(split, unit, ck.config(), s);
}

std::vector<IndexRange> times(std::vector<IndexRange> ranges, int64_t k) {
  for (IndexRange& r : ranges) r = {r.begin * k, r.end * k};
  return ranges;
}

using Split = TensorParallelSplit;

AttentionWeights load_attention_part(const Qwen35Checkpoint& ck, const std::string& p, const TensorParallelShard& s) {
  const Qwen35Config& c = ck.config();
  const int H = c.hidden_size, hd = c.head_dim;
  AttentionWeights a;
  // q_proj rows are [query | gate] per head: a head range is one row range.
  a.q = load_part(ck.matrix(p + ".q_proj", int64_t(c.num_attention_heads) * hd * 2, H),
                  part(Split::QueryHeads, 2 * hd, ck, s));
  a.k = load_part(ck.matrix(p + ".k_proj", int64_t(c.num_key_value_heads) * hd, H), part(Split::KvHeads, hd, ck, s));
  a.v = load_part(ck.matrix(p + ".v_proj", int64_t(c.num_key_value_heads) * hd, H), part(Split::KvHeads, hd, ck, s));
  a.o = load_part(ck.matrix(p + ".o_proj", H, int64_t(c.num_attention_heads) * hd), {},
                  part(Split::QueryHeads, hd, ck, s));
  a.q_norm = ck.norm(p + ".q_norm", hd, true);
  a.k_norm = ck.norm(p + ".k_norm", hd, true);
  return a;
}

GdnWeights load_gdn_part(const Qwen35Checkpoint& ck, const std::string& g, const TensorParallelShard& s) {
  const Qwen35Config& c = ck.config();
  const int H = c.hidden_size, Hv = c.linear_num_value_heads;
  const int64_t dv = c.linear_value_head_dim;
  // The conv channels are [q (key heads) | k (key heads) | v (value heads)].
  const std::vector<IndexRange> channels = part(Split::GdnChannels, 1, ck, s), v = part(Split::GdnValueHeads, dv, ck, s);
  const std::vector<IndexRange> heads = part(Split::GdnValueHeads, 1, ck, s);
  GdnWeights w;
  w.qkv = load_part(ck.matrix(g + ".in_proj_qkv", c.conv_dim(), H), channels);
  w.z = load_part(ck.matrix(g + ".in_proj_z", c.value_dim(), H), v);
  w.b = load_part(ck.matrix(g + ".in_proj_b", Hv, H), heads);
  w.a = load_part(ck.matrix(g + ".in_proj_a", Hv, H), heads);
  w.out = load_part(ck.matrix(g + ".out_proj", H, c.value_dim()), {}, v);
  const int K = c.linear_conv_kernel_dim;
  w.conv = slice_vector(ck.conv1d(g + ".conv1d", c.conv_dim(), K), times(channels, K));  // [channel][K]
  w.a_log = slice_vector(ck.vector(g + ".A_log", Hv), heads);
  w.dt_bias = slice_vector(ck.vector(g + ".dt_bias", Hv), heads);
  w.norm = ck.norm(g + ".norm", c.linear_value_head_dim, false);  // per value-head element: replicated
  return w;
}

std::shared_ptr<const MoeWeights> load_moe_part(const Qwen35Checkpoint& ck, const std::string& layer,
                                                const TensorParallelShard& s) {
  const Qwen35Config& c = ck.config();
  const int H = c.hidden_size, Is = c.shared_expert_intermediate_size;
  const std::string p = layer + ".mlp";
  auto W = std::make_shared<MoeWeights>();
  // Every rank routes every row itself (the same bits everywhere) and runs
  // its columns of each chosen expert: experts split, none sharded away.
  W->router = Matrix::load(ck.matrix(p + ".gate", c.num_experts, H));
  const ExpertLayout layout = expert_layout(ck, layer);
  const std::vector<IndexRange> cols = part(Split::ExpertMlp, 1, ck, s), shared = part(Split::SharedExpertMlp, 1, ck, s);
  for (int e = 0; e < c.num_experts; ++e) {
    const ExpertMatrices m = expert_matrices(ck, layer, layout, e);
    W->experts.push_back({load_part(m.gate, cols), load_part(m.up, cols), load_part(m.down, {}, cols)});
  }
  W->shared_gate = load_part(ck.matrix(p + ".shared_expert.gate_proj", Is, H), shared);
  W->shared_up = load_part(ck.matrix(p + ".shared_expert.up_proj", Is, H), shared);
  W->shared_down = load_part(ck.matrix(p + ".shared_expert.down_proj", H, Is), {}, shared);
  W->shared_expert_gate = Matrix::load(ck.matrix(p + ".shared_expert_gate", 1, H));
  return W;
}

LayerWeights load_layer_part(const Qwen35Checkpoint& ck, const std::string& p, bool full, const TensorParallelShard& s) {
  const Qwen35Config& c = ck.config();
  const int H = c.hidden_size;
  LayerWeights L;
  L.full = full;
  L.input_norm = ck.norm(p + ".input_layernorm", H, true);
  L.post_norm = ck.norm(p + ".post_attention_layernorm", H, true);
  if (full)
    L.attn = load_attention_part(ck, p + ".self_attn", s);
  else
    L.gdn = load_gdn_part(ck, p + ".linear_attn", s);
  if (c.moe) {
    L.moe = load_moe_part(ck, p, s);
    return L;
  }
  const std::vector<IndexRange> cols = part(Split::Mlp, 1, ck, s);
  L.gate = load_part(ck.matrix(p + ".mlp.gate_proj", c.intermediate_size, H), cols);
  L.up = load_part(ck.matrix(p + ".mlp.up_proj", c.intermediate_size, H), cols);
  L.down = load_part(ck.matrix(p + ".mlp.down_proj", H, c.intermediate_size), {}, cols);
  return L;
}

}  // namespace

std::shared_ptr<CpuModel> load_tensor_parallel_rank(const Qwen35Checkpoint& ck, const TensorParallelShard& s,
                                                    const CpuRuntimeOptions& options, Communicator& comm,
                                                    const CpuModel* rank0) {
  auto m = std::make_shared<CpuModel>(s.config, options, &comm);
  const Qwen35Config& c = ck.config();
  const int H = c.hidden_size;
  const WeightRef embed = ck.matrix("embed_tokens", c.vocab_size, H);
  m->embed_tokens = rank0 ? rank0->embed_tokens : Matrix::load(embed);
  m->lm_head = load_part(ck.lm_head(), part(Split::Vocab, 1, ck, s));  // a tied head: the embedding's rows
  m->final_norm = ck.norm("norm", H, true);
  for (int i = 0; i < c.num_hidden_layers; ++i)
    m->layers.push_back(load_layer_part(ck, "layers." + std::to_string(i), c.full_attention[size_t(i)], s));
  m->has_mtp = ck.mtp_layers() > 0;
  if (m->has_mtp) {
    m->mtp_fc = rank0 ? rank0->mtp_fc : Matrix::load(ck.matrix("mtp.fc", H, 2 * H));
    m->mtp_norm_emb = ck.norm("mtp.pre_fc_norm_embedding", H, true);
    m->mtp_norm_hid = ck.norm("mtp.pre_fc_norm_hidden", H, true);
    m->mtp_norm = ck.norm("mtp.norm", H, true);
    m->mtp_layer = load_layer_part(ck, "mtp.layers.0", true, s);
  }
  return m;
}

}  // namespace cpu_qwen35
}  // namespace nextn
