// The CUDA runtime for Qwen3.5: host side (buffers, graphs, steps, reset). The
// class is in qwen35_runtime.h, weight loading in qwen35_load.cpp, the LM-head
// entry points in qwen35_head.cpp; the kernels live in the .cu files beside
// this one, behind kernels.h.
//
// Same semantics as the CPU runtime (backend/cpu/qwen35.cpp), step by step:
//  - a target_forward of T <= 64 tokens is one captured graph per T; longer
//    forwards (prefill) run as consecutive chunks of 64 through the same
//    graphs, which gives the same bits because every kernel is
//    batch-invariant;
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
#include <cmath>
#include <cstdlib>
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
// construction (the weight uploads are in qwen35_load.cpp)

void CudaQwen35::check_shapes() const {
  const auto& c = cfg_;
  auto need = [](bool ok, const std::string& what) {
    if (!ok) fail("--backend cuda: unsupported shape: {}", what);
  };
  need(c.head_dim % 32 == 0 && c.head_dim <= 256, fmt::format("head_dim {} (a multiple of 32, at most 256)", c.head_dim));
  need(c.rotary_dim() <= c.head_dim && c.rotary_dim() % 2 == 0, fmt::format("rotary dim {}", c.rotary_dim()));
  need(c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads == 0,
       fmt::format("{} query heads over {} KV heads", c.num_attention_heads, c.num_key_value_heads));
  need(c.linear_key_head_dim <= 128 && c.linear_value_head_dim <= 128,
       fmt::format("GDN head dims {}x{} (at most 128)", c.linear_key_head_dim, c.linear_value_head_dim));
  need(c.linear_num_key_heads > 0 && c.linear_num_value_heads % c.linear_num_key_heads == 0,
       fmt::format("{} GDN value heads over {} key heads", c.linear_num_value_heads, c.linear_num_key_heads));
  need(c.linear_conv_kernel_dim >= 1, "conv kernel");
  need(c.hidden_size % 32 == 0, fmt::format("hidden size {} (a multiple of 32)", c.hidden_size));
}

namespace {

// Device bytes the weights take in the kernels' layout (for the up-front check).
size_t weight_bytes(const WeightRef& w, Act act) {
  if (!w.quantized()) return size_t(w.rows) * size_t(w.cols) * (act == Act::F32 ? 4 : 2);
  return size_t(w.rows) * size_t(w.cols) * size_t(w.quant.bits) / 8 +
         size_t(w.rows) * size_t(w.cols / w.quant.group_size) * 8;
}

size_t estimate_bytes(const Qwen35Checkpoint& ck, int max_tokens, Act act) {
  const auto& c = ck.config();
  size_t total = 0;
  const int H = c.hidden_size, hd = c.head_dim, I = c.intermediate_size;
  const int64_t V = c.vocab_size;
  const WeightRef emb = ck.matrix("embed_tokens", V, H), head = ck.lm_head();
  total += weight_bytes(emb, act);
  if (head.weight != emb.weight) total += weight_bytes(head, act);
  auto layer = [&](const std::string& p, bool full) {
    size_t b = 0;
    if (full) {
      for (const char* n : {".q_proj", ".k_proj", ".v_proj"}) {
        const int64_t rows = std::string(n) == ".q_proj" ? int64_t(c.num_attention_heads) * hd * 2
                                                          : int64_t(c.num_key_value_heads) * hd;
        b += weight_bytes(ck.matrix(p + ".self_attn" + n, rows, H), act);
      }
      b += weight_bytes(ck.matrix(p + ".self_attn.o_proj", H, int64_t(c.num_attention_heads) * hd), act);
      b += size_t(max_tokens) * c.num_key_value_heads * hd * size_t(act_size(act)) * 2;
    } else {
      const std::string g = p + ".linear_attn";
      b += weight_bytes(ck.matrix(g + ".in_proj_qkv", c.conv_dim(), H), act);
      b += weight_bytes(ck.matrix(g + ".in_proj_z", c.value_dim(), H), act);
      b += weight_bytes(ck.matrix(g + ".out_proj", H, c.value_dim()), act);
      b += 2 * size_t(c.linear_num_value_heads) * c.linear_key_head_dim * c.linear_value_head_dim * 4;
      b += size_t(kMaxRows) * (2 * c.conv_dim() + c.value_dim()) * 4;
    }
    for (const char* n : {".mlp.gate_proj", ".mlp.up_proj"}) b += weight_bytes(ck.matrix(p + n, I, H), act);
    b += weight_bytes(ck.matrix(p + ".mlp.down_proj", H, I), act);
    return b;
  };
  for (int i = 0; i < c.num_hidden_layers; ++i)
    total += layer("layers." + std::to_string(i), c.full_attention[size_t(i)]);
  if (ck.mtp_layers() > 0) {
    total += weight_bytes(ck.matrix("mtp.fc", H, 2 * H), act);
    total += layer("mtp.layers.0", true);
  }
  total += size_t(kMaxRows) * size_t(V) * 4;  // logits
  return total;
}

}  // namespace

CudaQwen35::CudaQwen35(const Qwen35Checkpoint& ck, int max_tokens) : cfg_(ck.config()), max_tokens_(max_tokens) {
  static_assert(kWorkspaceRows == kMaxRows);
  const WorkspaceDims dims = workspace_dims(cfg_, max_tokens);  // sizes checked before any device work
  (void)cuda_device_summary();
  if (const char* a = std::getenv("NEXTN_CUDA_ACT")) {
    const std::string s(a);
    if (s == "fp32") act_ = Act::F32;
    else if (s == "bf16" || s.empty()) act_ = Act::BF16;
    else fail("NEXTN_CUDA_ACT='{}': expected bf16 or fp32", s);
  }
  if (const char* g = std::getenv("NEXTN_CUDA_GRAPHS")) use_graphs_ = std::string(g) != "0";
  if (const char* p = std::getenv("NEXTN_CUDA_PROFILE")) profile_ = std::string(p) == "1";
  if (const char* p = std::getenv("NEXTN_CUDA_PREFILL")) {
    const std::string v(p);
    if (v == "chunked") prefill_gemm_enabled_ = false;
    else if (v != "gemm" && !v.empty()) fail("NEXTN_CUDA_PREFILL='{}': expected gemm or chunked", v);
  }
  if (const char* w = std::getenv("NEXTN_CUDA_WALK")) {
    const std::string s(w);
    if (s == "flag") walk_variant_ = WalkVariant::Flag;
    else if (s == "while") walk_variant_ = WalkVariant::While;
    else if (!s.empty()) fail("NEXTN_CUDA_WALK='{}': expected while or flag", s);
  }
  // The default: forwards of more than one row (verify blocks) go without PDL
  // at hidden size >= 5120. Measured (docs/benchmark_results/decode-h200-2026-12-01.md,
  // call 7): the K = 4 and 8 rounds at the 27B q4 shape take 5-6 % less
  // without it, at 4B (2560) and 0.8B (1024) 1.5-5 % more.
  if (cfg_.hidden_size >= 5120) pdl_off_kinds_ = 1u << kPdlOffForwardMulti;
  if (const char* k = std::getenv("NEXTN_CUDA_PDL_OFF")) {  // graph kinds captured without PDL; "none"
    const std::string list(k);
    pdl_off_kinds_ = 0;
    for (size_t a = 0; list != "none" && a <= list.size();) {
      const size_t b = std::min(list.find(',', a), list.size());
      const std::string name = list.substr(a, b - a);
      a = b + 1;
      int kind = name == "forward_multi" ? kPdlOffForwardMulti : -1;
      for (int i = 0; i <= int(GraphKind::MtpLogits); ++i)
        if (name == graph_kind_name(GraphKind(i))) kind = i;
      if (kind < 0)
        fail("NEXTN_CUDA_PDL_OFF: unknown graph kind '{}' (e.g. forward, forward_multi, mtp_draft, rollback)", name);
      pdl_off_kinds_ |= 1u << kind;
    }
  }
  fault_ = read_fault_hook();
  check_shapes();
  {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t need = estimate_bytes(ck, max_tokens, act_);
    if (need > free_b)
      fail("--backend cuda: the checkpoint needs about {:.2f} GiB of device memory (weights, caches and {} tokens "
           "of context), but only {:.2f} of {:.2f} GiB are free",
           double(need) / kGiB, max_tokens, double(free_b) / kGiB, double(total_b) / kGiB);
  }
  cuda::init_kernels();
  stream_ = make_stream();
  body_stream_ = make_stream();
  const auto& c = cfg_;
  H_ = c.hidden_size;
  V_ = c.vocab_size;
  const int hd = c.head_dim, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  attn_shape_ = {Hq, Hkv, hd, c.rotary_dim(), c.rms_norm_eps};
  gdn_shape_ = {c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                c.linear_conv_kernel_dim, c.rms_norm_eps};
  const size_t as = size_t(act_size(act_));

  // weights
  const WeightRef emb = ck.matrix("embed_tokens", V_, H_), head = ck.lm_head();
  const bool tied = head.weight == emb.weight;
  embed_ = upload_matrix({emb}, "embedding", false, tied ? Use::Matmul : Use::RowLookupOnly);
  head_ = tied ? embed_ : upload_matrix({head}, "LM head", false);
  head_.splits = 1;  // every arm projects with the same kernel and the same bits
  final_norm_ = upload_floats(ck.norm("norm", H_, true), "norms");
  for (int i = 0; i < c.num_hidden_layers; ++i)
    layers_.push_back(load_layer(ck, "layers." + std::to_string(i), c.full_attention[size_t(i)]));
  has_mtp_ = ck.mtp_layers() > 0;
  if (has_mtp_) {
    mtp_fc_ = upload_matrix({ck.matrix("mtp.fc", H_, 2 * H_)}, "MTP fc", true);
    mtp_norm_emb_ = upload_floats(ck.norm("mtp.pre_fc_norm_embedding", H_, true), "norms");
    mtp_norm_hid_ = upload_floats(ck.norm("mtp.pre_fc_norm_hidden", H_, true), "norms");
    mtp_norm_ = upload_floats(ck.norm("mtp.norm", H_, true), "norms");
    mtp_layer_ = load_layer(ck, "mtp.layers.0", true);
  }
  {
    std::vector<float> inv(size_t(c.rotary_dim() / 2));
    for (size_t i = 0; i < inv.size(); ++i)  // as transformers and cpu::rope_angles: fp32(1 / theta^(2i/rd))
      inv[i] = float(1.0 / std::pow(c.rope_theta, double(2 * i) / double(c.rotary_dim())));
    inv_freq_ = upload_floats(inv, "rope");
  }

  // caches
  const size_t kv_bytes = size_t(max_tokens) * Hkv * hd * as;
  kv_bytes_ = kv_bytes;
  auto alloc_kv = [&](LayerWeights& L) {
    L.k_cache = mem_.alloc(kv_bytes, "the KV cache");
    L.v_cache = mem_.alloc(kv_bytes, "the KV cache");
    CUDA_CHECK(cudaMemset(L.k_cache, 0, kv_bytes));
    CUDA_CHECK(cudaMemset(L.v_cache, 0, kv_bytes));
  };
  for (auto& L : layers_)
    if (L.full) alloc_kv(L);
  if (has_mtp_) alloc_kv(mtp_layer_);
  const int cd = c.conv_dim(), Hv = c.linear_num_value_heads;
  const int gdn_ld = dims.gdn_ld;
  for (auto& t : gdn_host_) {
    const size_t conv_state = size_t(2) * (c.linear_conv_kernel_dim - 1) * cd * 4 + 16;
    const size_t S = size_t(2) * Hv * c.linear_key_head_dim * c.linear_value_head_dim * 4;
    gdn_conv_bytes_ = conv_state;
    gdn_S_bytes_ = S;
    t.proj = mem_.alloc<float>(size_t(kMaxRows) * gdn_ld * 4, "GDN projections");
    t.proj_ld = gdn_ld;
    t.conv_out = mem_.alloc<float>(size_t(kMaxRows) * cd * 4, "GDN conv outputs");
    t.conv_state = mem_.alloc<float>(conv_state, "GDN conv state");
    t.S = mem_.alloc<float>(S, "GDN recurrent state");
    CUDA_CHECK(cudaMemset(t.conv_state, 0, conv_state));
    CUDA_CHECK(cudaMemset(t.S, 0, S));
    CUDA_CHECK(cudaMemset(const_cast<float*>(t.proj), 0, size_t(kMaxRows) * gdn_ld * 4));
  }

  // workspace
  const int R = kMaxRows;
  proj_ld_ = dims.proj_ld;
  act_ld_ = dims.act_ld;
  hidden_rows_ = dims.hidden_rows;
  d_args_ = mem_.alloc<StepArgs>(sizeof(StepArgs), "step arguments");
  d_chain_args_ = mem_.alloc<StepArgs>(sizeof(StepArgs) * 2 * kMaxRows, "draft chain arguments");
  CUDA_CHECK(cudaMemset(d_args_, 0, sizeof(StepArgs)));
  x_ = mem_.alloc<float>(size_t(R) * H_ * 4, "activations");
  xn_ = mem_.alloc(size_t(R) * 2 * H_ * as, "activations");
  proj_ = mem_.alloc<float>(size_t(R) * proj_ld_ * 4, "activations");
  act_buf_ = mem_.alloc(size_t(R) * act_ld_ * as, "activations");
  q_ = mem_.alloc<float>(size_t(R) * Hq * hd * 4, "activations");
  attn_partial_ = mem_.alloc<float>(size_t(cuda::attn_partial_floats(attn_shape_, max_tokens)) * 4, "attention");
  int64_t splitk = 0;
  auto track = [&](const DevMatrix& m) { splitk = std::max(splitk, cuda::splitk_scratch_floats(m)); };
  auto track_layer = [&](const LayerWeights& L) {
    for (const auto& p : L.attn.qkv.parts) track(p.m);
    for (const auto& p : L.gdn_in.parts) track(p.m);
    for (const auto& p : L.gate_up.parts) track(p.m);
    track(L.attn.o);
    track(L.gdn_out);
    track(L.down);
  };
  for (const auto& L : layers_) track_layer(L);
  if (has_mtp_) {
    track_layer(mtp_layer_);
    track(mtp_fc_);
  }
  splitk_ = mem_.alloc<float>(size_t(splitk) * 4, "split-K partials");
  CUDA_CHECK(cudaMemset(splitk_, 0, size_t(splitk) * 4));  // the streamed kernel's tile counters start at zero
  hidden_ = mem_.alloc(size_t(hidden_rows_) * H_ * as, "hidden rows");
  mtp_hidden_ = mem_.alloc(size_t(hidden_rows_) * H_ * as, "MTP hidden rows");
  CUDA_CHECK(cudaMemset(hidden_, 0, size_t(hidden_rows_) * H_ * as));
  CUDA_CHECK(cudaMemset(mtp_hidden_, 0, size_t(hidden_rows_) * H_ * as));
  mtp_src_ = mem_.alloc(size_t(R) * H_ * as, "MTP inputs");
  head_in_ = mem_.alloc(size_t(R) * H_ * as, "head inputs");
  logits_ = mem_.alloc<float>(size_t(R) * V_ * 4, "logits");
  pairs_ = mem_.alloc(size_t(cuda::argmax_pairs_bytes(head_)), "argmax pairs");
  argmax_scratch_ = mem_.alloc(size_t(cuda::argmax_scratch_bytes(V_)) * R, "argmax");
  d_out_ = mem_.alloc<int32_t>(size_t(R + 2) * 4, "tokens");
  d_walk_ = mem_.alloc<int>(2 * sizeof(int), "walk counters");
  d_head_ = mem_.alloc<HeadCounters>(sizeof(HeadCounters), "head counters");
  CUDA_CHECK(cudaMemset(d_head_, 0, sizeof(HeadCounters)));
  for (auto& L : layers_)
    if (!L.full) gdn_host_[size_t(L.gdn_index)].y = act_buf_;
  gdn_table_ = mem_.alloc<cuda::GdnLayer>(std::max<size_t>(1, gdn_host_.size()) * sizeof(cuda::GdnLayer), "GDN table");
  if (!gdn_host_.empty())
    CUDA_CHECK(cudaMemcpy(gdn_table_, gdn_host_.data(), gdn_host_.size() * sizeof(cuda::GdnLayer),
                          cudaMemcpyHostToDevice));

  h_args_ = make_pinned<StepArgs>(kArgSlots);
  h_out_ = make_pinned<int32_t>(size_t(R) + 2);
  h_chain_args_ = make_pinned<StepArgs>(size_t(2) * kMaxRows);
  for (auto& e : arg_events_) e = make_event(cudaEventDisableTiming);
  CUDA_CHECK(cudaDeviceSynchronize());
}

// The members release themselves (device_handles.h); work still queued on
// the stream must finish before its buffers go.
CudaQwen35::~CudaQwen35() {
  if (stream_) (void)cudaStreamSynchronize(stream_);
}

// Every buffer the constructor zeroes that a sequence writes, zeroed again in
// place: the captured graphs keep their device pointers and stay valid.
void CudaQwen35::reset() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  auto zero = [&](void* p, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_)); };
  for (auto& L : layers_)
    if (L.full) {
      zero(L.k_cache, kv_bytes_);
      zero(L.v_cache, kv_bytes_);
    }
  if (has_mtp_) {
    zero(mtp_layer_.k_cache, kv_bytes_);
    zero(mtp_layer_.v_cache, kv_bytes_);
  }
  for (auto& t : gdn_host_) {
    zero(t.conv_state, gdn_conv_bytes_);
    zero(t.S, gdn_S_bytes_);
    zero(const_cast<float*>(t.proj), size_t(kMaxRows) * size_t(t.proj_ld) * 4);
  }
  const size_t as = size_t(act_size(act_));
  zero(d_args_, sizeof(StepArgs));
  zero(hidden_, size_t(hidden_rows_) * H_ * as);
  zero(mtp_hidden_, size_t(hidden_rows_) * H_ * as);
  zero(d_walk_, 2 * sizeof(int));
  zero(d_head_, sizeof(HeadCounters));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
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

std::vector<MemoryUse> CudaQwen35::device_memory() const {
  std::vector<MemoryUse> v;
  for (const auto& [what, bytes] : mem_.by_use()) v.push_back({what, uint64_t(bytes)});
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
  if (bytes <= sizeof(int32_t) * (kMaxRows + 2)) {
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

void CudaQwen35::decoder_layer(const LayerWeights& L, int T, void* k_cache, void* v_cache, const StepBuffers& b) {
  const auto& c = cfg_;
  const float eps = c.rms_norm_eps;
  const int* pos = &d_args_->pos;
  mark("norm");
  cuda::rmsnorm(b.x, Act::F32, H_, L.input_norm, eps, T, H_, b.xn, act_, H_, nullptr, stream_);
  if (L.full) {
    const int qd = c.num_attention_heads * c.head_dim;
    mark("attn.qkv");
    run_linear(L.attn.qkv, b.xn, T, H_, b.proj, proj_ld_, b);
    mark("attn.prepare");
    cuda::attn_prepare(attn_shape_, b.proj, proj_ld_, T, L.attn.q_norm, L.attn.k_norm, inv_freq_, pos, b.q, k_cache,
                       v_cache, act_, stream_);
    mark("attn.core");
    if (b.prefill) prefill_attention(T, k_cache, v_cache, b);
    else
      cuda::attention(attn_shape_, b.q, k_cache, v_cache, act_, b.proj, proj_ld_, T, pos, max_tokens_, attn_partial_,
                      b.act, stream_);
    mark("attn.o");
    project(L.attn.o, b.act, T, qd, b.x, H_, true, b);
  } else {
    const cuda::GdnLayer& g = (*b.gdn_host)[size_t(L.gdn_index)];
    mark("gdn.in");
    run_linear(L.gdn_in, b.xn, T, H_, const_cast<float*>(g.proj), g.proj_ld, b);
    mark("gdn.conv");
    cuda::gdn_conv(gdn_shape_, b.gdn_table, L.gdn_index, 1, T, &d_args_->parity, 0, false, stream_);
    mark("gdn.rec");
    cuda::gdn_recurrence(gdn_shape_, b.gdn_table, L.gdn_index, 1, T, &d_args_->parity, 0, false, act_, stream_);
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
  cuda::embed_rows(embed_, d_args_->tokens, T, x_, H_, stream_);
  const StepBuffers b = decode_buffers();
  for (auto& L : layers_) decoder_layer(L, T, L.k_cache, L.v_cache, b);
  mark("norm");
  cuda::rmsnorm(x_, Act::F32, H_, final_norm_, cfg_.rms_norm_eps, T, H_, hidden_, act_, H_, &d_args_->out_row,
                stream_);
}

// MTP entries for args.tokens[0..n): embedding of the next token and a hidden
// row (target rows [first_row, ...) of `hidden_`, or the MTP's own row
// first_row of `mtp_hidden_` for a chained step).
void CudaQwen35::mtp_chunk(int n, bool from_target) {
  const float eps = cfg_.rms_norm_eps;
  prof_prefix_ = "mtp.";
  mark("inputs");
  cuda::gather_rows(from_target ? hidden_ : mtp_hidden_, H_, &d_args_->first_row, &d_args_->n_real, n, mtp_src_, act_,
                    stream_);
  cuda::embed_rows(embed_, d_args_->tokens, n, x_, H_, stream_);
  char* xn = static_cast<char*>(xn_);
  cuda::rmsnorm(x_, Act::F32, H_, mtp_norm_emb_, eps, n, H_, xn, act_, 2 * H_, nullptr, stream_);
  cuda::rmsnorm(mtp_src_, act_, H_, mtp_norm_hid_, eps, n, H_, xn + size_t(H_) * act_size(act_), act_, 2 * H_,
                nullptr, stream_);
  mark("fc");
  cuda::matmul(mtp_fc_, xn_, act_, n, 2 * H_, x_, H_, false, splitk_, stream_);
  decoder_layer(mtp_layer_, n, mtp_layer_.k_cache, mtp_layer_.v_cache, decode_buffers());
  mark("norm");
  cuda::rmsnorm(x_, Act::F32, H_, mtp_norm_, eps, n, H_, mtp_hidden_, act_, H_, &d_args_->out_row, stream_);
  mark("head");  // what follows in the same graph (mtp_draft: the argmax)
  prof_prefix_.clear();
}

void CudaQwen35::target_forward(std::span<const int32_t> tokens) {
  const int T = int(tokens.size());
  if (T <= 0) fail("target_forward: no tokens");
  if (length_ + T > max_tokens_) fail("sequence of {} tokens exceeds the cache capacity {}", length_ + T, max_tokens_);
  if (T > hidden_rows_ - kMaxRows) fail("target_forward: {} tokens exceed the hidden-row buffer", T);
  check_tokens(tokens);
  forward_start_ = length_;
  int done = 0;
  if (prefill_applies(T)) {
    // All but the last <= kMaxRows tokens through the prefill GEMMs; the rest
    // (what a rollback can undo) through the graphs below.
    done = T - ((T - 1) % kMaxRows + 1);
    prefill(tokens.first(size_t(done)));
  }
  while (done < T) {
    const int n = std::min(kMaxRows, T - done);
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

void CudaQwen35::mtp_forward(std::span<const int32_t> next_tokens, int first_row) {
  if (!has_mtp_) fail("this checkpoint has no MTP head (mtp_num_hidden_layers is 0 and no mtp.layers.* tensors)");
  const int n = int(next_tokens.size());
  if (n <= 0 || first_row < 0 || first_row + n > last_T_)
    fail("mtp_forward: rows [{}, {}) outside the last forward's {} rows", first_row, first_row + n, last_T_);
  if (mtp_length_ + n > max_tokens_) fail("MTP cache capacity {} exceeded", max_tokens_);
  check_tokens(next_tokens);
  for (int done = 0; done < n;) {
    const int m = std::min(kMaxRows, n - done);
    StepArgs a = args();
    a.pos = mtp_length_ + done;
    a.out_row = done;
    a.first_row = first_row + done;
    a.n_real = m;
    std::copy(next_tokens.begin() + done, next_tokens.begin() + done + m, a.tokens);
    upload(a);
    replay(GraphKind::MtpForward, m, 0, [&] { mtp_chunk(m, true); });
    done += m;
  }
  mtp_length_ += n;
  mtp_last_n_ = n;
  mtp_work_.entries += n;
}

void CudaQwen35::mtp_step(int32_t token) {
  if (mtp_last_n_ == 0) fail("mtp_step before any mtp_forward");
  check_tokens({&token, 1});
  if (mtp_length_ + 1 > max_tokens_) fail("MTP cache capacity {} exceeded", max_tokens_);
  StepArgs a = args();
  a.pos = mtp_length_;
  a.out_row = 0;
  a.first_row = mtp_last_n_ - 1;
  a.n_real = 1;
  a.tokens[0] = token;
  upload(a);
  replay(GraphKind::MtpStep, 1, 0, [&] { mtp_chunk(1, false); });
  mtp_length_ += 1;
  mtp_last_n_ = 1;
  ++mtp_work_.entries;
  ++mtp_work_.chained_steps;
}

void CudaQwen35::mtp_argmax(int count, int32_t* out) {
  if (count < 0 || count > mtp_last_n_) fail("mtp_argmax: {} entries, last call made {}", count, mtp_last_n_);
  mtp_work_.argmax_rows += count;  // counted before the launch below (which throws only on a bad count)
  if (count > kMaxRows) fail("mtp_argmax: {} entries above {}", count, kMaxRows);
  fused_argmax_rows(GraphKind::MtpArgmax, mtp_hidden_, mtp_last_n_ - count, count, out, {});
}

// The draft chain on the device: argmax of the latest entry, then per draft
// one MTP step fed by the previous argmax (a device-to-device copy into the
// step's token slot) and its argmax. The arguments of every step are staged
// in one upload; one graph per n; one copy back.
void CudaQwen35::mtp_draft(int n, int32_t* out) {
  if (n <= 0) return;
  if (mtp_last_n_ == 0) fail("mtp_draft before any mtp_forward");
  if (n > kMaxRows) fail("mtp_draft: {} drafts above {}", n, kMaxRows);
  if (mtp_length_ + n - 1 > max_tokens_) fail("MTP cache capacity {} exceeded", max_tokens_);
  // Entry 0: argmax args for the last row of the latest call; then per step
  // i >= 1: the step's args (2i-1) and the argmax args for its row 0 (2i).
  StepArgs head = args();
  head.first_row = mtp_last_n_ - 1;
  head.n_real = 1;
  h_chain_args_[0] = head;
  for (int i = 1; i < n; ++i) {
    StepArgs step = args();
    step.pos = mtp_length_ + i - 1;
    step.out_row = 0;
    step.first_row = i == 1 ? mtp_last_n_ - 1 : 0;
    step.n_real = 1;
    h_chain_args_[2 * i - 1] = step;
    StepArgs am = args();
    am.first_row = 0;
    am.n_real = 1;
    h_chain_args_[2 * i] = am;
  }
  CUDA_CHECK(cudaMemcpyAsync(d_chain_args_, h_chain_args_, sizeof(StepArgs) * size_t(2 * n - 1),
                             cudaMemcpyHostToDevice, stream_));
  auto set_args = [&](int k) {
    CUDA_CHECK(cudaMemcpyAsync(d_args_, d_chain_args_ + k, sizeof(StepArgs), cudaMemcpyDeviceToDevice, stream_));
  };
  auto argmax_into = [&](int slot) {
    cuda::gather_rows(mtp_hidden_, H_, &d_args_->first_row, &d_args_->n_real, 1, head_in_, act_, stream_);
    cuda::matmul_argmax(head_, head_in_, act_, 1, H_, pairs_, d_out_ + slot, nullptr, stream_);
  };
  replay(GraphKind::MtpDraft, n, 0, [&] {
    set_args(0);
    argmax_into(0);
    for (int i = 1; i < n; ++i) {
      set_args(2 * i - 1);
      CUDA_CHECK(cudaMemcpyAsync(&d_args_->tokens[0], d_out_ + i - 1, sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                 stream_));
      mtp_chunk(1, false);
      set_args(2 * i);
      argmax_into(i);
    }
  });
  fetch(d_out_, sizeof(int32_t) * size_t(n), out);  // also orders the staged upload before the next call
  if (n > 1) {
    mtp_length_ += n - 1;
    mtp_last_n_ = 1;
  }
  mtp_work_.entries += n - 1;
  mtp_work_.chained_steps += n - 1;
  mtp_work_.argmax_rows += n;
}

void CudaQwen35::mtp_rollback(int length) {
  if (length < 0 || length > mtp_length_) fail("mtp_rollback: length {} outside [0, {}]", length, mtp_length_);
  mtp_length_ = length;
}

}  // namespace cuda

std::unique_ptr<ModelRuntime> make_cuda_runtime(const Qwen35Checkpoint& ckpt, int max_tokens) {
  return std::make_unique<cuda::CudaQwen35>(ckpt, max_tokens);
}

}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
