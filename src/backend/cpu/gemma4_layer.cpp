#include "backend/cpu/gemma4_layer.h"

#include <cmath>
#include <string>

#include "core/thread_pool.h"
#include "io/gemma4_checkpoint.h"

namespace nextn::cpu {

Gemma4Layer load_gemma4_layer(const Gemma4Checkpoint& ck, int index, bool with_kv) {
  const Gemma4TextConfig& c = ck.config();
  const int H = c.hidden_size, Hq = c.num_attention_heads, I = c.intermediate_size;
  const std::string p = "layers." + std::to_string(index) + ".";
  Gemma4Layer L;
  L.spec = c.layers[size_t(index)];
  const int hd = L.spec.head_dim, kvh = L.spec.kv_heads;
  L.input_norm = ck.vector(ck.stored(p + "input_layernorm.weight"), H);
  L.post_attn_norm = ck.vector(ck.stored(p + "post_attention_layernorm.weight"), H);
  L.pre_ff_norm = ck.vector(ck.stored(p + "pre_feedforward_layernorm.weight"), H);
  L.post_ff_norm = ck.vector(ck.stored(p + "post_feedforward_layernorm.weight"), H);
  L.q_norm = ck.vector(ck.stored(p + "self_attn.q_norm.weight"), hd);
  L.layer_scalar = ck.vector(ck.stored(p + "layer_scalar"), 1)[0];
  L.q = Matrix::load(ck.matrix(p + "self_attn.q_proj", int64_t(Hq) * hd, H));
  if (with_kv) {
    L.k_norm = ck.vector(ck.stored(p + "self_attn.k_norm.weight"), hd);
    L.k = Matrix::load(ck.matrix(p + "self_attn.k_proj", int64_t(kvh) * hd, H));
    if (!L.spec.k_eq_v) L.v = Matrix::load(ck.matrix(p + "self_attn.v_proj", int64_t(kvh) * hd, H));
  }
  L.o = Matrix::load(ck.matrix(p + "self_attn.o_proj", H, int64_t(Hq) * hd));
  L.gate = Matrix::load(ck.matrix(p + "mlp.gate_proj", I, H));
  L.up = Matrix::load(ck.matrix(p + "mlp.up_proj", I, H));
  L.down = Matrix::load(ck.matrix(p + "mlp.down_proj", H, I));
  if (c.moe) L.moe = load_gemma4_moe(ck, index);
  return L;
}

void gemma4_rope_table(const Gemma4LayerSpec& s, int64_t pos, float* cos, float* sin) {
  rope_angles(pos, s.head_dim, s.rope_theta, cos, sin);
  for (int i = s.rope_pairs; i < s.head_dim / 2; ++i) cos[i] = 1.0f, sin[i] = 0.0f;
}

void gemma4_layer_tail(const Gemma4Layer& L, const Gemma4TextConfig& c, int T, const float* attn, float* x,
                       ThreadPool* pool, int64_t min_chunk_work) {
  const int H = c.hidden_size, I = c.intermediate_size;
  const float eps = c.rms_norm_eps;
  std::vector<float> n(size_t(T) * H), m(size_t(T) * H), g(size_t(T) * I), u(size_t(T) * I);
  for (int t = 0; t < T; ++t) {
    float* xt = x + size_t(t) * H;
    float* nt = &n[size_t(t) * H];
    rmsnorm(attn + size_t(t) * H, L.post_attn_norm.data(), eps, H, nt);
    for (int d = 0; d < H; ++d) xt[d] += nt[d];
    rmsnorm(xt, L.pre_ff_norm.data(), eps, H, nt);
  }
  matmul(*L.gate, n.data(), T, g.data(), 0, -1, pool, min_chunk_work);
  matmul(*L.up, n.data(), T, u.data(), 0, -1, pool, min_chunk_work);
  for (size_t j = 0; j < g.size(); ++j) g[j] = gelu_tanh(g[j]) * u[j];
  matmul(*L.down, g.data(), T, m.data(), 0, -1, pool, min_chunk_work);
  if (L.moe) gemma4_moe_mix(*L.moe, c, T, x, m.data(), pool, min_chunk_work);
  for (int t = 0; t < T; ++t) {
    float* xt = x + size_t(t) * H;
    float* nt = &n[size_t(t) * H];
    rmsnorm(&m[size_t(t) * H], L.post_ff_norm.data(), eps, H, nt);
    for (int d = 0; d < H; ++d) xt[d] = (xt[d] + nt[d]) * L.layer_scalar;
  }
}

}  // namespace nextn::cpu
