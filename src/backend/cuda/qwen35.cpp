// The CUDA runtime for Qwen3.5: host side (buffers, graphs, steps, reset). The
// class is in qwen35_runtime.h, the weights (CudaQwen35Weights, shared by the
// sequences of a group: qwen35_group.cpp) in qwen35_load.cpp, the LM-head
// entry points in qwen35_head.cpp, the MTP head in qwen35_mtp.cpp, the
// decoder layer in layer.cpp; the kernels live in the .cu files beside this
// one, behind kernels.h. A sequence owns its parts: its state
// (sequence_state.h), workspaces (workspace.h, prefill_workspace.h), stream,
// graphs (graph_cache.h) and profile marks (profiler.h).
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
#include "core/checked_int.h"
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
                                                                  int max_rows, const RuntimeOptions& options) {
  check_max_rows(max_rows);
  (void)workspace_dims(ck.config(), max_tokens);
  return std::make_shared<const CudaQwen35Weights>(ck, max_tokens, options);
}

}  // namespace

CudaQwen35::CudaQwen35(const Qwen35Checkpoint& ck, int max_tokens, int max_rows, const RuntimeOptions& options)
    : CudaQwen35(weights_for_one_sequence(ck, max_tokens, max_rows, options), max_tokens, max_rows, options) {}

CudaQwen35::CudaQwen35(std::shared_ptr<const CudaQwen35Weights> weights, int max_tokens, int max_rows,
                       const RuntimeOptions& options, std::shared_ptr<KvBlockPool> kv_pool)
    : w_(std::move(weights)),
      cfg_(w_->cfg),
      max_tokens_(max_tokens),
      max_rows_(max_rows),
      act_(w_->act),
      walk_variant_(options.walk),
      fault_(options.fault),
      prefill_gemm_enabled_(options.prefill_gemm),
      stream_(make_stream()),
      body_stream_(make_stream()),
      profiler_(options.profile),
      graphs_(options, stream_, profiler_) {
  check_max_rows(max_rows);
  const WorkspaceDims dims = workspace_dims(cfg_, max_tokens);  // sizes checked before any device memory
  {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // Its KV blocks come from the pool as it grows: not counted here.
    const size_t need = sequence_bytes(cfg_, 0, act_, w_->has_mtp, max_rows_);
    if (need > free_b)
      fail("--backend cuda: a sequence of {} tokens needs about {:.2f} GiB of device memory (GDN state and "
           "workspace) beside the weights and its KV cache, but only {:.2f} of {:.2f} GiB are free",
           max_tokens, double(need) / kGiB, double(free_b) / kGiB, double(total_b) / kGiB);
  }
  group_event_ = make_event(cudaEventDisableTiming);
  lead_.copied = make_event(cudaEventDisableTiming);
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id++;
  const auto& c = cfg_;
  H_ = c.hidden_size;
  V_ = c.vocab_size;
  attn_shape_ = {c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rotary_dim(), c.rms_norm_eps};
  gdn_shape_ = {c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                c.linear_conv_kernel_dim, c.rms_norm_eps};
  state_ = SequenceState(*w_, max_tokens, max_rows_, dims.gdn_ld, kv_pool ? std::move(kv_pool) : make_kv_pool(*w_));
  ws_ = Workspace(*w_, dims, attn_shape_, max_rows_);
  const size_t group_entries = size_t(kGroupTables) * kMaxGroupSequences;
  lead_.d_tables = lead_.mem.alloc<cuda::GroupEntry>(group_entries * sizeof(cuda::GroupEntry), "group tables");
  lead_.h_tables = make_pinned<cuda::GroupEntry>(group_entries);
  lead_.d_replay = lead_.mem.alloc<cuda::GdnReplay>(kMaxGroupSequences * sizeof(cuda::GdnReplay), "group tables");
  lead_.h_replay = make_pinned<cuda::GdnReplay>(kMaxGroupSequences);
  lead_.replay_copied = make_event(cudaEventDisableTiming);
  state_.upload_gdn_table(*w_, ws_.act_buf);  // the GDN outputs land in the workspace's act rows
  CUDA_CHECK(cudaDeviceSynchronize());
}

// The parts release themselves (device_handles.h); work still queued on the
// stream must finish before its buffers go.
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
  ws_.wait(stream_);
  state_.reset(stream_);
  ws_.reset(stream_);
  ws_.wait(stream_);
  prefill_release();
}

// The weights this sequence reads (shared with the other sequences of a
// group, so a group's total counts them once) and its own buffers.
std::vector<MemoryUse> CudaQwen35::device_memory() const {
  std::map<std::string, uint64_t> sum;
  for (const DeviceMemory* mem : {&w_->mem, &state_.mem, &ws_.mem, &ws_.hidden_mem, &ws_.partial_mem, &lead_.mem})
    for (const auto& [what, bytes] : mem->by_use()) sum[what] += uint64_t(bytes);
  if (prefill_)
    for (const auto& [what, bytes] : prefill_->mem.by_use()) sum[what] += uint64_t(bytes);
  if (state_.kv.bytes_held() > 0) sum["the KV cache"] += uint64_t(state_.kv.bytes_held());  // its blocks of the pool
  std::vector<MemoryUse> v;
  for (const auto& [what, bytes] : sum) v.push_back({what, bytes});
  return v;
}

std::vector<OpTiming> CudaQwen35::op_timings() const { return profiler_.timings(); }

uint64_t CudaQwen35::expert_bytes_read() const {
  if (!ws_.moe.present()) return 0;
  unsigned long long n = 0;
  ws_.wait(stream_);
  CUDA_CHECK(cudaMemcpy(&n, ws_.moe.expert_bytes, sizeof(n), cudaMemcpyDeviceToHost));
  return uint64_t(n);
}

// ---------------------------------------------------------------------------
// host side

StepArgs CudaQwen35::args() const {
  StepArgs a{};
  a.parity = state_.parity;
  return a;
}

void CudaQwen35::check_tokens(std::span<const int32_t> tokens) const {
  for (int32_t t : tokens)
    if (t < 0 || t >= cfg_.vocab_size) fail("token id {} is outside the vocabulary [0, {})", t, cfg_.vocab_size);
}

// ---------------------------------------------------------------------------
// steps

LayerContext CudaQwen35::layer_context() {
  LayerContext c{*w_, H_, act_, ws_.partial_positions, max_rows_, attn_shape_, gdn_shape_, ws_.proj_ld, ws_.act_ld,
                 ws_.splitk, ws_.attn_partial, stream_, profiler_};
  if (ws_.moe.present()) c.moe = &ws_.moe;
  return c;
}

StepBuffers CudaQwen35::decode_buffers() const {
  return {.x = ws_.x, .xn = ws_.xn, .proj = ws_.proj, .act = ws_.act_buf, .q = ws_.q, .gdn_table = state_.gdn_table,
          .gdn_host = &state_.gdn_host, .tokens = ws_.d_args->tokens};
}

void CudaQwen35::forward_chunk(int T) {
  const LayerContext c = layer_context();
  c.mark("embed");
  cuda::embed_rows(w_->embed, ws_.d_args->tokens, T, ws_.x, H_, stream_);
  const StepBuffers b = decode_buffers();
  for (auto& L : w_->layers) decoder_layer(c, L, T, b, sequence_view());
  c.mark("norm");
  cuda::rmsnorm(ws_.x, Act::F32, H_, w_->final_norm, cfg_.rms_norm_eps, T, H_, ws_.hidden, act_, H_,
                &ws_.d_args->out_row, stream_);
}

void CudaQwen35::check_forward(std::span<const int32_t> tokens) const {
  const int T = int(tokens.size());
  if (T <= 0) fail("target_forward: no tokens");
  if (state_.length + T > max_tokens_)
    fail("sequence of {} tokens exceeds the cache capacity {}", state_.length + T, max_tokens_);
  check_tokens(tokens);
}

void CudaQwen35::hold_positions(int positions) {
  state_.kv.hold(positions, stream_);
  if (positions <= ws_.partial_positions) return;
  const int grown = grown_partial_positions(ws_.partial_positions, positions, max_tokens_);
  // Once per sequence and doubling: not a step's wait (not counted).
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  graphs_.clear();  // they hold the old buffer and its split stride
  Allocator* const from = allocator_ ? *allocator_ : nullptr;  // null: cudaMalloc (the product)
  ws_.grow_partials(grown, from);
}

void CudaQwen35::hold_rows(int T) {
  const int64_t need = int64_t(T) + kMaxRows;
  if (need <= ws_.hidden_rows) return;
  const int rows = checked_int((need + kMaxRows - 1) / kMaxRows * kMaxRows, "--backend cuda: hidden rows (a forward + 64)");
  // A graph still in flight is freed when it completes (cudaGraphExecDestroy),
  // and grow_hidden's copies follow the queued work on the stream, which it
  // waits for before the old rows go: no wait here (its one is not counted:
  // once per sequence and longer forward).
  graphs_.clear();  // they hold the old rows' pointers
  Allocator* const from = allocator_ ? *allocator_ : nullptr;  // null: cudaMalloc (the product)
  ws_.grow_hidden(rows, from, stream_);
}

void CudaQwen35::target_forward(std::span<const int32_t> tokens) {
  check_forward(tokens);
  hold_positions(state_.length + int(tokens.size()));
  hold_rows(int(tokens.size()));
  const int T = int(tokens.size());
  state_.forward_start = state_.length;
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
    a.pos = state_.length + done;
    a.out_row = done;
    std::copy(tokens.begin() + done, tokens.begin() + done + n, a.tokens);
    ws_.upload(a, stream_);
    graphs_.replay(GraphKind::Forward, n, 0, [&] { forward_chunk(n); });
    state_.parity ^= 1;
    done += n;
    state_.last_chunk_T = n;
  }
  state_.length += T;
  state_.last_T = T;
}

int CudaQwen35::rollback_replay_of(int keep) const {
  const SequenceState& st = state_;
  if (keep < 1 || keep > st.last_T) fail("target_rollback: keep {} outside [1, {}]", keep, st.last_T);
  if (keep == st.last_T) return -1;
  const int chunk_start = st.last_T - st.last_chunk_T;
  if (keep < chunk_start)
    fail("target_rollback: the CUDA backend undoes at most the last {} tokens of a forward ({} of {} to undo)",
         st.last_chunk_T, st.last_T - keep, st.last_T);
  return keep - chunk_start;  // tokens of the last chunk to keep (may be 0)
}

// A group of one: the same launch as the engine's group rollback.
void CudaQwen35::target_rollback(int keep) {
  CudaQwen35* self = this;
  rollback_group({&self, 1}, {&keep, 1});
}

void CudaQwen35::rollback_bookkeeping(int keep, int replay_n) {
  SequenceState& st = state_;
  st.length = st.forward_start + keep;
  // As the CPU runtime: a second rollback of the same forward keeps a prefix
  // of these rows (the untouched state buffer and the chunk's projections
  // still hold what a replay needs), and rows past keep are gone for the
  // head and the MTP. The last chunk now starts at the same row and is
  // replay_n tokens long.
  st.last_T = keep;
  st.last_chunk_T = replay_n;
}

}  // namespace cuda

std::unique_ptr<ModelRuntime> make_cuda_runtime(const Qwen35Checkpoint& ckpt, int max_tokens, int max_rows,
                                                const RuntimeOptions& options) {
  return std::make_unique<cuda::CudaQwen35>(ckpt, max_tokens, max_rows, options);
}

}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
