// The CUDA Gemma 4 assistant (gemma4_assistant.h): loading, the chain step
// and the head, and the per-sequence chain.
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/gemma4_assistant.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/check.h"
#include "backend/cuda/weight_upload.h"
#include "core/error.h"

namespace nextn::cuda {

CudaAssistant::CudaAssistant(const Gemma4Checkpoint& ck, CudaGemma4Model& t)
    : dir(ck.dir()), cfg(ck.assistant_config()), target(t) {
  const AssistantKvLayers kv = check_assistant_fits(ck, t.cfg);
  const Gemma4TextConfig& c = cfg.text;
  Ha = c.hidden_size;
  Hb = cfg.backbone_hidden_size;
  V = c.vocab_size;
  const int Hq = c.num_attention_heads, I = c.intermediate_size;
  if (c.moe) fail("{}/config.json: a mixture-of-experts assistant is not supported on --backend cuda", ck.dir());
  const Act act = t.act;
  DeviceMemory& mem = t.mem;
  auto matrix = [&](const std::vector<WeightRef>& parts, const char* what, bool splittable) {
    return upload_weight_parts(parts, act, mem, what, splittable, WeightUse::Matmul);
  };
  auto floats = [&](const std::string& name, int64_t n) { return upload_floats(mem, ck.vector(ck.stored(name), n), "norms"); };
  pre_projection_ = matrix({ck.matrix("pre_projection", Ha, 2 * int64_t(Hb), true)}, "assistant pre_projection", true);
  post_projection_ = matrix({ck.matrix("post_projection", Hb, Ha, true)}, "assistant post_projection", true);
  embed_ = matrix({ck.matrix("embed_tokens", V, Ha)}, "assistant head", false);  // unsplit: the fused argmax reads it
  final_norm_ = floats("norm.weight", Ha);
  int max_qd = 0;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    CudaAssistantLayer L;
    L.spec = c.layers[size_t(i)];
    const int hd = L.spec.head_dim;
    if (hd > kGemma4MaxHeadDim || hd % 2 != 0 || L.spec.kv_heads < 1 || Hq % L.spec.kv_heads != 0)
      fail("--backend cuda: unsupported assistant shape: head_dim {}, {} query heads over {} KV heads", hd, Hq,
           L.spec.kv_heads);
    L.input_norm = floats(p + "input_layernorm.weight", Ha);
    L.post_attn_norm = floats(p + "post_attention_layernorm.weight", Ha);
    L.pre_ff_norm = floats(p + "pre_feedforward_layernorm.weight", Ha);
    L.post_ff_norm = floats(p + "post_feedforward_layernorm.weight", Ha);
    L.q_norm = floats(p + "self_attn.q_norm.weight", hd);
    L.layer_scalar = ck.vector(ck.stored(p + "layer_scalar"), 1)[0];
    L.q = matrix({ck.matrix(p + "self_attn.q_proj", int64_t(Hq) * hd, Ha)}, "assistant q", true);
    L.o = matrix({ck.matrix(p + "self_attn.o_proj", Ha, int64_t(Hq) * hd)}, "assistant o", true);
    L.gate_up = matrix({ck.matrix(p + "mlp.gate_proj", I, Ha), ck.matrix(p + "mlp.up_proj", I, Ha)},
                       "assistant MLP gate/up", true);
    L.down = matrix({ck.matrix(p + "mlp.down_proj", Ha, I)}, "assistant MLP down", true);
    std::vector<float> inv(size_t(hd / 2), 0.0f);  // as cpu::gemma4_rope_table
    for (int j = 0; j < L.spec.rope_pairs && j < hd / 2; ++j)
      inv[size_t(j)] = float(1.0 / std::pow(L.spec.rope_theta, double(2 * j) / double(hd)));
    L.inv_freq = upload_floats(mem, inv, "rope");
    L.target_layer = L.spec.sliding ? kv.sliding : kv.full;
    max_qd = std::max(max_qd, Hq * hd);
    layers_.push_back(L);
  }
  const size_t as = size_t(act_size(act));
  if (cfg.use_ordered_embeddings) {
    if (cfg.num_centroids < 1 || V % cfg.num_centroids != 0 || cfg.centroid_intermediate_top_k < 1 ||
        cfg.centroid_intermediate_top_k > cfg.num_centroids)
      fail("{}/config.json: {} centroids, top {}: the vocabulary {} must split evenly", ck.dir(), cfg.num_centroids,
           cfg.centroid_intermediate_top_k, V);
    centroids_ = matrix({ck.matrix("masked_embedding.centroids", cfg.num_centroids, Ha, true)}, "assistant centroids",
                        false);
    const std::vector<int32_t> ordering = ck.token_ordering();
    ordering_ = mem.alloc<int32_t>(ordering.size() * 4, "assistant token ordering");
    CUDA_CHECK(cudaMemcpy(ordering_, ordering.data(), ordering.size() * 4, cudaMemcpyHostToDevice));
    const size_t n = size_t(cfg.centroid_intermediate_top_k) * size_t(V / cfg.num_centroids);
    centroid_logits_ = mem.alloc<float>(size_t(cfg.num_centroids) * 4, "assistant head");
    candidates_ = mem.alloc<int32_t>(n * 4, "assistant head");
    candidate_rows_ = mem.alloc<float>(n * size_t(Ha) * 4, "assistant head");
    scores_ = mem.alloc<float>(n * 4, "assistant head");
  }
  proj_ld_ = std::max(max_qd, 2 * I);
  act_ld_ = std::max(max_qd, I);
  embedding_ = mem.alloc<float>(size_t(Hb) * 4, "assistant rows");
  in_ = mem.alloc(size_t(2 * Hb) * as, "assistant rows");
  u_ = mem.alloc<float>(size_t(Ha) * 4, "assistant rows");
  xn_ = mem.alloc(size_t(Ha) * as, "assistant rows");
  proj_ = mem.alloc<float>(size_t(proj_ld_) * 4, "assistant rows");
  q_ = mem.alloc<float>(size_t(max_qd) * 4, "assistant rows");
  act_buf_ = mem.alloc(size_t(act_ld_) * as, "assistant rows");
  y_ = mem.alloc<float>(size_t(Ha) * 4, "assistant rows");
  d_ = mem.alloc(size_t(Ha) * as, "assistant rows");
  logits_ = mem.alloc<float>(size_t(V) * 4, "assistant logits");
  pairs_ = mem.alloc(size_t(argmax_pairs_bytes(embed_, 1)), "assistant argmax pairs");
  int64_t splitk = 0;
  for (const DevMatrix* m : {&pre_projection_, &post_projection_}) splitk = std::max(splitk, splitk_scratch_floats(*m, 1));
  for (const auto& L : layers_)
    for (const DevMatrix* m : {&L.q, &L.o, &L.gate_up, &L.down}) splitk = std::max(splitk, splitk_scratch_floats(*m, 1));
  splitk_ = mem.alloc<float>(size_t(std::max<int64_t>(splitk, 1)) * 4, "assistant split-K partials");
  CUDA_CHECK(cudaMemset(splitk_, 0, size_t(std::max<int64_t>(splitk, 1)) * 4));  // counters start at zero
  CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaAssistant::step(const Gemma4Row* rows, const int32_t* token, const void* hidden, Act hidden_act,
                         float* next_hidden, int32_t* token_out, float* logits) {
  const Gemma4TextConfig& c = cfg.text;
  const Act act = target.act;
  const float eps = c.rms_norm_eps;
  const int Hq = c.num_attention_heads, I = c.intermediate_size;
  const cudaStream_t s = target.stream;
  embed_rows(target.embed, token, 1, embedding_, Hb, s);
  scale_floats(embedding_, Hb, target.embed_scale, s);
  gemma4_assistant_input(embedding_, hidden, hidden_act, Hb, in_, act, s);
  matmul(pre_projection_, in_, act, 1, 2 * Hb, u_, Ha, false, splitk_, s);
  for (const CudaAssistantLayer& L : layers_) {
    const int hd = L.spec.head_dim, qd = Hq * hd;
    const Gemma4AttnShape a{Hq, L.spec.kv_heads, hd, eps, L.spec.k_eq_v};
    // Keys before the query: the attention row sits at position - 1, and a
    // sliding layer's window grows by one to keep sliding_window + 1 keys.
    const int window = L.spec.sliding ? c.sliding_window + 1 : 0;
    rmsnorm(u_, Act::F32, Ha, L.input_norm, eps, 1, Ha, xn_, act, Ha, nullptr, s);
    matmul(L.q, xn_, act, 1, Ha, proj_, proj_ld_, false, splitk_, s);
    gemma4_query_prepare(a, proj_, proj_ld_, 1, L.q_norm, L.inv_freq, rows, q_, s);
    gemma4_attention(a, q_, rows + 1, L.target_layer, 1, window, act_buf_, act, s);
    matmul(L.o, act_buf_, act, 1, qd, y_, Ha, false, splitk_, s);
    gemma4_norm_residual(y_, Ha, L.post_attn_norm, eps, 1, Ha, 1.0f, u_, Ha, s);
    rmsnorm(u_, Act::F32, Ha, L.pre_ff_norm, eps, 1, Ha, xn_, act, Ha, nullptr, s);
    matmul(L.gate_up, xn_, act, 1, Ha, proj_, proj_ld_, false, splitk_, s);
    gemma4_geglu(proj_, proj_ld_, I, 1, act_buf_, act, I, s);
    matmul(L.down, act_buf_, act, 1, I, y_, Ha, false, splitk_, s);
    gemma4_norm_residual(y_, Ha, L.post_ff_norm, eps, 1, Ha, L.layer_scalar, u_, Ha, s);
  }
  rmsnorm(u_, Act::F32, Ha, final_norm_, eps, 1, Ha, d_, act, Ha, nullptr, s);
  matmul(post_projection_, d_, act, 1, Ha, next_hidden, Hb, false, splitk_, s);
  head(token_out, logits);
}

void CudaAssistant::head(int32_t* token_out, float* logits) {
  const Act act = target.act;
  const cudaStream_t s = target.stream;
  const float cap = cfg.text.final_logit_softcapping;
  if (!cfg.use_ordered_embeddings) {
    if (logits == nullptr) {
      matmul_argmax(embed_, d_, act, 1, Ha, pairs_, token_out, nullptr, s);
      return;
    }
    matmul(embed_, d_, act, 1, Ha, logits, V, false, nullptr, s);
    if (cap > 0.0f) softcap_floats(logits, V, cap, s);
    return;
  }
  // Centroid-masked: the top-k centroids' tokens are the candidates; every
  // other token sits below them (CpuGemma4Assistant::head_argmax).
  const int C = cfg.num_centroids, k = cfg.centroid_intermediate_top_k, per = V / C, n = k * per;
  matmul(centroids_, d_, act, 1, Ha, centroid_logits_, C, false, nullptr, s);
  gemma4_pick_candidates(centroid_logits_, C, k, per, ordering_, candidates_, s);
  embed_rows(embed_, candidates_, n, candidate_rows_, Ha, s);
  gemma4_score_candidates(candidate_rows_, n, Ha, d_, act, scores_, s);
  if (logits == nullptr) gemma4_best_candidate(scores_, candidates_, n, token_out, s);
  else gemma4_candidate_logits(scores_, candidates_, n, cap, logits, V, s);
}

namespace {

// A chain of one sequence: the round's two rows (rope and attention
// positions), the round's tokens [bonus, drafts...] and two hidden rows,
// all on the device.
class CudaAssistantChain final : public AssistantChain {
 public:
  CudaAssistantChain(std::shared_ptr<CudaAssistant> a, CudaGemma4& seq) : a_(std::move(a)), seq_(seq) {
    DeviceMemory& mem = mem_;
    rows_ = mem.alloc<Gemma4Row>(2 * sizeof(Gemma4Row), "assistant rows");
    tokens_ = mem.alloc<int32_t>(size_t(kMaxRows + 1) * 4, "assistant tokens");
    hidden_[0] = mem.alloc<float>(size_t(a_->Hb) * 4, "assistant hidden");
    hidden_[1] = mem.alloc<float>(size_t(a_->Hb) * 4, "assistant hidden");
  }
  ~CudaAssistantChain() override { (void)cudaStreamSynchronize(a_->target.stream); }  // before mem_ goes
  void start(int32_t bonus) override {
    const int position = seq_.target_length();
    if (position < 1) fail("assistant step at position 0: the target holds no K/V yet");
    if (bonus < 0 || bonus >= a_->V) fail("assistant: token id {} is outside the vocabulary", bonus);
    const Gemma4Row rows[2] = {{seq_.device_caches(), position}, {seq_.device_caches(), position - 1}};
    const cudaStream_t s = a_->target.stream;
    // From pageable memory: the calls return once the host values are staged.
    CUDA_CHECK(cudaMemcpyAsync(rows_, rows, sizeof(rows), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(tokens_, &bonus, sizeof(bonus), cudaMemcpyHostToDevice, s));
    at_ = 0;
  }
  void propose(int n, int32_t* out) override {
    if (at_ + n > kMaxRows) fail("internal: assistant chain of {} drafts above {}", at_ + n, kMaxRows);
    for (int i = 0; i < n; ++i) step(nullptr);
    a_->target.fetch(tokens_ + at_ - n + 1, sizeof(int32_t) * size_t(n), out);
  }
  void next_logits(float* out) override {
    if (at_ >= kMaxRows) fail("internal: assistant chain of more than {} drafts", kMaxRows);
    step(a_->logits());
    --at_;  // the position is drafted by advance()
    a_->target.fetch(a_->logits(), sizeof(float) * size_t(a_->V), out);
  }
  void advance(int32_t token) override {
    ++at_;
    CUDA_CHECK(cudaMemcpyAsync(tokens_ + at_, &token, sizeof(token), cudaMemcpyHostToDevice, a_->target.stream));
  }

 private:
  // Step at_: token tokens_[at_] with the hidden row before it (the
  // target's at the round's first step), into tokens_[at_ + 1] (or logits).
  void step(float* logits) {
    const bool first = at_ == 0;
    const void* hidden = first ? seq_.last_hidden_row() : hidden_[(at_ - 1) & 1];
    a_->step(rows_, tokens_ + at_, hidden, first ? a_->target.act : Act::F32, hidden_[at_ & 1], tokens_ + at_ + 1,
             logits);
    ++at_;
  }

  std::shared_ptr<CudaAssistant> a_;
  CudaGemma4& seq_;
  DeviceMemory mem_;
  Gemma4Row* rows_ = nullptr;     // [2] device
  int32_t* tokens_ = nullptr;     // [kMaxRows + 1] device: the bonus, then the drafts
  float* hidden_[2] = {};         // [Hb] fp32 each: step i writes hidden_[i & 1]
  int at_ = 0;                    // drafts made in this round
};

}  // namespace

std::unique_ptr<AssistantChain> make_cuda_assistant_chain(std::shared_ptr<CudaAssistant> assistant, CudaGemma4& seq) {
  return std::make_unique<CudaAssistantChain>(std::move(assistant), seq);
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
