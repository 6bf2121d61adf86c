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
    centroid_logits_ = mem.alloc<float>(size_t(kMaxRows) * size_t(cfg.num_centroids) * 4, "assistant head");
    candidates_ = mem.alloc<int32_t>(n * 4, "assistant head");
    candidate_rows_ = mem.alloc<float>(n * size_t(Ha) * 4, "assistant head");
    scores_ = mem.alloc<float>(n * 4, "assistant head");
  }
  proj_ld_ = std::max(max_qd, 2 * I);
  act_ld_ = std::max(max_qd, I);
  const size_t R = kMaxRows;
  embedding_ = mem.alloc<float>(R * size_t(Hb) * 4, "assistant rows");
  in_ = mem.alloc(R * size_t(2 * Hb) * as, "assistant rows");
  u_ = mem.alloc<float>(R * size_t(Ha) * 4, "assistant rows");
  xn_ = mem.alloc(R * size_t(Ha) * as, "assistant rows");
  proj_ = mem.alloc<float>(R * size_t(proj_ld_) * 4, "assistant rows");
  q_ = mem.alloc<float>(R * size_t(max_qd) * 4, "assistant rows");
  act_buf_ = mem.alloc(R * size_t(act_ld_) * as, "assistant rows");
  y_ = mem.alloc<float>(R * size_t(Ha) * 4, "assistant rows");
  d_ = mem.alloc(R * size_t(Ha) * as, "assistant rows");
  logits_ = mem.alloc<float>(size_t(V) * 4, "assistant logits");
  pairs_ = mem.alloc(size_t(argmax_pairs_bytes(embed_)), "assistant argmax pairs");
  d_rope_rows = mem.alloc<Gemma4Row>(R * sizeof(Gemma4Row), "assistant rows");
  d_attn_rows = mem.alloc<Gemma4Row>(R * sizeof(Gemma4Row), "assistant rows");
  for (int i = 0; i < 2; ++i) {
    d_tokens[i] = mem.alloc<int32_t>(R * 4, "assistant tokens");
    step_hidden[i] = mem.alloc<float>(R * size_t(Hb) * 4, "assistant hidden");
  }
  first_hidden = mem.alloc(R * size_t(Hb) * as, "assistant hidden");
  d_drafts = mem.alloc<int32_t>(R * size_t(kMaxRows) * 4, "assistant drafts");
  int64_t splitk = 0;
  for (const DevMatrix* m : {&pre_projection_, &post_projection_, &centroids_}) splitk = std::max(splitk, splitk_scratch_floats(*m));
  for (const auto& L : layers_)
    for (const DevMatrix* m : {&L.q, &L.o, &L.gate_up, &L.down}) splitk = std::max(splitk, splitk_scratch_floats(*m));
  splitk_ = mem.alloc<float>(size_t(std::max<int64_t>(splitk, 1)) * 4, "assistant split-K partials");
  CUDA_CHECK(cudaMemset(splitk_, 0, size_t(std::max<int64_t>(splitk, 1)) * 4));  // counters start at zero
  CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaAssistant::forward_rows(int R, const int32_t* tokens, const void* hidden, Act hidden_act,
                                 const Gemma4Row* rope_rows, const Gemma4Row* attn_rows, float* next_hidden) {
  if (R < 1 || R > kMaxRows) fail("internal: an assistant pass of {} rows (1 to {})", R, kMaxRows);
  const Gemma4TextConfig& c = cfg.text;
  const Act act = target.act;
  const float eps = c.rms_norm_eps;
  const int Hq = c.num_attention_heads, I = c.intermediate_size;
  const cudaStream_t s = target.stream;
  embed_rows(target.embed, tokens, R, embedding_, Hb, s);
  scale_floats(embedding_, int64_t(R) * Hb, target.embed_scale, s);
  gemma4_assistant_input(embedding_, hidden, hidden_act, R, Hb, in_, act, s);
  matmul(pre_projection_, in_, act, R, 2 * Hb, u_, Ha, false, splitk_, s);
  for (const CudaAssistantLayer& L : layers_) {
    const int hd = L.spec.head_dim, qd = Hq * hd;
    const Gemma4AttnShape a{Hq, L.spec.kv_heads, hd, eps, L.spec.k_eq_v};
    // Keys before the query: the attention row sits at position - 1, and a
    // sliding layer's window grows by one to keep sliding_window + 1 keys.
    const int window = L.spec.sliding ? c.sliding_window + 1 : 0;
    rmsnorm(u_, Act::F32, Ha, L.input_norm, eps, R, Ha, xn_, act, Ha, nullptr, s);
    matmul(L.q, xn_, act, R, Ha, proj_, proj_ld_, false, splitk_, s);
    gemma4_query_prepare(a, proj_, proj_ld_, R, L.q_norm, L.inv_freq, rope_rows, q_, s);
    gemma4_attention(a, q_, attn_rows, L.target_layer, R, window, act_buf_, act, s);
    matmul(L.o, act_buf_, act, R, qd, y_, Ha, false, splitk_, s);
    gemma4_norm_residual(y_, Ha, L.post_attn_norm, eps, R, Ha, 1.0f, u_, Ha, s);
    rmsnorm(u_, Act::F32, Ha, L.pre_ff_norm, eps, R, Ha, xn_, act, Ha, nullptr, s);
    matmul(L.gate_up, xn_, act, R, Ha, proj_, proj_ld_, false, splitk_, s);
    gemma4_geglu(proj_, proj_ld_, I, R, act_buf_, act, act_ld_, s);
    matmul(L.down, act_buf_, act, R, act_ld_, y_, Ha, false, splitk_, s);
    gemma4_norm_residual(y_, Ha, L.post_ff_norm, eps, R, Ha, L.layer_scalar, u_, Ha, s);
  }
  rmsnorm(u_, Act::F32, Ha, final_norm_, eps, R, Ha, d_, act, Ha, nullptr, s);
  matmul(post_projection_, d_, act, R, Ha, next_hidden, Hb, false, splitk_, s);
}

void CudaAssistant::head_argmax_rows(int R, int32_t* out) {
  if (!cfg.use_ordered_embeddings) {
    matmul_argmax(embed_, d_, target.act, R, Ha, pairs_, out, nullptr, target.stream);
    return;
  }
  for (int r = 0; r < R; ++r) centroid_head(r, out + r, nullptr);
}

void CudaAssistant::head_logits_row() {
  const float cap = cfg.text.final_logit_softcapping;
  if (cfg.use_ordered_embeddings) {
    centroid_head(0, nullptr, logits_);
    return;
  }
  matmul(embed_, d_, target.act, 1, Ha, logits_, V, false, nullptr, target.stream);
  if (cap > 0.0f) softcap_floats(logits_, V, cap, target.stream);
}

// Centroid-masked: the top-k centroids' tokens are the candidates; every
// other token sits below them (CpuGemma4Assistant::head_argmax).
void CudaAssistant::centroid_head(int r, int32_t* out, float* logits) {
  const Act act = target.act;
  const cudaStream_t s = target.stream;
  const int C = cfg.num_centroids, k = cfg.centroid_intermediate_top_k, per = V / C, n = k * per;
  const void* d_row = static_cast<const char*>(d_) + size_t(r) * size_t(Ha) * size_t(act_size(act));
  float* cl = centroid_logits_ + size_t(r) * size_t(C);
  matmul(centroids_, d_row, act, 1, Ha, cl, C, false, splitk_, s);
  gemma4_pick_candidates(cl, C, k, per, ordering_, candidates_, s);
  embed_rows(embed_, candidates_, n, candidate_rows_, Ha, s);
  gemma4_score_candidates(candidate_rows_, n, Ha, d_row, act, scores_, s);
  if (logits == nullptr) gemma4_best_candidate(scores_, candidates_, n, out, s);
  else gemma4_candidate_logits(scores_, candidates_, n, cfg.text.final_logit_softcapping, logits, V, s);
}

namespace {

// A chain of one sequence: its round's bonus and position (set by start),
// and for sampled drafting its own rows, tokens [bonus, drafts...] and two
// hidden rows on the device. Greedy rounds run through propose_together,
// alone or beside other chains of the same assistant.
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
    position_ = seq_.target_length();
    if (position_ < 1) fail("assistant step at position 0: the target holds no K/V yet");
    if (bonus < 0 || bonus >= a_->V) fail("assistant: token id {} is outside the vocabulary", bonus);
    bonus_ = bonus;
    at_ = 0;
    sampled_ready_ = false;
  }
  void propose(int n, int32_t* out) override {
    AssistantChain* self = this;
    propose_together({&self, 1}, {&n, 1}, {&out, 1});
  }
  const void* batch_key() const override { return a_.get(); }
  void propose_together(std::span<AssistantChain* const> chains, std::span<const int> n,
                        std::span<int32_t* const> out) override;
  void next_logits(float* out) override {
    if (at_ >= kMaxRows) fail("internal: assistant chain of more than {} drafts", kMaxRows);
    stage_sampled();
    const bool first = at_ == 0;
    const void* hidden = first ? seq_.last_hidden_row() : hidden_[(at_ - 1) & 1];
    a_->forward_rows(1, tokens_ + at_, hidden, first ? a_->target.act : Act::F32, rows_, rows_ + 1,
                     hidden_[at_ & 1]);
    a_->head_logits_row();
    a_->target.fetch(a_->logits(), sizeof(float) * size_t(a_->V), out);
  }
  void advance(int32_t token) override {
    ++at_;
    CUDA_CHECK(cudaMemcpyAsync(tokens_ + at_, &token, sizeof(token), cudaMemcpyHostToDevice, a_->target.stream));
  }

 private:
  // The sampled path's own rows and bonus on the device, once per round.
  void stage_sampled() {
    if (sampled_ready_) return;
    const Gemma4Row rows[2] = {{seq_.device_caches(), position_}, {seq_.device_caches(), position_ - 1}};
    const cudaStream_t s = a_->target.stream;
    // From pageable memory: the calls return once the host values are staged.
    CUDA_CHECK(cudaMemcpyAsync(rows_, rows, sizeof(rows), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(tokens_, &bonus_, sizeof(bonus_), cudaMemcpyHostToDevice, s));
    sampled_ready_ = true;
  }

  std::shared_ptr<CudaAssistant> a_;
  CudaGemma4& seq_;
  DeviceMemory mem_;
  int position_ = 0;              // the round's query position: the target's length at start()
  int32_t bonus_ = 0;
  int at_ = 0;                    // drafts made in this round (sampled path)
  bool sampled_ready_ = false;
  Gemma4Row* rows_ = nullptr;     // [2] device: rope and attention rows (sampled path)
  int32_t* tokens_ = nullptr;     // [kMaxRows + 1] device: the bonus, then the drafts (sampled path)
  float* hidden_[2] = {};         // [Hb] fp32 each: step i writes hidden_[i & 1] (sampled path)
};

// Step j is one pass over the chains that draft more than j tokens: the
// chains sorted by count (longest first), so those are a prefix of the rows.
void CudaAssistantChain::propose_together(std::span<AssistantChain* const> chains, std::span<const int> n,
                                          std::span<int32_t* const> out) {
  if (chains.empty() || chains.size() != n.size() || chains.size() != out.size() || chains[0] != this)
    fail("internal: propose_together must be called on its first chain");
  if (chains.size() > size_t(kMaxRows)) fail("internal: {} assistant chains in one pass (at most {})", chains.size(), kMaxRows);
  std::vector<size_t> order(chains.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return n[a] > n[b]; });
  const int R = int(chains.size()), steps = n[order[0]];
  if (steps < 1) return;
  if (steps > kMaxRows) fail("internal: assistant chain of {} drafts above {}", steps, kMaxRows);
  CudaAssistant& a = *a_;
  const cudaStream_t s = a.target.stream;
  std::vector<Gemma4Row> rope(static_cast<size_t>(R)), attn(static_cast<size_t>(R));
  std::vector<int32_t> bonus(static_cast<size_t>(R));
  const size_t row_bytes = size_t(a.Hb) * size_t(act_size(a.target.act));
  for (int r = 0; r < R; ++r) {
    auto* c = dynamic_cast<CudaAssistantChain*>(chains[order[size_t(r)]]);
    if (c == nullptr || c->a_.get() != a_.get()) fail("internal: propose_together over chains of different assistants");
    rope[size_t(r)] = {c->seq_.device_caches(), c->position_};
    attn[size_t(r)] = {c->seq_.device_caches(), c->position_ - 1};
    bonus[size_t(r)] = c->bonus_;
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(a.first_hidden) + size_t(r) * row_bytes, c->seq_.last_hidden_row(),
                               row_bytes, cudaMemcpyDeviceToDevice, s));
  }
  // From pageable memory: the calls return once the host values are staged.
  CUDA_CHECK(cudaMemcpyAsync(a.d_rope_rows, rope.data(), size_t(R) * sizeof(Gemma4Row), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(a.d_attn_rows, attn.data(), size_t(R) * sizeof(Gemma4Row), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(a.d_tokens[0], bonus.data(), size_t(R) * 4, cudaMemcpyHostToDevice, s));
  for (int j = 0; j < steps; ++j) {
    int rows = 0;
    while (rows < R && n[order[size_t(rows)]] > j) ++rows;
    const void* hidden = j == 0 ? a.first_hidden : a.step_hidden[(j - 1) & 1];
    a.forward_rows(rows, a.d_tokens[j & 1], hidden, j == 0 ? a.target.act : Act::F32, a.d_rope_rows, a.d_attn_rows,
                   a.step_hidden[j & 1]);
    int32_t* next = a.d_tokens[(j + 1) & 1];
    a.head_argmax_rows(rows, next);
    // Column j of the drafts: row r's draft j.
    CUDA_CHECK(cudaMemcpy2DAsync(a.d_drafts + j, size_t(kMaxRows) * 4, next, 4, 4, size_t(rows),
                                 cudaMemcpyDeviceToDevice, s));
  }
  std::vector<int32_t> drafts(size_t(R) * size_t(kMaxRows));
  a.target.fetch(a.d_drafts, drafts.size() * 4, drafts.data());
  for (int r = 0; r < R; ++r) {
    const size_t i = order[size_t(r)];
    std::copy_n(drafts.begin() + long(size_t(r) * size_t(kMaxRows)), n[i], out[i]);
  }
}

}  // namespace

std::unique_ptr<AssistantChain> make_cuda_assistant_chain(std::shared_ptr<CudaAssistant> assistant, CudaGemma4& seq) {
  return std::make_unique<CudaAssistantChain>(std::move(assistant), seq);
}

}  // namespace nextn::cuda
#endif  // NEXTN_HAVE_CUDA
