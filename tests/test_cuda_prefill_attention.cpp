// The prefill attention on tensor cores (cuda::attention_prefill,
// src/backend/cuda/attention_prefill.cu) against the decode kernel
// (cuda::attention in kMaxRows slices, what prefill ran before) on random q,
// K, V and gates at the real head shapes (27B: 24 q / 4 kv heads, 0.8B: 8 / 2,
// head_dim 256; test-stream: head_dim 64; one at 128), for chunks at position
// 0 and later chunks over earlier keys (pos0 > 0), T not a multiple of 64.
// Both outputs are bf16: the bounds are a few bf16 roundings (q and the
// softmax weights rounded to bf16 here, fp32 accumulation in both; a CPU
// simulation of those roundings gave L2 relative errors of 2.6e-3 to 3.8e-3
// and max abs errors under 0.3 % of max |out| at q std 1 and 2). Cache rows
// past the last query are NaN: neither kernel may read them. Skipped without
// a GPU.
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/cuda/kernels.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

using test::DevBuf;

struct PrefillAttnCase {
  cuda::AttnShape a;
  int pos0, T;
  float q_std;
};

TEST(CudaOps, PrefillAttentionCloseToDecodeKernel) {
  NEXTN_REQUIRE_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const cuda::AttnShape s27{24, 4, 256, 64, 1e-6f}, s08{8, 2, 256, 64, 1e-6f}, s128{4, 1, 128, 32, 1e-6f},
      stream{2, 1, 64, 16, 1e-6f};
  const PrefillAttnCase cases[] = {
      {s27, 0, 512, 1.0f},  {s27, 1536, 512, 1.0f}, {s27, 0, 100, 2.0f}, {s27, 700, 77, 1.0f},
      {s27, 63, 1, 1.0f},   {s08, 0, 448, 1.0f},    {s08, 512, 200, 2.0f}, {s128, 130, 129, 1.0f},
      {stream, 0, 512, 1.0f}, {stream, 512, 88, 2.0f},
  };
  for (const auto& c : cases) {
    const auto& a = c.a;
    ASSERT_TRUE(cuda::attention_prefill_supports(a));
    const int hd = a.hd, kv_row = a.Hkv * hd, qd = a.Hq * hd, ld = a.Hq * 2 * hd + 2 * kv_row;
    const int nk = c.pos0 + c.T, max_tokens = nk + 64;  // 64 unwritten (NaN) rows after the last query
    SCOPED_TRACE(testing::Message() << "Hq " << a.Hq << " Hkv " << a.Hkv << " hd " << hd << " pos0 " << c.pos0
                                    << " T " << c.T << " q std " << c.q_std);
    const auto q = test::randn(rng, size_t(c.T) * qd, c.q_std);
    const auto proj = test::randn(rng, size_t(c.T) * ld, 1.0f);  // only the gates are read
    const auto k = test::to_bf16_bits(test::randn(rng, size_t(nk) * kv_row, 1.0f));
    const auto v = test::to_bf16_bits(test::randn(rng, size_t(nk) * kv_row, 1.0f));
    test::PagedKv kv(max_tokens, size_t(kv_row) * 2);  // rows past nk stay NaN
    kv.put(0, k);
    kv.put(1, v);
    DevBuf dq(q.size() * 4), dproj(proj.size() * 4),
        dpos(size_t((c.T + cuda::kMaxRows - 1) / cuda::kMaxRows) * 4), dref(size_t(c.T) * qd * 2), dgot(dref.bytes),
        part(size_t(cuda::attn_partial_floats(a, max_tokens)) * 4);
    dq.put(q);
    dproj.put(proj);
    ASSERT_EQ(cudaMemset(part.p, 0, size_t(cuda::attn_counter_bytes(a))), cudaSuccess);  // the splits' counters
    std::vector<int> pos;
    for (int t0 = 0; t0 < c.T; t0 += cuda::kMaxRows) pos.push_back(c.pos0 + t0);
    dpos.put(pos);
    // The reference: the decode kernel in kMaxRows slices (the split path of prefill_attention).
    for (int t0 = 0, i = 0; t0 < c.T; t0 += cuda::kMaxRows, ++i)
      cuda::attention(a, dq.as<float>() + size_t(t0) * qd, kv.view(), cuda::Act::BF16,
                      dproj.as<float>() + size_t(t0) * ld, ld, std::min(cuda::kMaxRows, c.T - t0), dpos.as<int>() + i,
                      max_tokens, part.as<float>(), static_cast<uint16_t*>(dref.p) + size_t(t0) * qd, nullptr);
    cuda::attention_prefill(a, dq.as<float>(), kv.view(), dproj.as<float>(), ld, c.T, dpos.as<int>(), dgot.p,
                            nullptr);
    const auto ref = test::bf16_bits_to_f32(dref.get<uint16_t>(size_t(c.T) * qd));
    const auto got = test::bf16_bits_to_f32(dgot.get<uint16_t>(size_t(c.T) * qd));
    double max_abs = 0, max_ref = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " not finite";
      max_abs = std::max(max_abs, std::fabs(double(got[i]) - ref[i]));
      max_ref = std::max(max_ref, std::fabs(double(ref[i])));
    }
    const double rel = test::rel_err(got, ref);
    std::printf("[cuda prefill attn] Hq %d Hkv %d hd %d pos0 %d T %d q std %.0f: max abs err %.2e (max |out| %.2f), "
                "relative L2 %.2e\n",
                a.Hq, a.Hkv, hd, c.pos0, c.T, double(c.q_std), max_abs, max_ref, rel);
    EXPECT_LT(rel, 6e-3);
    EXPECT_LT(max_abs, 1.5e-2 * max_ref);
  }
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
