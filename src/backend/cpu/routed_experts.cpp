#include "backend/cpu/routed_experts.h"

#include <algorithm>
#include <vector>

namespace nextn::cpu {

void routed_experts(std::span<const ExpertMlp> experts, GateActivation act, int N, int k, const int32_t* chosen,
                    const float* weights, const float* x, float* out, ThreadPool* pool, int64_t min_chunk_work) {
  const int64_t H = experts.front().down->rows();
  std::fill(out, out + size_t(N) * size_t(H), 0.0f);
  std::vector<int> rows;          // the rows routed to expert e, rising
  std::vector<float> row_weight;  // their weights for e
  std::vector<float> xe, g, u, y;  // [n][H], [n][I], [n][I], [n][H]
  for (int e = 0; e < int(experts.size()); ++e) {  // rising id: each row's sum in the same order in any batch
    rows.clear();
    row_weight.clear();
    for (int t = 0; t < N; ++t)
      for (int j = 0; j < k; ++j)
        if (chosen[size_t(t) * k + j] == e) rows.push_back(t), row_weight.push_back(weights[size_t(t) * k + j]);
    if (rows.empty()) continue;
    const ExpertMlp& X = experts[size_t(e)];
    const int n = int(rows.size());
    const size_t I = size_t(X.gate->rows());
    xe.resize(size_t(n) * H);
    for (int i = 0; i < n; ++i) std::copy_n(x + size_t(rows[size_t(i)]) * H, H, &xe[size_t(i) * H]);
    g.resize(size_t(n) * I);
    u.resize(size_t(n) * I);
    y.resize(size_t(n) * H);
    matmul(*X.gate, xe.data(), n, g.data(), 0, -1, pool, min_chunk_work);
    matmul(*X.up, xe.data(), n, u.data(), 0, -1, pool, min_chunk_work);
    if (act == GateActivation::Silu)
      for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
    else
      for (size_t i = 0; i < g.size(); ++i) g[i] = gelu_tanh(g[i]) * u[i];
    matmul(*X.down, g.data(), n, y.data(), 0, -1, pool, min_chunk_work);
    for (int i = 0; i < n; ++i) {
      float* o = out + size_t(rows[size_t(i)]) * H;
      const float w = row_weight[size_t(i)];
      for (int64_t h = 0; h < H; ++h) o[h] += y[size_t(i) * H + h] * w;
    }
  }
}

}  // namespace nextn::cpu
