// The Qwen3.5 MoE block on the CPU (transformers' Qwen3_5MoeSparseMoeBlock):
//   out = sum over the row's top-k experts e, by rising id, of w_e * expert_e(x)
//         + sigmoid(shared_expert_gate . x) * shared_expert(x)
// with expert(x) = down(silu(gate x) * up x). Each expert runs once over
// the rows routed to it; every product element is one dot() and each row's
// sum is taken in a fixed order, so a row's output is the same bits alone
// or among any other rows (speculative == greedy, batched == solo).
#include <algorithm>
#include <vector>

#include "backend/cpu/moe_router.h"
#include "backend/cpu/qwen35_model.h"
#include "io/checkpoint.h"
#include "io/moe_experts.h"

namespace nextn {
namespace cpu_qwen35 {

std::shared_ptr<const MoeWeights> load_moe(const Qwen35Checkpoint& ck, const std::string& layer) {
  const Qwen35Config& c = ck.config();
  const int H = c.hidden_size, Is = c.shared_expert_intermediate_size;
  const std::string p = layer + ".mlp";
  auto W = std::make_shared<MoeWeights>();
  W->router = Matrix::load(ck.matrix(p + ".gate", c.num_experts, H));
  const ExpertLayout layout = expert_layout(ck, layer);
  for (int e = 0; e < c.num_experts; ++e) {
    const ExpertMatrices m = expert_matrices(ck, layer, layout, e);
    W->experts.push_back({Matrix::load(m.gate), Matrix::load(m.up), Matrix::load(m.down)});
  }
  W->shared_gate = Matrix::load(ck.matrix(p + ".shared_expert.gate_proj", Is, H));
  W->shared_up = Matrix::load(ck.matrix(p + ".shared_expert.up_proj", Is, H));
  W->shared_down = Matrix::load(ck.matrix(p + ".shared_expert.down_proj", H, Is));
  W->shared_expert_gate = Matrix::load(ck.matrix(p + ".shared_expert_gate", 1, H));
  return W;
}

void CpuModel::moe_mlp(const MoeWeights& W, int N, const float* xn, float* out) {
  const int H = cfg.hidden_size, E = cfg.num_experts, k = cfg.num_experts_per_tok;
  const int I = cfg.moe_intermediate_size, Is = cfg.shared_expert_intermediate_size;
  std::vector<float> router_logits(size_t(N) * E);  // [N][E]
  matmul(*W.router, xn, N, router_logits.data());
  std::vector<int32_t> chosen(size_t(N) * k);  // [N][k] expert ids
  std::vector<float> weight(size_t(N) * k);    // [N][k] their renormalized probabilities
  for (int t = 0; t < N; ++t)
    cpu::route_top_k(&router_logits[size_t(t) * E], E, k, &chosen[size_t(t) * k], &weight[size_t(t) * k]);

  std::fill(out, out + size_t(N) * H, 0.0f);
  std::vector<int> rows;          // the rows routed to expert e, rising
  std::vector<float> row_weight;  // their weights for e
  std::vector<float> xe, g, u, y;  // [n][H], [n][I], [n][I], [n][H]
  for (int e = 0; e < E; ++e) {  // rising id: each row's sum in the same order in any batch
    rows.clear();
    row_weight.clear();
    for (int t = 0; t < N; ++t)
      for (int j = 0; j < k; ++j)
        if (chosen[size_t(t) * k + j] == e) rows.push_back(t), row_weight.push_back(weight[size_t(t) * k + j]);
    if (rows.empty()) continue;
    const int n = int(rows.size());
    xe.resize(size_t(n) * H);
    for (int i = 0; i < n; ++i) std::copy_n(xn + size_t(rows[size_t(i)]) * H, H, &xe[size_t(i) * H]);
    g.resize(size_t(n) * I);
    u.resize(size_t(n) * I);
    y.resize(size_t(n) * H);
    const MoeWeights::Expert& X = W.experts[size_t(e)];
    matmul(*X.gate, xe.data(), n, g.data());
    matmul(*X.up, xe.data(), n, u.data());
    for (size_t i = 0; i < g.size(); ++i) g[i] = cpu::silu(g[i]) * u[i];
    matmul(*X.down, g.data(), n, y.data());
    for (int i = 0; i < n; ++i) {
      float* o = out + size_t(rows[size_t(i)]) * H;
      const float w = row_weight[size_t(i)];
      for (int h = 0; h < H; ++h) o[h] += y[size_t(i) * H + h] * w;
    }
  }

  std::vector<float> sg(size_t(N) * Is), su(size_t(N) * Is), shared(size_t(N) * H), gate(static_cast<size_t>(N));
  matmul(*W.shared_gate, xn, N, sg.data());
  matmul(*W.shared_up, xn, N, su.data());
  for (size_t i = 0; i < sg.size(); ++i) sg[i] = cpu::silu(sg[i]) * su[i];
  matmul(*W.shared_down, sg.data(), N, shared.data());
  matmul(*W.shared_expert_gate, xn, N, gate.data());
  for (int t = 0; t < N; ++t) {
    const float s = cpu::sigmoid(gate[size_t(t)]);
    for (int h = 0; h < H; ++h) out[size_t(t) * H + h] += s * shared[size_t(t) * H + h];
  }
}

}  // namespace cpu_qwen35
}  // namespace nextn
