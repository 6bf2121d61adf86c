// The Qwen3.5 MoE block on the CPU (transformers' Qwen3_5MoeSparseMoeBlock):
//   out = sum over the row's top-k experts e, by rising id, of w_e * expert_e(x)
//         + sigmoid(shared_expert_gate . x) * shared_expert(x)
// with expert(x) = down(silu(gate x) * up x), summed by routed_experts.h
// (batch invariant: a row's output is the same bits alone or among any
// other rows).
#include <algorithm>
#include <vector>

#include "backend/cpu/moe_router.h"
#include "backend/cpu/routed_experts.h"
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
  const int Is = cfg.shared_expert_intermediate_size;
  std::vector<float> router_logits(size_t(N) * E);  // [N][E]
  matmul(*W.router, xn, N, router_logits.data());
  std::vector<int32_t> chosen(size_t(N) * k);  // [N][k] expert ids
  std::vector<float> weight(size_t(N) * k);    // [N][k] their renormalized probabilities
  for (int t = 0; t < N; ++t)
    cpu::route_top_k(&router_logits[size_t(t) * E], E, k, &chosen[size_t(t) * k], &weight[size_t(t) * k]);

  cpu::routed_experts(W.experts, cpu::GateActivation::Silu, N, k, chosen.data(), weight.data(), xn, out, &pool,
                      min_chunk_work);

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
