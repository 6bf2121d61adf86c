// Private to the CUDA runtime (qwen35.cpp, qwen35_load.cpp): the CudaQwen35 class
// and the structs it holds (step arguments, device memory, weights).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/qwen35.h"
#include "core/error.h"
#include "core/fault.h"
#include "io/checkpoint.h"

namespace nextn::cuda {

inline constexpr double kGiB = double(1ull << 30);

// Values a step reads from device memory.
struct StepArgs {
  int pos;        // first position of the step (target or MTP cache)
  int parity;     // GDN state buffer to read
  int out_row;    // first hidden row the final norm writes
  int first_row;  // gather: first source row
  int n_real;     // gather: rows before zero padding
  int pad[3];
  int32_t tokens[kMaxRows];
  int32_t drafts[kMaxRows];
};

// Owns every device allocation; frees them in the destructor (or earlier,
// through release, for load-time copies the kernels no longer read).
class DeviceMemory {
 public:
  ~DeviceMemory() {
    for (const auto& b : blocks_) cudaFree(b.first);
  }
  template <typename T = void>
  T* alloc(size_t bytes, const char* what) {
    void* p = nullptr;
    if (bytes == 0) bytes = 16;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      fail("--backend cuda: out of device memory allocating {:.1f} MiB for {} ({:.2f} GiB allocated by nextn, "
           "{:.2f} of {:.2f} GiB free): {}",
           double(bytes) / double(1 << 20), what, double(total_) / kGiB, double(free_b) / kGiB,
           double(total_b) / kGiB, cudaGetErrorString(e));
    }
    blocks_.emplace_back(p, bytes);
    total_ += bytes;
    return static_cast<T*>(p);
  }
  void release(const void* p) {
    for (size_t i = 0; i < blocks_.size(); ++i)
      if (blocks_[i].first == p) {
        CUDA_CHECK(cudaFree(blocks_[i].first));
        total_ -= blocks_[i].second;
        blocks_.erase(blocks_.begin() + long(i));
        return;
      }
  }
  size_t total() const { return total_; }

 private:
  std::vector<std::pair<void*, size_t>> blocks_;
  size_t total_ = 0;
};

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

struct LayerWeights {
  bool full = false;
  float *input_norm = nullptr, *post_norm = nullptr;
  AttnWeights attn;
  Linear gdn_in;  // [qkv (conv_dim) ; z (vd) ; b (Hv) ; a (Hv)]
  DevMatrix gdn_out;
  int gdn_index = -1;  // row of the GDN table
  Linear gate_up;      // [gate (I) ; up (I)]
  DevMatrix down;
  void *k_cache = nullptr, *v_cache = nullptr;
};

enum class GraphKind : int {
  Forward, MtpForward, MtpStep, HeadArgmax, HeadFused, Walk, Logits, MtpArgmax, Rollback, MtpDraft, WalkWhile, MtpLogits
};

// How head_walk exits early (NEXTN_CUDA_WALK=while|flag, read at construction;
// default flag):
//   While  a conditional WHILE graph node runs one row's projection + argmax +
//          compare per iteration and stops launching rows after the first
//          mismatch (no launch for rows past it);
//   Flag   all rows' kernels are launched in one graph; those past the first
//          mismatch return at once on a device stop flag.
enum class WalkVariant { While, Flag };

class CudaQwen35 final : public ModelRuntime {
 public:
  CudaQwen35(const Qwen35Checkpoint& ckpt, int max_tokens);
  ~CudaQwen35() override;

  const Qwen35Config& config() const override { return cfg_; }
  const char* backend_name() const override { return "cuda"; }
  int target_length() const override { return length_; }
  void target_forward(std::span<const int32_t> tokens) override;
  void target_rollback(int keep) override;
  void head_argmax(int first, int count, int width, int32_t* out) override;
  void head_argmax_fused(int first, int count, int32_t* out) override;
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override;
  void head_logits(int row, float* out) override;
  int mtp_length() const override { return mtp_length_; }
  MtpWork mtp_work() const override { return mtp_work_; }
  void mtp_forward(std::span<const int32_t> next_tokens, int first_row) override;
  void mtp_step(int32_t token) override;
  void mtp_argmax(int count, int32_t* out) override;
  void mtp_rollback(int length) override;
  void mtp_draft(int n, int32_t* out) override;
  void mtp_logits(float* out) override;
  HeadWork head_work() const override;
  void reset() override;

  WalkVariant walk_variant() const { return walk_variant_; }

 private:
  // loading
  float* upload_floats(const std::vector<float>& v, const char* what);
  // KeepRows::Yes: embed_rows reads the matrix row by row (the embedding).
  enum class KeepRows { No, Yes };
  DevMatrix upload_matrix(const std::vector<WeightRef>& parts, const char* what, bool splittable,
                          KeepRows keep_rows = KeepRows::No);
  Linear upload_linear(const std::vector<WeightRef>& parts, const char* what);
  LayerWeights load_layer(const Qwen35Checkpoint& ck, const std::string& p, bool full);
  void check_shapes() const;

  // steps (capturable: launches only)
  void forward_chunk(int T);
  void decoder_layer(const LayerWeights& L, int T, void* k_cache, void* v_cache);
  void mtp_chunk(int n, bool from_target);
  void run_linear(const Linear& lin, const void* x, int T, int ldx, float* y, int ldy);
  void head_project(int width, const HeadTally& tally);
  void fused_argmax_rows(GraphKind kind, const void* rows, int first, int count, int32_t* out,
                         const HeadTally& tally);
  HeadTally tally(HeadPath path) const { return {d_head_, int(path)}; }
  // head_walk's variants (qwen35_head.cpp); each returns the rows taken.
  int walk_while(int rows, int nd, int32_t* out);
  void record_walk_body(int rows, int nd, cudaStream_t s, cudaGraphConditionalHandle handle, int use_handle);
  int walk_flag(int rows, int nd, int32_t* out);
  int walk_as_batched(std::span<const int32_t> drafts, int rows, int32_t* out);

  // host side
  void upload(const StepArgs& a);
  template <typename F>
  void replay(GraphKind kind, int a, int b, F&& record);
  void fetch(const void* src, size_t bytes, void* dst);
  void check_tokens(std::span<const int32_t> tokens) const;
  StepArgs args() const;

  Qwen35Config cfg_;
  int max_tokens_;
  Act act_ = Act::BF16;
  bool use_graphs_ = true;
  // Default flag: on the H200 the flag walk's verify rounds were 0.3-1.7 points
  // of batched faster than the while walk's at every K in 3..32 (0.8B and 4B
  // q4 shapes, ABBA; docs/cuda-backend.md): a WHILE iteration costs about what
  // launching a cancelled row does.
  WalkVariant walk_variant_ = WalkVariant::Flag;
  Fault fault_ = Fault::None;  // read once, at construction
  int H_ = 0, V_ = 0;
  cuda::AttnShape attn_shape_{};
  cuda::GdnShape gdn_shape_{};

  DeviceMemory mem_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t body_stream_ = nullptr;  // captures the while walk's body graph
  std::map<std::tuple<int, int, int>, cudaGraphExec_t> graphs_;

  // weights
  DevMatrix embed_, head_;
  float* final_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  float* inv_freq_ = nullptr;
  bool has_mtp_ = false;
  DevMatrix mtp_fc_;
  float *mtp_norm_emb_ = nullptr, *mtp_norm_hid_ = nullptr, *mtp_norm_ = nullptr;
  LayerWeights mtp_layer_;
  // What the MTP graphs ran, counted on the host as they are replayed (they
  // have no early exit: every row launched is a row run). reset() clears it.
  MtpWork mtp_work_;

  // GDN state, per layer, in a device table
  std::vector<cuda::GdnLayer> gdn_host_;
  cuda::GdnLayer* gdn_table_ = nullptr;

  // workspace
  StepArgs* d_args_ = nullptr;
  StepArgs* d_chain_args_ = nullptr;  // [2R]: per-step arguments of a chained mtp_draft
  float* x_ = nullptr;     // [R][H] fp32 residual
  void* xn_ = nullptr;     // [R][2H] act: norm outputs (the MTP's fc input is [R][2H])
  float* proj_ = nullptr;  // [R][proj_ld_] fp32 projections
  int proj_ld_ = 0;
  void* act_buf_ = nullptr;  // [R][act_ld_] act: inputs of o_proj / out_proj / down
  int act_ld_ = 0;
  float* q_ = nullptr;  // [R][Hq*hd]
  float* attn_partial_ = nullptr;
  float* splitk_ = nullptr;
  void* hidden_ = nullptr;      // [hidden_rows_][H] act: post-norm rows of the last target forward
  void* mtp_hidden_ = nullptr;  // [hidden_rows_][H] act: post mtp.norm rows of the last MTP call
  void* mtp_src_ = nullptr;     // [R][H] act: hidden rows fed to the MTP
  void* head_in_ = nullptr;     // [R][H] act
  float* logits_ = nullptr;     // [R][V]
  void* pairs_ = nullptr;
  void* argmax_scratch_ = nullptr;
  int32_t* d_out_ = nullptr;    // [R] result tokens
  int* d_walk_ = nullptr;       // [2]: flag walk: stop flag, rows taken; while walk: row j, stopped
  HeadCounters* d_head_ = nullptr;  // the head's work counters (head_work, reset)
  int hidden_rows_ = 0;

  // pinned host side
  StepArgs* h_args_ = nullptr;  // ring of kArgSlots
  StepArgs* h_chain_args_ = nullptr;  // [2R], staged for d_chain_args_
  cudaEvent_t arg_events_[16] = {};
  static constexpr int kArgSlots = 16;
  int arg_slot_ = 0;
  int32_t* h_out_ = nullptr;  // [R + 2]

  // sequence state (host mirror)
  int length_ = 0;
  int forward_start_ = 0; // length before the last target_forward
  int last_T_ = 0;        // rows of the last target_forward
  int last_chunk_T_ = 0;  // tokens of its last chunk (what rollback can undo)
  int parity_ = 0;
  // bytes of the state buffers reset() zeroes
  size_t kv_bytes_ = 0, gdn_conv_bytes_ = 0, gdn_S_bytes_ = 0;
  int mtp_length_ = 0;
  int mtp_last_n_ = 0;
};

// Replays the graph for (kind, a, b), capturing `record` the first time; or
// runs `record` directly when graphs are off (NEXTN_CUDA_GRAPHS=0).
template <typename F>
inline void CudaQwen35::replay(GraphKind kind, int a, int b, F&& record) {
  if (!use_graphs_) {
    record();
    return;
  }
  const auto key = std::make_tuple(int(kind), a, b);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      record();
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream_, &g);
      if (g) cudaGraphDestroy(g);
      (void)cudaGetLastError();
      throw;
    }
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(e);
    it = graphs_.emplace(key, exec).first;
  }
  CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
}

}  // namespace nextn::cuda
