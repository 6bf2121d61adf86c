// The CUDA runtime for Qwen3.5: host side (buffers, graphs, steps, reset). The
// class is in qwen35_runtime.h, the weights (CudaQwen35Weights, shared by the
// sequences of a group: qwen35_group.cpp) in qwen35_load.cpp, the LM-head
// entry points in qwen35_head.cpp, the MTP head in qwen35_mtp.cpp; the
// kernels live in the .cu files beside this one, behind kernels.h. A sequence owns its caches, GDN state,
// workspace, stream and graphs.
//
// Same semantics as the CPU runtime (backend/cpu/qwen35.cpp), step by step:
//  - a target_forward of T <= R tokens (R = the rows the sequence is built
//    for, at most 64) is one captured graph per T; longer forwards run as
//    consecutive chunks of R through the same graphs, which gives the same
//    bits because every kernel is batch-invariant (prompts of more than 64
//    tokens take the prefill GEMMs for all but their last <= 64 tokens:
//    qwen35_prefill.cpp);
//  - everything that changes between steps (positions, the GDN buffer parity,
//    row offsets, token ids, drafts) is uploaded into one device struct
//    (StepArgs) before a replay; kernels read it from device memory;
//  - GDN conv and recurrent state live in buffer pairs: a forward reads one
//    and writes the other, so rollback replays the accepted prefix from the
//    untouched state (snapshot + replay without a copy);
//  - attention KV rollback is the length change;
//  - the only host syncs are the copies of result tokens (and of logits for
//    head_logits).
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35.h"
#include "backend/cuda/qwen35_runtime.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/workspace_dims.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/checkpoint.h"

namespace nextn {

std::string cuda_device_summary() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("--backend cuda: no CUDA device available ({})", cudaGetErrorString(e));
  }
  if (n == 0) fail("--backend cuda: no CUDA device available (cudaGetDeviceCount found none)");
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  if (p.major != 9)
    fail("--backend cuda: this build targets sm_90a (Hopper); device 0 is {} with compute capability {}.{}", p.name,
         p.major, p.minor);
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                     double(p.totalGlobalMem) / double(1ull << 30));
}

namespace cuda {

// ---------------------------------------------------------------------------
// construction (the weights are loaded in qwen35_load.cpp)

namespace {

// make_cuda_runtime's weights, loaded once the capacity has passed its own
// checks (a bad capacity costs no device work).
std::shared_ptr<const CudaQwen35Weights> weights_for_one_sequence(const Qwen35Checkpoint& ck, int max_tokens,
                                                                  int max_rows, Activations act) {
  check_max_rows(max_rows);
  (void)workspace_dims(ck.config(), max_tokens);
  return std::make_shared<const CudaQwen35Weights>(ck, max_tokens, act);
}

}  // namespace

CudaQwen35::CudaQwen35(const Qwen35Checkpoint& ck, int max_tokens, int max_rows, const RuntimeOptions& options)
    : CudaQwen35(weights_for_one_sequence(ck, max_tokens, max_rows, options.act), max_tokens, max_rows, options) {}

CudaQwen35::CudaQwen35(std::shared_ptr<const CudaQwen35Weights> weights, int max_tokens, int max_rows,
                       const RuntimeOptions& options)
    : w_(std::move(weights)),
      cfg_(w_->cfg),
      max_tokens_(max_tokens),
      max_rows_(max_rows),
      act_(w_->act),
      use_graphs_(options.cuda_graphs),
      walk_variant_(options.walk),
      fault_(options.fault),
      profile_(options.profile),
      prefill_gemm_enabled_(options.prefill_gemm) {
  check_max_rows(max_rows);
  const WorkspaceDims dims = workspace_dims(cfg_, max_tokens);  // sizes checked before any device work
  // PdlPolicy::Default: forwards of more than one row (verify blocks) go
  // without PDL at hidden size >= 5120. Measured (docs/benchmark_results/decode-h200-2026-12-01.md,
  // call 7): the K = 4 and 8 rounds at the 27B q4 shape take 5-6 % less
  // without it, at 4B (2560) and 0.8B (1024) 1.5-5 % more.
  pdl_off_all_ = options.pdl == PdlPolicy::Off;
  pdl_off_multi_row_ =
      options.pdl == PdlPolicy::MultiRowOff || (options.pdl == PdlPolicy::Default && cfg_.hidden_size >= 5120);
  {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t need = sequence_bytes(cfg_, max_tokens, act_, w_->has_mtp, max_rows_);
    if (need > free_b)
      fail("--backend cuda: a sequence of {} tokens needs about {:.2f} GiB of device memory (caches and "
           "workspace) beside the weights, but only {:.2f} of {:.2f} GiB are free",
           max_tokens, double(need) / kGiB, double(free_b) / kGiB, double(total_b) / kGiB);
  }
  stream_ = make_stream();
  body_stream_ = make_stream();
  group_event_ = make_event(cudaEventDisableTiming);
  group_tables_event_ = make_event(cudaEventDisableTiming);
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id++;
  const auto& c = cfg_;
  H_ = c.hidden_size;
  V_ = c.vocab_size;
  const int hd = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  attn_shape_ = {Hq, Hkv, hd, c.rotary_dim(), c.rms_norm_eps};
  gdn_shape_ = {c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                c.linear_conv_kernel_dim, c.rms_norm_eps};
  const size_t as = size_t(act_size(act_));

  // caches
  const size_t kv_bytes = size_t(max_tokens) * Hkv * hd * as;
  kv_bytes_ = kv_bytes;
  kv_.resize(size_t(w_->kv_layers));
  for (auto& kv : kv_) {
    kv.k = mem_.alloc(kv_bytes, "the KV cache");
    kv.v = mem_.alloc(kv_bytes, "the KV cache");
    CUDA_CHECK(cudaMemset(kv.k, 0, kv_bytes));
    CUDA_CHECK(cudaMemset(kv.v, 0, kv_bytes));
  }
  {  // the caches' pointers on the device, for the group passes (GroupEntry::kv)
    std::vector<void*> table;
    for (const auto& kv : kv_) table.push_back(kv.k), table.push_back(kv.v);
    d_kv_table_ = mem_.alloc<void*>(std::max<size_t>(1, table.size()) * sizeof(void*), "the KV cache table");
    if (!table.empty())
      CUDA_CHECK(cudaMemcpy(d_kv_table_, table.data(), table.size() * sizeof(void*), cudaMemcpyHostToDevice));
  }
  const int cd = c.conv_dim(), Hv = c.linear_num_value_heads;
  const int gdn_ld = dims.gdn_ld;
  gdn_host_ = w_->gdn;  // the weights' pointers; the state and row pointers below are this sequence's
  for (auto& t : gdn_host_) {
    const size_t conv_state = size_t(2) * (c.linear_conv_kernel_dim - 1) * cd * 4 + 16;
    const size_t S = size_t(2) * Hv * c.linear_key_head_dim * c.linear_value_head_dim * 4;
    gdn_conv_bytes_ = conv_state;
    gdn_S_bytes_ = S;
    t.proj = mem_.alloc<float>(size_t(max_rows_) * gdn_ld * 4, "GDN projections");
    t.proj_ld = gdn_ld;
    t.conv_out = mem_.alloc<float>(size_t(max_rows_) * cd * 4, "GDN conv outputs");
    t.conv_state = mem_.alloc<float>(conv_state, "GDN conv state");
    t.S = mem_.alloc<float>(S, "GDN recurrent state");
    CUDA_CHECK(cudaMemset(t.conv_state, 0, conv_state));
    CUDA_CHECK(cudaMemset(t.S, 0, S));
    CUDA_CHECK(cudaMemset(const_cast<float*>(t.proj), 0, size_t(max_rows_) * gdn_ld * 4));
  }

  // workspace
  const int R = max_rows_;
  proj_ld_ = dims.proj_ld;
  act_ld_ = dims.act_ld;
  hidden_rows_ = dims.hidden_rows;
  d_args_ = mem_.alloc<StepArgs>(sizeof(StepArgs), "step arguments");
  d_chain_args_ = mem_.alloc<StepArgs>(sizeof(StepArgs) * 2 * size_t(R), "draft chain arguments");
  CUDA_CHECK(cudaMemset(d_args_, 0, sizeof(StepArgs)));
  x_ = mem_.alloc<float>(size_t(R) * H_ * 4, "activations");
  xn_ = mem_.alloc(size_t(R) * 2 * H_ * as, "activations");
  proj_ = mem_.alloc<float>(size_t(R) * proj_ld_ * 4, "activations");
  act_buf_ = mem_.alloc(size_t(R) * act_ld_ * as, "activations");
  q_ = mem_.alloc<float>(size_t(R) * Hq * hd * 4, "activations");
  attn_partial_ = mem_.alloc<float>(size_t(cuda::attn_partial_floats(attn_shape_, max_tokens, R)) * 4, "attention");
  const size_t splitk_bytes = size_t(w_->splitk_floats_for(R)) * 4;
  splitk_ = mem_.alloc<float>(splitk_bytes, "split-K partials");
  CUDA_CHECK(cudaMemset(splitk_, 0, splitk_bytes));  // the streamed kernel's tile counters start at zero
  hidden_ = mem_.alloc(size_t(hidden_rows_) * H_ * as, "hidden rows");
  mtp_hidden_ = mem_.alloc(size_t(hidden_rows_) * H_ * as, "MTP hidden rows");
  CUDA_CHECK(cudaMemset(hidden_, 0, size_t(hidden_rows_) * H_ * as));
  CUDA_CHECK(cudaMemset(mtp_hidden_, 0, size_t(hidden_rows_) * H_ * as));
  mtp_src_ = mem_.alloc(size_t(R) * H_ * as, "MTP inputs");
  head_in_ = mem_.alloc(size_t(R) * H_ * as, "head inputs");
  logits_ = mem_.alloc<float>(size_t(R) * V_ * 4, "logits");
  pairs_ = mem_.alloc(size_t(cuda::argmax_pairs_bytes(w_->head, R)), "argmax pairs");
  argmax_scratch_ = mem_.alloc(size_t(cuda::argmax_scratch_bytes(V_)) * R, "argmax");
  d_out_ = mem_.alloc<int32_t>(size_t(R + 2) * 4, "tokens");
  d_group_drafts_ = mem_.alloc<int32_t>(size_t(R) * kMaxGroupSequences * 4, "group drafts");
  const size_t group_entries = size_t(kGroupTables) * kMaxGroupSequences;
  d_group_tables_ = mem_.alloc<cuda::GroupEntry>(group_entries * sizeof(cuda::GroupEntry), "group tables");
  h_group_tables_ = make_pinned<cuda::GroupEntry>(group_entries);
  d_walk_ = mem_.alloc<int>(2 * sizeof(int), "walk counters");
  d_head_ = mem_.alloc<HeadCounters>(sizeof(HeadCounters), "head counters");
  CUDA_CHECK(cudaMemset(d_head_, 0, sizeof(HeadCounters)));
  for (const auto& L : w_->layers)
    if (!L.full) gdn_host_[size_t(L.gdn_index)].y = act_buf_;
  gdn_table_ = mem_.alloc<cuda::GdnLayer>(std::max<size_t>(1, gdn_host_.size()) * sizeof(cuda::GdnLayer), "GDN table");
  if (!gdn_host_.empty())
    CUDA_CHECK(cudaMemcpy(gdn_table_, gdn_host_.data(), gdn_host_.size() * sizeof(cuda::GdnLayer),
                          cudaMemcpyHostToDevice));

  h_args_ = make_pinned<StepArgs>(kArgSlots);
  h_out_ = make_pinned<int32_t>(size_t(R) + 2);
  h_chain_args_ = make_pinned<StepArgs>(size_t(2) * size_t(R));
  for (auto& e : arg_events_) e = make_event(cudaEventDisableTiming);
  CUDA_CHECK(cudaDeviceSynchronize());
}

// The members release themselves (device_handles.h); work still queued on
// the stream must finish before its buffers go.
CudaQwen35::~CudaQwen35() {
  if (stream_) (void)cudaStreamSynchronize(stream_);
}

void CudaQwen35::check_rows(const char* what, int rows) const {
  if (rows > max_rows_)
    fail("{}: {} rows, but this runtime was built for forwards of at most {} rows (its workspaces hold that many)",
         what, rows, max_rows_);
}

// Every buffer the constructor zeroes that a sequence writes, zeroed again in
// place: the captured graphs keep their device pointers and stay valid.
void CudaQwen35::reset() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  head_shift_ = HeadWork{};
  auto zero = [&](void* p, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_)); };
  for (const auto& kv : kv_) {
    zero(kv.k, kv_bytes_);
    zero(kv.v, kv_bytes_);
  }
  for (auto& t : gdn_host_) {
    zero(t.conv_state, gdn_conv_bytes_);
    zero(t.S, gdn_S_bytes_);
    zero(const_cast<float*>(t.proj), size_t(max_rows_) * size_t(t.proj_ld) * 4);
  }
  const size_t as = size_t(act_size(act_));
  zero(d_args_, sizeof(StepArgs));
  zero(hidden_, size_t(hidden_rows_) * H_ * as);
  zero(mtp_hidden_, size_t(hidden_rows_) * H_ * as);
  zero(d_walk_, 2 * sizeof(int));
  zero(d_head_, sizeof(HeadCounters));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  prefill_release();
  length_ = forward_start_ = last_T_ = last_chunk_T_ = parity_ = 0;
  mtp_length_ = mtp_last_n_ = 0;
  mtp_work_ = MtpWork{};
}

// ---------------------------------------------------------------------------
// where the time goes (profile mode)

const char* graph_kind_name(GraphKind kind) {
  switch (kind) {
    case GraphKind::Forward: return "forward";
    case GraphKind::MtpForward: return "mtp_forward";
    case GraphKind::MtpStep: return "mtp_step";
    case GraphKind::HeadArgmax: return "head_argmax";
    case GraphKind::HeadFused: return "head_fused";
    case GraphKind::Walk: return "walk";
    case GraphKind::Logits: return "logits";
    case GraphKind::MtpArgmax: return "mtp_argmax";
    case GraphKind::Rollback: return "rollback";
    case GraphKind::MtpDraft: return "mtp_draft";
    case GraphKind::WalkWhile: return "walk_while";
    case GraphKind::MtpLogits: return "mtp_logits";
    case GraphKind::GroupForward: return "group_forward";
    case GraphKind::GroupMtpForward: return "group_mtp_forward";
    case GraphKind::GroupMtpDraft: return "group_mtp_draft";
  }
  return "?";
}

int CudaQwen35::count_kernel_nodes(cudaGraph_t g) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) CUDA_CHECK(cudaGraphGetNodes(g, nodes.data(), &n));
  int kernels = 0;
  for (auto node : nodes) {
    cudaGraphNodeType t{};
    CUDA_CHECK(cudaGraphNodeGetType(node, &t));
    if (t == cudaGraphNodeTypeKernel) ++kernels;
  }
  return kernels;
}

void CudaQwen35::mark(const char* op) {
  if (capturing_marks_ == nullptr) return;
  capturing_marks_->emplace_back(make_event(), prof_prefix_ + op);
  cudaStreamCaptureStatus status{};
  CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
  // In a capture the event becomes a graph node; outside one (the prefill) a plain record.
  if (status == cudaStreamCaptureStatusActive)
    CUDA_CHECK(cudaEventRecordWithFlags(capturing_marks_->back().first, stream_, cudaEventRecordExternal));
  else
    CUDA_CHECK(cudaEventRecord(capturing_marks_->back().first, stream_));
}

void CudaQwen35::add_intervals(const std::vector<std::pair<Event, std::string>>& marks) {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i + 1 < marks.size(); ++i) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, marks[i].first, marks[i + 1].first));
    auto& slot = op_ms_[marks[i].second];
    slot.first += 1;
    slot.second += double(ms);
  }
}

// The weights this sequence reads (shared with the other sequences of a
// group, so a group's total counts them once) and its own buffers.
std::vector<MemoryUse> CudaQwen35::device_memory() const {
  std::map<std::string, uint64_t> sum;
  for (const auto& [what, bytes] : w_->mem.by_use()) sum[what] += uint64_t(bytes);
  for (const auto& [what, bytes] : mem_.by_use()) sum[what] += uint64_t(bytes);
  for (const auto& [what, bytes] : prefill_mem_.by_use()) sum[what] += uint64_t(bytes);
  std::vector<MemoryUse> v;
  for (const auto& [what, bytes] : sum) v.push_back({what, bytes});
  return v;
}

std::vector<OpTiming> CudaQwen35::op_timings() const {
  std::vector<OpTiming> v;
  for (const auto& [op, t] : op_ms_) v.push_back({op, t.first, t.second});
  return v;
}

// ---------------------------------------------------------------------------
// host side

StepArgs CudaQwen35::args() const {
  StepArgs a{};
  a.parity = parity_;
  return a;
}

// Copies `a` to the device struct through a pinned ring slot; waits only if
// the slot's previous copy has not run yet (16 uploads behind).
void CudaQwen35::upload(const StepArgs& a) {
  const int slot = arg_slot_;
  arg_slot_ = (arg_slot_ + 1) % kArgSlots;
  CUDA_CHECK(cudaEventSynchronize(arg_events_[slot]));
  h_args_[slot] = a;
  CUDA_CHECK(cudaMemcpyAsync(d_args_, &h_args_[slot], sizeof(StepArgs), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(arg_events_[slot], stream_));
}

// The one host sync of a call: copy results back.
void CudaQwen35::fetch(const void* src, size_t bytes, void* dst) {
  if (bytes <= sizeof(int32_t) * size_t(max_rows_ + 2)) {
    CUDA_CHECK(cudaMemcpyAsync(h_out_, src, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(dst, h_out_, bytes);
  } else {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
}

void CudaQwen35::check_tokens(std::span<const int32_t> tokens) const {
  for (int32_t t : tokens)
    if (t < 0 || t >= cfg_.vocab_size) fail("token id {} is outside the vocabulary [0, {})", t, cfg_.vocab_size);
}

// ---------------------------------------------------------------------------
// steps

void CudaQwen35::run_linear(const Linear& lin, const void* x, int T, int ldx, float* y, int ldy,
                            const StepBuffers& b) {
  for (const auto& p : lin.parts) project(p.m, x, T, ldx, y + p.offset, ldy, false, b);
}

void CudaQwen35::project(const DevMatrix& W, const void* x, int T, int ldx, float* y, int ldy, bool accumulate,
                         const StepBuffers& b) {
  if (b.prefill) prefill_project(W, x, T, ldx, y, ldy, accumulate);
  else cuda::matmul(W, x, act_, T, ldx, y, ldy, accumulate, splitk_, stream_);
}

StepBuffers CudaQwen35::decode_buffers() const {
  return {x_, xn_, proj_, act_buf_, q_, gdn_table_, &gdn_host_, d_args_->tokens, false};
}

void CudaQwen35::decoder_layer(const LayerWeights& L, int T, const StepBuffers& b) {
  const auto& c = cfg_;
  const float eps = c.rms_norm_eps;
  const int* pos = &d_args_->pos;
  mark("norm");
  cuda::rmsnorm(b.x, Act::F32, H_, L.input_norm, eps, T, H_, b.xn, act_, H_, nullptr, stream_);
  if (L.full) {
    const int qd = c.num_attention_heads * c.head_dim;
    mark("attn.qkv");
    run_linear(L.attn.qkv, b.xn, T, H_, b.proj, proj_ld_, b);
    if (b.group != nullptr) {
      mark("attn.core");
      cuda::attention_group(attn_shape_, b.group->entries, b.group->n, b.group->max_T, L.kv_index, b.proj, proj_ld_,
                            L.attn.q_norm, L.attn.k_norm, w_->inv_freq, b.q, b.act, act_, stream_);
    } else {
      const KvCache& kv = kv_[size_t(L.kv_index)];
      mark("attn.prepare");
      cuda::attn_prepare(attn_shape_, b.proj, proj_ld_, T, L.attn.q_norm, L.attn.k_norm, w_->inv_freq, pos, b.q, kv.k,
                         kv.v, act_, stream_);
      mark("attn.core");
      if (b.prefill) prefill_attention(T, kv.k, kv.v, b);
      else
        cuda::attention(attn_shape_, b.q, kv.k, kv.v, act_, b.proj, proj_ld_, T, pos, max_tokens_, attn_partial_,
                        b.act, stream_);
    }
    mark("attn.o");
    project(L.attn.o, b.act, T, qd, b.x, H_, true, b);
  } else {
    const cuda::GdnLayer& g = (*b.gdn_host)[size_t(L.gdn_index)];
    mark("gdn.in");
    run_linear(L.gdn_in, b.xn, T, H_, const_cast<float*>(g.proj), g.proj_ld, b);
    if (b.group != nullptr) {
      mark("gdn.rec");
      cuda::gdn_group(gdn_shape_, b.group->entries, b.group->n, b.group->max_T, L.gdn_index, g.proj, b.act, act_,
                      stream_);
    } else {
      mark("gdn.conv");
      cuda::gdn_conv(gdn_shape_, b.gdn_table, L.gdn_index, 1, T, &d_args_->parity, 0, false, stream_);
      mark("gdn.rec");
      if (b.prefill && proj_ld_ >= c.value_dim())  // b.proj is free here: the raw outputs
        cuda::gdn_prefill_recurrence(gdn_shape_, b.gdn_table, L.gdn_index, T, &d_args_->parity, b.proj, stream_);
      else
        cuda::gdn_recurrence(gdn_shape_, b.gdn_table, L.gdn_index, 1, T, &d_args_->parity, 0, false, act_, stream_);
    }
    mark("gdn.out");
    project(L.gdn_out, b.act, T, c.value_dim(), b.x, H_, true, b);
  }
  mark("norm");
  cuda::rmsnorm(b.x, Act::F32, H_, L.post_norm, eps, T, H_, b.xn, act_, H_, nullptr, stream_);
  mark("mlp.gate_up");
  run_linear(L.gate_up, b.xn, T, H_, b.proj, proj_ld_, b);
  mark("mlp.swiglu");
  cuda::swiglu(b.proj, proj_ld_, c.intermediate_size, T, b.act, act_, act_ld_, stream_);
  mark("mlp.down");
  project(L.down, b.act, T, act_ld_, b.x, H_, true, b);
}

void CudaQwen35::forward_chunk(int T) {
  mark("embed");
  cuda::embed_rows(w_->embed, d_args_->tokens, T, x_, H_, stream_);
  const StepBuffers b = decode_buffers();
  for (auto& L : w_->layers) decoder_layer(L, T, b);
  mark("norm");
  cuda::rmsnorm(x_, Act::F32, H_, w_->final_norm, cfg_.rms_norm_eps, T, H_, hidden_, act_, H_, &d_args_->out_row,
                stream_);
}

void CudaQwen35::check_forward(std::span<const int32_t> tokens) const {
  const int T = int(tokens.size());
  if (T <= 0) fail("target_forward: no tokens");
  if (length_ + T > max_tokens_) fail("sequence of {} tokens exceeds the cache capacity {}", length_ + T, max_tokens_);
  if (T > hidden_rows_ - kMaxRows) fail("target_forward: {} tokens exceed the hidden-row buffer", T);
  check_tokens(tokens);
}

void CudaQwen35::target_forward(std::span<const int32_t> tokens) {
  check_forward(tokens);
  const int T = int(tokens.size());
  forward_start_ = length_;
  int done = 0;
  if (prefill_applies(T)) {
    // All but the last <= kMaxRows tokens through the prefill GEMMs; the rest
    // (what a rollback can undo) through the graphs below. The split does not
    // depend on max_rows_, so every sequence prefills the same tokens.
    done = T - ((T - 1) % kMaxRows + 1);
    prefill(tokens.first(size_t(done)));
  } else {
    prefill_release();  // the prompt's workspace, once decoding has begun
  }
  while (done < T) {
    const int n = std::min(max_rows_, T - done);
    StepArgs a = args();
    a.pos = length_ + done;
    a.out_row = done;
    std::copy(tokens.begin() + done, tokens.begin() + done + n, a.tokens);
    upload(a);
    replay(GraphKind::Forward, n, 0, [&] { forward_chunk(n); });
    parity_ ^= 1;
    done += n;
    last_chunk_T_ = n;
  }
  length_ += T;
  last_T_ = T;
}

void CudaQwen35::target_rollback(int keep) {
  if (keep < 1 || keep > last_T_) fail("target_rollback: keep {} outside [1, {}]", keep, last_T_);
  if (keep == last_T_) return;
  const int chunk_start = last_T_ - last_chunk_T_;
  if (keep < chunk_start)
    fail("target_rollback: the CUDA backend undoes at most the last {} tokens of a forward ({} of {} to undo)",
         last_chunk_T_, last_T_ - keep, last_T_);
  const int replay_n = keep - chunk_start;  // tokens of the last chunk to keep (may be 0)
  if (!gdn_host_.empty()) {
    StepArgs a = args();
    upload(a);
    const int n_gdn = int(gdn_host_.size());
    replay(GraphKind::Rollback, replay_n, 0, [&] {
      cuda::gdn_conv(gdn_shape_, gdn_table_, 0, n_gdn, replay_n, &d_args_->parity, 1, true, stream_);
      cuda::gdn_recurrence(gdn_shape_, gdn_table_, 0, n_gdn, replay_n, &d_args_->parity, 1, true, act_, stream_);
    });
  }
  length_ = forward_start_ + keep;
  // As the CPU runtime: a second rollback of the same forward keeps a prefix
  // of these rows (the untouched state buffer and the chunk's projections
  // still hold what a replay needs), and rows past keep are gone for the
  // head and the MTP. The last chunk now starts at the same row and is
  // replay_n tokens long.
  last_T_ = keep;
  last_chunk_T_ = replay_n;
}

}  // namespace cuda

std::unique_ptr<ModelRuntime> make_cuda_runtime(const Qwen35Checkpoint& ckpt, int max_tokens, int max_rows,
                                                const RuntimeOptions& options) {
  return std::make_unique<cuda::CudaQwen35>(ckpt, max_tokens, max_rows, options);
}

}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
