// Private to the CUDA runtime (qwen35*.cpp): the CudaQwen35 class, the
// weights it reads (CudaQwen35Weights, shared by the sequences of a
// CudaSequenceGroup) and the group pass types. A CudaQwen35 is its parts
// (docs/cuda-backend.md, "The runtime in parts"): SequenceState
// (sequence_state.h), Workspace (workspace.h), PrefillWorkspace
// (prefill_workspace.h), GraphCache (graph_cache.h) and Profiler
// (profiler.h); its layers run through layer.h's decoder_layer.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/device_handles.h"
#include "backend/cuda/graph_cache.h"
#include "backend/cuda/group_entry.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/layer.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/prefill_workspace.h"
#include "backend/cuda/profiler.h"
#include "backend/cuda/qwen35.h"
#include "backend/cuda/sequence_state.h"
#include "backend/cuda/weight_upload.h"
#include "backend/cuda/workspace.h"
#include "core/error.h"
#include "core/fault.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"
#include "model/bench_interfaces.h"

namespace nextn::cuda {

// One projection, possibly fused from several checkpoint matrices (rows
// concatenated): parts[i] writes output columns [offset, offset + rows).
struct Linear {
  struct Part {
    DevMatrix m;
    int offset;
  };
  std::vector<Part> parts;
  int rows = 0, cols = 0;
};

struct AttnWeights {
  Linear qkv;  // [q|gate interleaved per head (Hq*2*hd) ; k (Hkv*hd) ; v (Hkv*hd)]
  DevMatrix o;
  float *q_norm = nullptr, *k_norm = nullptr;
};

// A Qwen3.5 MoE layer's MLP (moe_layer.h): the dense projections of the
// router and the shared expert, and the routed experts stacked.
struct MoeLayer {
  int E = 0, k = 0, I = 0, Is = 0;  // experts, per token, expert width, shared expert width
  Linear gate_in;          // [shared gate (Is) ; shared up (Is) ; router (E) ; shared_expert_gate (1)] x H
  DevMatrix shared_down;   // [H, Is]
  DevExperts gate_up;      // E x [2I, H]: gate rows, then up
  DevExperts down;         // E x [H, I]
};

struct LayerWeights {
  bool full = false;
  float *input_norm = nullptr, *post_norm = nullptr;
  AttnWeights attn;
  Linear gdn_in;  // [qkv (conv_dim) ; z (vd) ; b (Hv) ; a (Hv)]
  DevMatrix gdn_out;
  int gdn_index = -1;  // row of the GDN table
  Linear gate_up;      // [gate (I) ; up (I)] (dense MLP)
  DevMatrix down;
  bool is_moe = false;  // the MLP is `moe` instead
  MoeLayer moe;
  int kv_index = -1;  // full attention: the sequence's KV cache pair (SequenceState::kv)
};

// One checkpoint's weights on the device, read by every sequence over them
// (make_cuda_runtime: one; a CudaSequenceGroup: several). Immutable once
// loaded; the caches, GDN state and workspace are each sequence's own.
struct CudaQwen35Weights {
  // Checks the device and the shapes, then that the weights and one sequence
  // of `reserve_tokens` positions fit in free device memory (0: the weights
  // and one sequence's fixed buffers), then uploads in the mode of
  // options.act, FP8 matrices multiplied as options.fp8_matmul says (W8A8
  // is refused for a checkpoint with no FP8 matrix). The caller has checked
  // reserve_tokens (workspace_dims).
  CudaQwen35Weights(const Qwen35Checkpoint& ck, int reserve_tokens, const RuntimeOptions& options);
  CudaQwen35Weights(const CudaQwen35Weights&) = delete;
  CudaQwen35Weights& operator=(const CudaQwen35Weights&) = delete;

  Qwen35Config cfg;
  Act act = Act::BF16;
  Fp8Matmul fp8_matmul = Fp8Matmul::W8A16;
  int fp8_matrices = 0;  // matrices uploaded as FP8 (the W8A8 ones, under --fp8-matmul w8a8)
  DeviceMemory mem;
  DevMatrix embed, head;
  float* final_norm = nullptr;
  std::vector<LayerWeights> layers;
  float* inv_freq = nullptr;
  bool has_mtp = false;
  DevMatrix mtp_fc;
  float *mtp_norm_emb = nullptr, *mtp_norm_hid = nullptr, *mtp_norm = nullptr;
  LayerWeights mtp_layer;
  int kv_layers = 0;                // KV cache pairs a sequence holds (full layers, then the MTP's)
  std::vector<cuda::GdnLayer> gdn;  // per GDN layer: conv_w, a_log, dt_bias, norm_w (the rest is per sequence)
  // Split-K scratch the largest split matrix needs in calls of up to
  // max_rows rows (a sequence sizes its scratch by it).
  int64_t splitk_floats_for(int max_rows) const;

 private:
  float* upload_floats(const std::vector<float>& v, const char* what);
  using Use = WeightUse;  // who reads a matrix (weight_upload.h)
  DevMatrix upload_matrix(const std::vector<WeightRef>& parts, const char* what, bool splittable,
                          Use use = Use::Matmul);
  Linear upload_linear(const std::vector<WeightRef>& parts, const char* what, Use use = Use::Matmul);
  LayerWeights load_layer(const Qwen35Checkpoint& ck, const std::string& p, bool full);
  MoeLayer load_moe(const Qwen35Checkpoint& ck, const std::string& p);
};

// Device bytes one sequence of `max_tokens` positions, built for forwards of
// up to `max_rows` rows, takes beyond the weights (KV caches, GDN state and
// projections, logits), for the up-front checks.
size_t sequence_bytes(const Qwen35Config& c, int max_tokens, Act act, bool has_mtp, int max_rows = kMaxRows);
// The widest forward that runs on the graphs alone: with the prefill GEMMs on
// (RuntimeOptions::prefill_gemm) in bf16, a wider forward sends all but its
// last kMaxRows rows through them (qwen35_prefill.cpp); otherwise any width.
int graph_only_rows(bool prefill_gemm, Act act);

class CudaQwen35;

// The most sequences a CudaSequenceGroup holds (the server's batches); each
// holds its own workspace (its logits alone are kMaxRows x vocab fp32)
// beside its caches. A chained MTP draft step has one row per sequence.
constexpr int kMaxGroupSequences = 32;
static_assert(kMaxGroupSequences <= kMaxRows);

// One sequence's rows in a group forward: rows [row, row + T) of the lead's
// decode workspace (the lead is the slice at row 0).
struct GroupSlice {
  CudaQwen35* seq;
  int row, T;
  // The device arguments its attention reads (position): nullptr for the
  // sequence's own Workspace::d_args; a chained MTP draft step points into
  // its staged chain arguments (qwen35_group_mtp.cpp).
  const StepArgs* args = nullptr;
};

// Tables a group's lead stages per call (group_entry.h): one per pass of the
// call (a chained MTP draft: a step's layer and its head gather, per step).
constexpr int kGroupTables = 2 * kMaxRows;

// A group pass's shape, what its graphs are keyed by: its entries padded to
// a multiple of kGroupEntryStep (padding entries have T = 0), its rows to a
// multiple of kGroupRowStep (padding rows embed token 0; nothing reads their
// results, and no real row's bits depend on them: every row-wise op is per
// row and the matmuls are batch-invariant), the widest slice to a power of
// two. A server whose batch mix changes every step meets few shapes.
constexpr int kGroupEntryStep = 4;
constexpr int kGroupRowStep = 8;
struct GroupPassShape {
  int rows = 0;         // real rows
  int padded_rows = 0;  // rows the pass runs
  int entries = 0;      // table entries
  int max_T = 1;        // at least every slice's T
  std::vector<std::pair<uint64_t, int>> key() const { return {{uint64_t(entries), padded_rows}, {uint64_t(max_T), 0}}; }
};
GroupPassShape group_pass_shape(std::span<const GroupSlice> slices, int max_rows);

// As a group's lead: the tables of its passes (kGroupTables of
// kMaxGroupSequences entries), staged on the host, copied once per call
// (CudaQwen35::staged_group_table, upload_group_tables).
struct GroupStaging {
  DeviceMemory mem;
  cuda::GroupEntry* d_tables = nullptr;     // [kGroupTables][kMaxGroupSequences]
  PinnedBuffer<cuda::GroupEntry> h_tables;  // [kGroupTables][kMaxGroupSequences], staged for d_tables
  Event copied;                             // the last copy of the staged tables
  cuda::GdnReplay* d_replay = nullptr;      // [kMaxGroupSequences] a group rollback's table
  PinnedBuffer<cuda::GdnReplay> h_replay;   // [kMaxGroupSequences], staged for d_replay
  Event replay_copied;                      // the last copy of h_replay
};

class CudaQwen35 final : public ModelRuntime, public MtpHead, public VerifyHeadArms, public RuntimeProbe {
 public:
  // A sequence over its own copy of the weights (make_cuda_runtime).
  // max_rows: the most rows one call works on at once (a forward chunk, head
  // argmax width, walk rows, MTP draft chain), in [1, kMaxRows]; every
  // row-count workspace is sized by it (qwen35.cpp). options: the graphs,
  // profile, PDL, prefill, walk and fault fields (core/options.h).
  CudaQwen35(const Qwen35Checkpoint& ckpt, int max_tokens, int max_rows = kMaxRows, const RuntimeOptions& options = {});
  // A sequence over shared weights and the group's KV pool
  // (CudaSequenceGroup::add_sequence; null: a pool of its own); the weights
  // carry the activation mode.
  CudaQwen35(std::shared_ptr<const CudaQwen35Weights> weights, int max_tokens, int max_rows = kMaxRows,
             const RuntimeOptions& options = {}, std::shared_ptr<KvBlockPool> kv_pool = nullptr);
  ~CudaQwen35() override;

  const Qwen35Config& config() const override { return cfg_; }
  const char* backend_name() const override { return "cuda"; }
  int target_length() const override { return state_.length; }
  void target_forward(std::span<const int32_t> tokens) override;
  // check_forward, the MTP capacity, and the prefill workspace of a long
  // forward (the one allocation a forward, head or MTP call makes after
  // construction), from the group's allocator (qwen35_prefill.cpp).
  void reserve_step(std::span<const int32_t> tokens, int mtp_end) override;
  void target_rollback(int keep) override;
  // The product's head: exactly its rows (the padded arm at width count).
  void head_argmax(int first, int count, int32_t* out) override { head_argmax_padded(first, count, count, out); }
  void head_logits(int row, float* out) override;
  HeadWork head_work() const override;
  void reset() override;
  MtpHead* mtp() override { return w_->has_mtp ? this : nullptr; }

  // ---- MtpHead (model/mtp_head.h) ----
  int mtp_length() const override { return state_.mtp_length; }
  MtpWork mtp_work() const override { return state_.mtp_work; }
  void mtp_forward(std::span<const int32_t> next_tokens, int first_row) override;
  void mtp_step(int32_t token) override;
  void mtp_argmax(int count, int32_t* out) override;
  void mtp_rollback(int length) override;
  void mtp_draft(int n, int32_t* out) override;
  void mtp_logits(float* out) override;
  int draft_vocab() const override { return draft_vocab_ > 0 ? draft_vocab_ : V_; }
  void set_draft_vocab(int n) override { draft_vocab_ = effective_draft_vocab(n, V_); }

  // ---- VerifyHeadArms (model/bench_interfaces.h) ----
  void head_argmax_padded(int first, int count, int width, int32_t* out) override;
  void head_argmax_fused(int first, int count, int32_t* out) override;
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override;

  // ---- RuntimeProbe (model/bench_interfaces.h) ----
  std::vector<OpTiming> op_timings() const override;
  void clear_op_timings() override { profiler_.clear(); }
  int64_t kernels_launched() const override { return graphs_.kernels_launched(); }
  uint64_t expert_bytes_read() const override;
  int64_t host_syncs() const override { return ws_.host_syncs; }
  std::vector<MemoryUse> device_memory() const override;

  const CudaQwen35Weights* weights() const { return w_.get(); }
  int max_rows() const { return max_rows_; }
  uint64_t sequence_id() const { return id_; }
  // The group's allocator slot (SequenceGroup::set_allocator, a test seam):
  // what the prefill workspace is taken from; null or *null: cudaMalloc.
  void share_allocator(std::shared_ptr<Allocator* const> source) { allocator_ = std::move(source); }
  // What target_forward checks before any change (token ids, capacity).
  void check_forward(std::span<const int32_t> tokens) const;
  // Room for `positions` positions (target and MTP): KV blocks, their table
  // entries copied on this sequence's stream, and attention partials for
  // them. The partials grow to the next power of two of splits (at most the
  // capacity's); growing waits for the stream once (not counted) and drops
  // the graphs, which hold the old buffer and its split stride.
  void hold_positions(int positions);
  // Hidden rows for a forward of T rows (and the MTP chain's beyond them):
  // they grow, in whole passes, with the longest forward so far.
  void hold_rows(int T);
  // One trunk forward over the slices' rows (qwen35_group.cpp): this
  // sequence is slices[0] (row 0); every slice has been check_forward'ed and
  // the rows add up to at most max_rows(). Each sequence ends as its own
  // target_forward would leave it.
  void forward_group(std::span<const GroupSlice> slices, std::span<const std::span<const int32_t>> tokens);
  // The other sequences' streams wait (on the device) for the work queued
  // on this one's so far: after a forward on its own stream (a prompt
  // chunk), the step's head, which waits for the streams of its sequences,
  // then waits for it too, and no backlog of chunks builds up for the
  // prompt's first head to meet.
  void join_streams(std::span<CudaQwen35* const> others);
  // One host wait (counted) for the work queued on this stream and the others'.
  void wait_with(std::span<CudaQwen35* const> others);
  // The LM-head argmax of rows[i] of seqs[i] for every i in one projection
  // on this sequence's (the lead's, seqs[0]'s) workspace and stream
  // (qwen35_group.cpp): the rows are copied into the lead's head input, so
  // each row's bits are its own head_argmax's (the matmul is batch-invariant).
  // The rows add up to at most max_rows(). Each sequence's head counters get
  // its own share: its rows and logits, the head read once, one call.
  void head_argmax_group(std::span<CudaQwen35* const> seqs, std::span<const SequenceRows> rows, int32_t* out);
  // What mtp_forward(next_tokens[i], 0) on each slice's sequence does, as
  // one MTP-layer pass over all their rows on this sequence's (the lead's,
  // slices[0]'s) workspace (qwen35_group_mtp.cpp). Every slice has been
  // check_mtp_forward'ed; the rows add up to at most max_rows().
  void mtp_forward_group(std::span<const GroupSlice> slices, std::span<const std::span<const int32_t>> next_tokens);
  // What mtp_draft(n[i], ...) on seqs[i] does, each chained step one pass
  // over every sequence still drafting; n is non-increasing, n[0] >= 1, at
  // most kMaxGroupSequences sequences, every n[i] checked (check_mtp_draft), one
  // draft vocabulary. out[i] gets seqs[i]'s n[i] drafts (each out[i] has
  // room for n[0]). One copy back.
  void mtp_draft_group(std::span<CudaQwen35* const> seqs, std::span<const int> n, std::span<int32_t* const> out);
  // What target_rollback(keep[i]) on seqs[i] does, for every i, as one
  // launch of the GDN replay over all of them on this sequence's (the
  // lead's, seqs[0]'s) stream (qwen35_group.cpp); at most
  // kMaxGroupSequences sequences, each keep checked (rollback_replay_of).
  void rollback_group(std::span<CudaQwen35* const> seqs, std::span<const int> keep);
  // target_rollback's checks: the tokens of the last chunk a rollback to
  // `keep` replays (0 when none), or -1 when it changes nothing.
  int rollback_replay_of(int keep) const;
  // What mtp_forward(next_tokens, 0) and mtp_draft(n, ...) check before any change.
  void check_mtp_forward(std::span<const int32_t> next_tokens, int first_row) const;
  void check_mtp_draft(int n) const;
  bool has_mtp() const { return w_->has_mtp; }

 private:
  // steps (capturable: launches only)
  void forward_chunk(int T);
  // What the layers of this sequence's steps take (layer.h): its shapes,
  // its workspace's scratch, its stream and profiler; its rows and state.
  LayerContext layer_context();
  StepBuffers decode_buffers() const;
  SequenceView sequence_view() const { return {ws_.d_args, state_.d_kv_blocks}; }
  // The group forward (qwen35_group.cpp): what its graph runs over `rows`
  // rows (padded) and the pass's table.
  void group_chunk(const GroupPass& pass, int rows);
  // The group MTP passes (qwen35_group_mtp.cpp): the MTP layer over the
  // pass's rows, inputs gathered from each entry's `in` rows and embedded
  // from `tokens` (device, one per row); outputs into each entry's `out` rows.
  void group_mtp_chunk(const GroupPass& pass, int rows, const int32_t* tokens);
  // This sequence's entry in a group pass (its rows there, its caches and
  // state); `args` gives its position and its gather and scatter rows.
  cuda::GroupEntry group_entry(int row, int T, const StepArgs* args) const;
  // As a group's lead: host table `index` of kMaxGroupSequences entries
  // (waits until the previous call's copy has read the staging), its device
  // twin, and the copy of tables [0, n) to the device on the lead's stream.
  cuda::GroupEntry* staged_group_table(int index);
  const cuda::GroupEntry* group_table(int index) const;
  void upload_group_tables(int n);
  // What a rollback to `keep` replaying `replay_n` tokens leaves besides the
  // GDN state: the length, and the last forward's rows and chunk.
  void rollback_bookkeeping(int keep, int replay_n);
  // prefill (qwen35_prefill.cpp): forwards longer than kMaxRows, all but their
  // last <= kMaxRows tokens, in chunks of kPrefillRows through PrefillGemm.
  bool prefill_applies(int T) const;
  void prefill(std::span<const int32_t> tokens);
  void prefill_release();
  void prefill_chunk(int n);
  void prefill_allocate();
  void mtp_chunk(int n, bool from_target);
  void head_project(int width, const HeadTally& tally);
  void fused_argmax_rows(GraphKind kind, const DevMatrix& head, const void* rows, int first, int count, int32_t* out,
                         const HeadTally& tally);
  // The LM head as the MTP drafts read it: rows [0, draft_vocab()) of the
  // same memory (a prefix of every layout: row-major, or the streamed
  // layout's 128-row tiles stored tile after tile; the kernels bound their
  // epilogues by rows). Its graphs are keyed by the row count.
  DevMatrix draft_head() const;
  HeadTally tally(HeadPath path) const { return {ws_.d_head, int(path)}; }
  // head_walk's variants (qwen35_head.cpp); each returns the rows taken.
  int walk_while(int rows, int nd, int32_t* out);
  void record_walk_body(int rows, int nd, cudaStream_t s, cudaGraphConditionalHandle handle, int use_handle);
  int walk_flag(int rows, int nd, int32_t* out);
  int walk_as_batched(std::span<const int32_t> drafts, int rows, int32_t* out);

  // host side
  void check_tokens(std::span<const int32_t> tokens) const;
  StepArgs args() const;
  // Throws Error when `rows` exceeds the rows this sequence was built for.
  void check_rows(const char* what, int rows) const;

  // The weights (shared by a group's sequences); declared first so that they
  // go last.
  std::shared_ptr<const CudaQwen35Weights> w_;
  Qwen35Config cfg_;
  int max_tokens_;
  int max_rows_ = kMaxRows;  // rows the decode workspace holds (constructor)
  Act act_ = Act::BF16;  // the weights' mode
  // Default flag (core/options.h): on the H200 the flag walk's verify rounds
  // were 0.3-1.7 points of batched faster than the while walk's at every K in
  // 3..32 (0.8B and 4B q4 shapes, ABBA; docs/cuda-backend.md): a WHILE
  // iteration costs about what launching a cancelled row does.
  WalkVariant walk_variant_ = WalkVariant::Flag;
  Fault fault_ = Fault::None;  // RuntimeOptions::fault
  // RuntimeOptions::prefill_gemm: false keeps every forward on the graphs.
  bool prefill_gemm_enabled_ = true;
  std::shared_ptr<Allocator* const> allocator_;  // share_allocator
  int H_ = 0, V_ = 0;
  cuda::AttnShape attn_shape_{};
  cuda::GdnShape gdn_shape_{};
  int draft_vocab_ = 0;  // set_draft_vocab's value; 0: the whole vocabulary (V_)
  uint64_t id_ = 0;      // unique among the process's sequences (orders a group's sequences)

  // The parts (device_handles.h owners inside), declared so that they go in
  // reverse: graphs, then the prefill workspace (its cuBLAS handle is bound
  // to stream_; the destructor has waited for the stream, and no graph holds
  // its pointers), then streams, then device memory. A constructor that
  // throws releases whatever of them it had made.
  SequenceState state_;
  Workspace ws_;
  GroupStaging lead_;  // as a group's lead
  Stream stream_;
  Stream body_stream_;  // captures the while walk's body graph
  Event group_event_;   // orders this sequence's stream around a group forward
  // While a prompt needs it (qwen35_prefill.cpp): allocated by a long
  // forward's reserve_step or prefill, released by the next forward that
  // needs none, reset() or the destructor.
  std::unique_ptr<PrefillWorkspace> prefill_;
  Profiler profiler_;
  GraphCache graphs_;  // on stream_, marking through profiler_
};

}  // namespace nextn::cuda
