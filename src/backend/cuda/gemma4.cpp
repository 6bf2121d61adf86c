// The CUDA Gemma 4 runtime: loading, the forward, rollback, reset and the
// Gemma4Target view for the assistant drafter. The LM-head entry points are
// in gemma4_head.cpp, the Gemma-only kernels in gemma4_kernels.cu.
//
// Same semantics as the CPU runtime (backend/cpu/gemma4.cpp), step by step:
//   x = embed(token) * embed_scale
//   per layer: h = x + post_attn_norm(o(attn(input_norm(x))))
//              x = (h + post_ff_norm(down(gelu_tanh(gate(n)) * up(n)))) * layer_scalar,  n = pre_ff_norm(h)
//              (a MoE layer: the MLP's output normed and joined by its routed experts', gemma4_moe.cpp)
//   hidden = norm(x)
// KV caches are fp32 ring buffers, sliding layers sliding_window + 1 + 64
// slots, full layers max_tokens; forwards run in chunks of at most 64 rows,
// so a chunk only overwrites positions no query or rollback can reach
// (rollback undoes at most 64 rows of one forward, as on the CPU). Every
// kernel is batch-invariant (the matmul family by construction, the Gemma
// kernels one row per block), so row j of a T-row forward has the bits of a
// one-row forward: speculative output equals greedy.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/gemma4.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/gemma4_runtime.h"
#include "backend/cuda/qwen35.h"
#include "backend/cuda/weight_upload.h"
#include "core/dtype.h"
#include "io/gemma4_checkpoint.h"

namespace nextn {
namespace cuda {

float* CudaGemma4::upload_floats(const std::vector<float>& v, const char* what) {
  return cuda::upload_floats(mem_, v, what);
}

// Parts concatenated along the rows in the kernels' layout (weight_upload.h):
// dense as fp32 in the fp32 mode, bf16 otherwise; MLX Q4/Q8 packed.
DevMatrix CudaGemma4::upload_matrix(const std::vector<WeightRef>& parts, const char* what, bool splittable,
                                    WeightUse use) {
  return upload_weight_parts(parts, act_, mem_, what, splittable, use);
}

Gemma4DevLayer CudaGemma4::load_layer(const Gemma4Checkpoint& ck, int index) {
  const std::string p = "layers." + std::to_string(index) + ".";
  Gemma4DevLayer L;
  L.spec = cfg_.layers[size_t(index)];
  const int hd = L.spec.head_dim, kvh = L.spec.kv_heads, H = H_;
  L.input_norm = upload_floats(ck.vector(ck.stored(p + "input_layernorm.weight"), H), "norms");
  L.post_attn_norm = upload_floats(ck.vector(ck.stored(p + "post_attention_layernorm.weight"), H), "norms");
  L.pre_ff_norm = upload_floats(ck.vector(ck.stored(p + "pre_feedforward_layernorm.weight"), H), "norms");
  L.post_ff_norm = upload_floats(ck.vector(ck.stored(p + "post_feedforward_layernorm.weight"), H), "norms");
  L.q_norm = upload_floats(ck.vector(ck.stored(p + "self_attn.q_norm.weight"), hd), "norms");
  L.k_norm = upload_floats(ck.vector(ck.stored(p + "self_attn.k_norm.weight"), hd), "norms");
  L.layer_scalar = ck.vector(ck.stored(p + "layer_scalar"), 1)[0];
  std::vector<WeightRef> qkv = {ck.matrix(p + "self_attn.q_proj", int64_t(Hq_) * hd, H),
                                ck.matrix(p + "self_attn.k_proj", int64_t(kvh) * hd, H)};
  if (!L.spec.k_eq_v) qkv.push_back(ck.matrix(p + "self_attn.v_proj", int64_t(kvh) * hd, H));
  L.qkv = upload_matrix(qkv, "attention q/k/v", true);
  L.o = upload_matrix({ck.matrix(p + "self_attn.o_proj", H, int64_t(Hq_) * hd)}, "attention o", true);
  L.gate_up =
      upload_matrix({ck.matrix(p + "mlp.gate_proj", I_, H), ck.matrix(p + "mlp.up_proj", I_, H)}, "MLP gate/up", true);
  L.down = upload_matrix({ck.matrix(p + "mlp.down_proj", H, I_)}, "MLP down", true);
  if (cfg_.moe) L.moe = load_moe(ck, index);
  // As cpu::gemma4_rope_table: fp32(1 / theta^(2i/hd)) for the rotating pairs.
  std::vector<float> inv(size_t(hd / 2), 0.0f);
  for (int i = 0; i < L.spec.rope_pairs && i < hd / 2; ++i)
    inv[size_t(i)] = float(1.0 / std::pow(L.spec.rope_theta, double(2 * i) / double(hd)));
  L.inv_freq = upload_floats(inv, "rope");
  L.slots = L.spec.sliding ? std::min(max_tokens_, cfg_.sliding_window + 1 + kMaxRows) : max_tokens_;
  const size_t kv_bytes = size_t(L.slots) * size_t(kvh) * size_t(hd) * sizeof(float);
  L.k_cache = mem_.alloc<float>(kv_bytes, "the KV cache");
  L.v_cache = mem_.alloc<float>(kv_bytes, "the KV cache");
  CUDA_CHECK(cudaMemset(L.k_cache, 0, kv_bytes));
  CUDA_CHECK(cudaMemset(L.v_cache, 0, kv_bytes));
  return L;
}

CudaGemma4::CudaGemma4(const Gemma4Checkpoint& ck, int max_tokens, Activations act)
    : Gemma4Runtime(max_tokens, kMaxRows), cfg_(ck.config()), act_(act == Activations::Fp32 ? Act::F32 : Act::BF16) {
  (void)cuda_device_summary();  // one error line when there is no usable device
  H_ = cfg_.hidden_size;
  V_ = cfg_.vocab_size;
  I_ = cfg_.intermediate_size;
  Hq_ = cfg_.num_attention_heads;
  eps_ = cfg_.rms_norm_eps;
  info_ = {V_, H_, cfg_.max_position_embeddings, 0, cfg_.eos_token_ids};
  int max_hd = 0, max_qkv = 0;
  for (const auto& s : cfg_.layers) {
    if (s.head_dim > kGemma4MaxHeadDim || s.head_dim % 2 != 0)
      fail("--backend cuda: unsupported shape: head_dim {} (an even number up to {})", s.head_dim, kGemma4MaxHeadDim);
    if (s.kv_heads < 1 || Hq_ % s.kv_heads != 0)
      fail("--backend cuda: unsupported shape: {} query heads over {} KV heads", Hq_, s.kv_heads);
    max_hd = std::max(max_hd, s.head_dim);
    max_qkv = std::max(max_qkv, (Hq_ + 2 * s.kv_heads) * s.head_dim);
  }
  cuda::init_kernels();
  stream_ = make_stream();
  const size_t as = size_t(act_size(act_));

  // weights
  // Unsplit (every verify arm projects the head with the same kernel and the
  // same bits); a quantized matrix is packed for its split factor, so the
  // tied embedding is uploaded unsplit too.
  const WeightRef emb = ck.matrix("embed_tokens", V_, H_), head = ck.lm_head();
  const bool tied = head.name == emb.name;
  embed_ = upload_matrix({emb}, "embedding", false, tied ? WeightUse::Matmul : WeightUse::RowLookupOnly);
  head_ = tied ? embed_ : upload_matrix({head}, "LM head", false);
  embed_scale_ = ck.embed_scale();
  final_norm_ = upload_floats(ck.vector(ck.stored("norm.weight"), H_), "norms");
  for (int i = 0; i < cfg_.num_hidden_layers; ++i) layers_.push_back(load_layer(ck, i));
  mirrors_.resize(layers_.size());

  // workspace
  const int R = kMaxRows;
  proj_ld_ = std::max(max_qkv, 2 * I_);
  act_ld_ = std::max(I_, Hq_ * max_hd);
  d_tokens_ = mem_.alloc<int32_t>(size_t(R) * 4, "tokens");
  x_ = mem_.alloc<float>(size_t(R) * H_ * 4, "activations");
  xn_ = mem_.alloc(size_t(R) * H_ * as, "activations");
  proj_ = mem_.alloc<float>(size_t(R) * proj_ld_ * 4, "activations");
  q_ = mem_.alloc<float>(size_t(R) * Hq_ * max_hd * 4, "activations");
  act_buf_ = mem_.alloc(size_t(R) * act_ld_ * as, "activations");
  y_ = mem_.alloc<float>(size_t(R) * H_ * 4, "activations");
  if (cfg_.moe) moe_ = MoeScratch({H_, cfg_.num_experts, cfg_.top_k_experts, cfg_.moe_intermediate_size, 0}, act_, R, mem_);
  int64_t splitk = 0;
  for (const auto& L : layers_)
    for (const DevMatrix* m : {&L.qkv, &L.o, &L.gate_up, &L.down, &L.moe.router})
      splitk = std::max(splitk, splitk_scratch_floats(*m));
  splitk_ = mem_.alloc<float>(size_t(splitk) * 4, "split-K partials");
  CUDA_CHECK(cudaMemset(splitk_, 0, size_t(splitk) * 4));  // counters start at zero (kernels.h)
  hidden_ = mem_.alloc(size_t(max_tokens_) * H_ * as, "hidden rows");
  CUDA_CHECK(cudaMemset(hidden_, 0, size_t(max_tokens_) * H_ * as));
  head_in_ = mem_.alloc(size_t(R) * H_ * as, "head inputs");
  logits_ = mem_.alloc<float>(size_t(R) * V_ * 4, "logits");
  pairs_ = mem_.alloc(size_t(argmax_pairs_bytes(head_)), "argmax pairs");
  argmax_scratch_ = mem_.alloc(size_t(argmax_scratch_bytes(V_)) * R, "argmax");
  d_rows_ = mem_.alloc<int>(2 * sizeof(int), "row range");
  d_drafts_ = mem_.alloc<int32_t>(size_t(R) * 4, "drafts");
  d_out_ = mem_.alloc<int32_t>(size_t(R + 2) * 4, "tokens");
  d_walk_ = mem_.alloc<int>(2 * sizeof(int), "walk counters");
  d_head_ = mem_.alloc<HeadCounters>(sizeof(HeadCounters), "head counters");
  CUDA_CHECK(cudaMemset(d_head_, 0, sizeof(HeadCounters)));
  d_embed_token_ = mem_.alloc<int32_t>(sizeof(int32_t), "embedding token");
  d_embed_row_ = mem_.alloc<float>(size_t(H_) * 4, "embedding row");
  CUDA_CHECK(cudaDeviceSynchronize());
}

// The members release themselves; work still queued must finish first.
CudaGemma4::~CudaGemma4() {
  if (stream_) (void)cudaStreamSynchronize(stream_);
}

void CudaGemma4::reset() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Ring slots are written before they are read; the head counters restart.
  CUDA_CHECK(cudaMemsetAsync(d_head_, 0, sizeof(HeadCounters), stream_));
  CUDA_CHECK(cudaMemsetAsync(d_walk_, 0, 2 * sizeof(int), stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  clear_positions();
  invalidate_mirrors(0);
}

// ---------------------------------------------------------------------------
// the forward

void CudaGemma4::decoder_layer(const Gemma4DevLayer& L, int pos, int T) {
  const int hd = L.spec.head_dim, qd = Hq_ * hd;
  const Gemma4AttnShape a{Hq_, L.spec.kv_heads, hd, eps_, L.spec.k_eq_v};
  const int window = L.spec.sliding ? cfg_.sliding_window : 0;
  cudaStream_t s = stream_;
  rmsnorm(x_, Act::F32, H_, L.input_norm, eps_, T, H_, xn_, act_, H_, nullptr, s);
  matmul(L.qkv, xn_, act_, T, H_, proj_, proj_ld_, false, splitk_, s);
  gemma4_attn_prepare(a, proj_, proj_ld_, T, L.q_norm, L.k_norm, L.inv_freq, pos, L.slots, q_, L.k_cache, L.v_cache,
                      s);
  gemma4_attention(a, q_, L.k_cache, L.v_cache, L.slots, T, pos, window, act_buf_, act_, s);
  matmul(L.o, act_buf_, act_, T, qd, y_, H_, false, splitk_, s);
  gemma4_norm_residual(y_, H_, L.post_attn_norm, eps_, T, H_, 1.0f, x_, H_, s);
  rmsnorm(x_, Act::F32, H_, L.pre_ff_norm, eps_, T, H_, xn_, act_, H_, nullptr, s);
  matmul(L.gate_up, xn_, act_, T, H_, proj_, proj_ld_, false, splitk_, s);
  gemma4_geglu(proj_, proj_ld_, I_, T, act_buf_, act_, I_, s);
  matmul(L.down, act_buf_, act_, T, I_, y_, H_, false, splitk_, s);
  if (L.moe.E > 0) moe_half(L.moe, T);
  gemma4_norm_residual(y_, H_, L.post_ff_norm, eps_, T, H_, L.layer_scalar, x_, H_, s);
}

void CudaGemma4::forward_chunk(const int32_t* tokens, int pos, int T, void* hidden_out) {
  // From pageable memory: the call returns once the tokens are staged.
  CUDA_CHECK(cudaMemcpyAsync(d_tokens_, tokens, size_t(T) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  embed_rows(embed_, d_tokens_, T, x_, H_, stream_);
  scale_floats(x_, int64_t(T) * H_, embed_scale_, stream_);
  for (const auto& L : layers_) decoder_layer(L, pos, T);
  rmsnorm(x_, Act::F32, H_, final_norm_, eps_, T, H_, hidden_out, act_, H_, nullptr, stream_);
}

void CudaGemma4::target_forward(std::span<const int32_t> tokens) {
  const int T = int(tokens.size());
  if (T <= 0) fail("target_forward: no tokens");
  check_capacity(T);
  for (int32_t t : tokens)
    if (t < 0 || t >= V_) fail("token id {} is outside the vocabulary [0, {})", t, V_);
  invalidate_mirrors(length_);
  const size_t row_bytes = size_t(H_) * size_t(act_size(act_));
  for (int c = 0; c < T; c += kMaxRows) {
    const int n = std::min(kMaxRows, T - c);
    forward_chunk(tokens.data() + c, length_ + c, n, static_cast<char*>(hidden_) + size_t(c) * row_bytes);
  }
  record_forward(T);
}

void CudaGemma4::target_rollback(int keep) {
  record_rollback(keep);
  invalidate_mirrors(length_);
}

// ---------------------------------------------------------------------------
// Gemma4Target: what the CPU assistant reads, copied back

void CudaGemma4::fetch(const void* src, size_t bytes, void* dst) const {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaGemma4::last_hidden(float* out) const {
  if (last_T_ == 0) fail("last_hidden: no target_forward yet");
  const size_t row = size_t(last_T_ - 1) * size_t(H_);
  if (act_ == Act::F32) {
    fetch(static_cast<const float*>(hidden_) + row, size_t(H_) * 4, out);
    return;
  }
  bf16_row_.resize(size_t(H_));
  fetch(static_cast<const uint16_t*>(hidden_) + row, size_t(H_) * 2, bf16_row_.data());
  for (int d = 0; d < H_; ++d) out[d] = bf16_to_f32(bf16_row_[size_t(d)]);
}

void CudaGemma4::scaled_embedding(int32_t token, float* out) const {
  if (token < 0 || token >= V_) fail("token id {} is outside the vocabulary [0, {})", token, V_);
  CUDA_CHECK(cudaMemcpyAsync(d_embed_token_, &token, sizeof(token), cudaMemcpyHostToDevice, stream_));
  embed_rows(embed_, d_embed_token_, 1, d_embed_row_, H_, stream_);
  scale_floats(d_embed_row_, H_, embed_scale_, stream_);
  fetch(d_embed_row_, size_t(H_) * 4, out);
}

void CudaGemma4::invalidate_mirrors(int pos) const {
  for (auto& m : mirrors_) m.upto = std::min(m.upto, pos);
}

const float* CudaGemma4::cached(int layer, int pos, bool key) const {
  if (layer < 0 || layer >= int(layers_.size())) fail("cached K/V: layer {} outside [0, {})", layer, layers_.size());
  const Gemma4DevLayer& L = layers_[size_t(layer)];
  if (pos < 0 || pos >= length_ || pos < length_ - L.slots)
    fail("cached K/V: position {} of layer {} is not held (length {}, {} slots)", pos, layer, length_, L.slots);
  const size_t kv_row = size_t(L.spec.kv_heads) * size_t(L.spec.head_dim);
  KvMirror& m = mirrors_[size_t(layer)];
  if (m.upto < length_) {
    // Positions [first, length) into their slots: one run, or two where the ring wraps.
    const int first = std::max(m.upto, length_ - L.slots);
    const size_t rows = size_t(std::min(length_, L.slots));
    if (m.k.size() < rows * kv_row) {
      m.k.resize(rows * kv_row);
      m.v.resize(rows * kv_row);
    }
    for (int p = first; p < length_;) {
      const int slot = p % L.slots, n = std::min(length_ - p, L.slots - slot);
      const size_t at = size_t(slot) * kv_row, bytes = size_t(n) * kv_row * sizeof(float);
      CUDA_CHECK(cudaMemcpyAsync(&m.k[at], L.k_cache + at, bytes, cudaMemcpyDeviceToHost, stream_));
      CUDA_CHECK(cudaMemcpyAsync(&m.v[at], L.v_cache + at, bytes, cudaMemcpyDeviceToHost, stream_));
      p += n;
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    m.upto = length_;
  }
  const size_t at = size_t(pos % L.slots) * kv_row;
  return key ? &m.k[at] : &m.v[at];
}

}  // namespace cuda

std::unique_ptr<ModelRuntime> make_cuda_gemma4_runtime(const Gemma4Checkpoint& ckpt, int max_tokens,
                                                       const RuntimeOptions& options) {
  ckpt.check_target_capacity(max_tokens);
  return std::make_unique<cuda::CudaGemma4>(ckpt, max_tokens, options.act);
}

}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
