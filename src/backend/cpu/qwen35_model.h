// Private to the CPU Qwen3.5 runtime (qwen35.cpp: weights, trunk, rollback;
// qwen35_mtp.cpp: LM head, MTP head, the group's step calls): the model
// every sequence of a group shares and the one-sequence runtime over it.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/head.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/qwen35.h"
#include "backend/cpu/routed_experts.h"
#include "core/allocator.h"
#include "core/comm.h"
#include "core/fault.h"
#include "core/thread_pool.h"
#include "io/config.h"
#include "model/batch_runtime.h"
#include "model/bench_interfaces.h"
#include "model/kv_pool.h"

namespace nextn {
class Qwen35Checkpoint;
struct TensorParallelShard;
namespace cpu_qwen35 {

using cpu::Matrix;
using MatrixPtr = std::shared_ptr<Matrix>;

struct AttentionWeights {
  MatrixPtr q, k, v, o;
  std::vector<float> q_norm, k_norm;
};

struct GdnWeights {
  MatrixPtr qkv, z, b, a, out;
  std::vector<float> conv;  // [conv_dim][kernel]
  std::vector<float> a_log, dt_bias, norm;
};

// A MoE layer's MLP (qwen35_moe.cpp), E experts of width I, shared expert
// of width Is, hidden size H.
struct MoeWeights {
  MatrixPtr router;  // mlp.gate [E, H]
  using Expert = cpu::ExpertMlp;
  std::vector<Expert> experts;  // [E], by expert id
  MatrixPtr shared_gate, shared_up, shared_down;  // mlp.shared_expert.*: [Is, H], [Is, H], [H, Is]
  MatrixPtr shared_expert_gate;  // [1, H]: the shared expert's output is scaled by its sigmoid
};

struct LayerWeights {
  bool full = false;
  std::vector<float> input_norm, post_norm;
  AttentionWeights attn;
  GdnWeights gdn;
  MatrixPtr gate, up, down;  // the dense MLP: [I, H], [I, H], [H, I]; null in a MoE model
  std::shared_ptr<const MoeWeights> moe;  // a MoE model's MLP; null in a dense one
};

// A MoE layer's MLP weights of logical layer `layer` ("layers.3", "mtp.layers.0").
std::shared_ptr<const MoeWeights> load_moe(const Qwen35Checkpoint& ck, const std::string& layer);

struct CpuModel;
// Rank s.rank's part of the model (qwen35_shard.cpp) over `comm`; rank0:
// rank 0's model, whose replicated matrices the other ranks share (null when
// loading rank 0).
std::shared_ptr<CpuModel> load_tensor_parallel_rank(const Qwen35Checkpoint& ck, const TensorParallelShard& s,
                                                    const CpuRuntimeOptions& options, Communicator& comm,
                                                    const CpuModel* rank0);

// One attention layer's keys and values in a sequence's KV blocks
// (model/kv_pool.h): a block holds, for each attention layer in order and
// then the MTP layer, keys [kKvBlockTokens][kv_heads][head_dim] then values
// (CpuModel::kv_layer). Rows are written before they are read.
struct KvLayer {
  void* const* blocks = nullptr;  // the sequence's block table (KvBlockTable::data)
  size_t k_at = 0, v_at = 0;      // floats from a block's start to this layer's keys, values
  size_t row = 0;                 // floats per position: kv_heads * head_dim
  float* key(int pos) const { return at(pos) + k_at; }
  float* value(int pos) const { return at(pos) + v_at; }
  float* at(int pos) const {
    return static_cast<float*>(blocks[pos / kKvBlockTokens]) + size_t(pos % kKvBlockTokens) * row;
  }
};

// A sequence's buffer that grows with its rows: its blocks come from the
// group's allocator (CpuModel::allocator), taken by the step's reservation
// (CpuQwen35::reserve_step) so that the forward only resizes it within its
// capacity.
template <typename T>
struct RowAlloc {
  using value_type = T;
  Allocator* const* source = nullptr;  // &CpuModel::allocator (null there: host_allocator())
  const char* what = "row buffers";
  RowAlloc() = default;
  RowAlloc(Allocator* const* s, const char* w) : source(s), what(w) {}
  template <typename U>
  RowAlloc(const RowAlloc<U>& o) : source(o.source), what(o.what) {}
  Allocator& get() const { return source && *source ? **source : host_allocator(); }
  T* allocate(size_t n) { return static_cast<T*>(get().allocate(n * sizeof(T), what)); }
  void deallocate(T* p, size_t n) noexcept { get().release(p, n * sizeof(T)); }
  friend bool operator==(const RowAlloc& a, const RowAlloc& b) { return a.source == b.source; }
};
template <typename T>
using RowVector = std::vector<T, RowAlloc<T>>;

struct GdnState {
  explicit GdnState(Allocator* const* source = nullptr)
      : conv_before(RowAlloc<float>(source, "GDN state snapshots")),
        S_before(RowAlloc<float>(source, "GDN state snapshots")),
        mixed(RowAlloc<float>(source, "GDN rollback inputs")),
        q(RowAlloc<float>(source, "GDN rollback inputs")),
        k(RowAlloc<float>(source, "GDN rollback inputs")),
        v(RowAlloc<float>(source, "GDN rollback inputs")),
        g(RowAlloc<float>(source, "GDN rollback inputs")),
        beta(RowAlloc<float>(source, "GDN rollback inputs")) {}
  std::vector<float> conv;  // [kernel-1][conv_dim]: pre-conv rows, oldest first
  std::vector<float> S;     // [v_heads][dk][dv]
  // What rollback needs from the last forward. The snapshot is taken only
  // for forwards of more than one token: rollback of a one-token forward
  // keeps it whole.
  RowVector<float> conv_before, S_before;  // snapshot
  RowVector<float> mixed;                  // [T][conv_dim] pre-conv rows
  RowVector<float> q, k, v, g, beta;       // recurrence inputs per token
};

// One sequence's rows inside a layer call over the rows of several
// sequences: rows [row0, row0 + T) of the call, at positions pos.. of that
// sequence, whose caches for this layer are kv (attention) or gdn (GDN).
struct Segment {
  KvLayer kv;
  GdnState* gdn = nullptr;
  int pos = 0, row0 = 0, T = 0;
};

// What every sequence of a group shares: the config, the weights and the
// thread pool. Layer calls take the rows of one or more sequences: the
// matrix products run over all of them at once (each output element is summed
// in gemm.h's fixed order, so a row's values do not depend on its neighbours), attention and
// the GDN recurrence per sequence.
struct CpuModel {
  CpuModel(const Qwen35Checkpoint& ckpt, const CpuRuntimeOptions& options);
  // A tensor-parallel rank's model with the rank's shapes (`rank_config`,
  // io/tensor_parallel_plan.h) and no weights yet: load_tensor_parallel_rank
  // (qwen35_shard.cpp) loads its part.
  CpuModel(const Qwen35Config& rank_config, const CpuRuntimeOptions& options, Communicator* comm);

  void embed(const int32_t* tokens, int T, float* x) const;
  void check_tokens(std::span<const int32_t> tokens) const;
  void decoder_layer(const LayerWeights& L, std::span<const Segment> segs, int N, float* x);
  void attention(const AttentionWeights& W, std::span<const Segment> segs, int N, const float* xn, float* out);
  void gdn_mixer(const GdnWeights& W, std::span<const Segment> segs, int N, const float* xn, float* out);
  // One token of the recurrence for value heads [h0, h1).
  void gdn_step(GdnState& st, int h0, int h1, const float* q, const float* k, const float* v, const float* g,
                const float* beta, float* o) const;
  void mlp(const LayerWeights& L, int N, const float* xn, float* out);
  // The sparse MoE block over N rows (qwen35_moe.cpp): each row's experts
  // are added in rising expert id, whatever rows share the call.
  void moe_mlp(const MoeWeights& W, int N, const float* xn, float* out);
  // Output rows [0, rows) of w (-1: all).
  void matmul(const Matrix& w, const float* x, int T, float* y, int64_t rows = -1) {
    cpu::matmul(w, x, T, y, 0, rows, &pool, min_chunk_work);
  }
  cpu::HeadThreads head_threads() { return {&pool, min_chunk_work}; }

  Qwen35Config cfg;
  ThreadPool pool;
  int64_t min_chunk_work;
  Fault fault = Fault::None;  // CpuRuntimeOptions::fault
  // Tensor parallelism: the rank's communicator, which sums the partial
  // outputs of the row-parallel projections (o_proj, out_proj, the MLP's
  // down projections) across ranks; null for a model alone.
  Communicator* comm = nullptr;
  Allocator* allocator = nullptr;  // the sequences' row buffers (set_allocator, a test seam; null: host)
  // The sequences' KV blocks, made on first use (the layers loaded): every
  // attention layer's, then the MTP layer's.
  KvBlockPool& kv_pool();
  int kv_layers() const;  // attention layers, plus the MTP layer
  // Attention layer `index` (the MTP layer: kv_layers() - 1) in `blocks`.
  KvLayer kv_layer(const KvBlockTable& blocks, int index) const;
  MatrixPtr embed_tokens, lm_head;
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  // MTP head
  bool has_mtp = false;
  MatrixPtr mtp_fc;
  std::vector<float> mtp_norm_emb, mtp_norm_hid, mtp_norm;
  LayerWeights mtp_layer;

 private:
  std::unique_ptr<KvBlockPool> kv_pool_;
};

// One sequence: its caches, states and counters over a shared CpuModel.
class CpuQwen35 final : public ModelRuntime, public MtpHead, public VerifyHeadArms {
 public:
  CpuQwen35(std::shared_ptr<CpuModel> model, int max_tokens);
  ~CpuQwen35() override;

  const Qwen35Config& config() const override { return m_->cfg; }
  const char* backend_name() const override { return "cpu"; }
  int target_length() const override { return length_; }
  void target_forward(std::span<const int32_t> tokens) override;
  void reserve_step(std::span<const int32_t> tokens, int mtp_end) override;
  void target_rollback(int keep) override;
  // The product's head: exactly its rows (the padded arm at width count).
  void head_argmax(int first, int count, int32_t* out) override { head_argmax_padded(first, count, count, out); }
  void head_logits(int row, float* out) override;
  HeadWork head_work() const override { return head_work_; }
  void reset() override;
  MtpHead* mtp() override { return m_->has_mtp ? this : nullptr; }

  // ---- MtpHead (model/mtp_head.h) ----
  MtpWork mtp_work() const override { return mtp_work_; }
  int mtp_length() const override { return mtp_length_; }
  void mtp_forward(std::span<const int32_t> next_tokens, int first_row) override;
  void mtp_step(int32_t token) override;
  void mtp_argmax(int count, int32_t* out) override;
  void mtp_logits(float* out) override;
  void mtp_rollback(int length) override;
  int draft_vocab() const override { return draft_vocab_; }
  void set_draft_vocab(int n) override { draft_vocab_ = effective_draft_vocab(n, m_->cfg.vocab_size); }

  // ---- VerifyHeadArms (model/bench_interfaces.h) ----
  void head_argmax_padded(int first, int count, int width, int32_t* out) override;
  void head_argmax_fused(int first, int count, int32_t* out) override;
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override;

  const CpuModel* model() const { return m_.get(); }
  // The post-norm hidden rows of the last target forward ([rows][H]) and
  // of the last MTP call ([entries][H]): what the LM head projects. A
  // tensor-parallel runtime projects its ranks' vocabulary shares of them
  // itself (qwen35_tp.cpp).
  std::span<const float> hidden_rows() const { return {hidden_.data(), size_t(last_T_) * size_t(m_->cfg.hidden_size)}; }
  std::span<const float> mtp_hidden_rows() const {
    return {mtp_hidden_.data(), size_t(mtp_last_n_) * size_t(m_->cfg.hidden_size)};
  }
  // target_forward(tokens[i]) on seqs[i], one trunk forward over all rows;
  // every sequence is checked before any changes.
  static void forward_together(std::span<CpuQwen35* const> seqs, std::span<const std::span<const int32_t>> tokens);
  // The group's step calls (model/batch_runtime.h), one projection or MTP
  // layer call for all the sequences.
  static void head_argmax_together(std::span<CpuQwen35* const> seqs, std::span<const SequenceRows> rows, int32_t* out);
  static void mtp_forward_together(std::span<CpuQwen35* const> seqs,
                                   std::span<const std::span<const int32_t>> next_tokens);
  static void mtp_draft_together(std::span<CpuQwen35* const> seqs, std::span<const int> n, int32_t* out,
                                 StepWork& work);

 private:
  // Checks a forward of `tokens` and takes the KV blocks it writes.
  void check_forward(std::span<const int32_t> tokens);
  // Grows the row buffers to what a forward of T rows and, with mtp, an MTP
  // call of up to T entries write.
  void reserve_rows(int T, bool mtp);
  void check_mtp_forward(std::span<const int32_t> next_tokens, int first_row) const;
  // The MTP layer over several sequences' new entries: tokens[s] paired with
  // the rows at hidden[s] ([n][H]), appended to seqs[s]'s MTP cache.
  static void mtp_run(std::span<CpuQwen35* const> seqs, std::span<const std::span<const int32_t>> tokens,
                      std::span<const float* const> hidden);
  // Argmax over each sequence's draft vocabulary of its last MTP entry, one
  // projection for all: into *out[s].
  static void mtp_argmax_last(std::span<CpuQwen35* const> seqs, std::span<int32_t* const> out);

  std::shared_ptr<CpuModel> m_;
  int max_tokens_;
  KvBlockTable kv_;  // the KV blocks: block b holds positions [64b, 64b + 64)
  std::vector<GdnState> gdn_;  // per layer (GDN layers only)
  int length_ = 0;
  int forward_start_ = 0;  // length before the last target_forward
  int last_T_ = 0;         // rows of the last target_forward still in the caches
  RowVector<float> hidden_;  // [last_T][H], post final norm
  HeadWork head_work_;         // counted by the head ops (backend/cpu/head.h)
  MtpWork mtp_work_;           // counted in mtp_run / mtp_step / mtp_argmax
  int mtp_length_ = 0;
  int mtp_last_n_ = 0;
  RowVector<float> mtp_hidden_;  // [last n][H], post mtp.norm
  int draft_vocab_;                // the MTP projections cover ids [0, draft_vocab_)
};

}  // namespace cpu_qwen35
}  // namespace nextn
