// Tensor parallelism on the CPU (docs/tensor-parallel.md): the CPU
// communicator's collectives (sums in rank order whatever the thread timing,
// the argmax reduction's lowest-index rule, a failing rank), and Qwen3.5
// split over 2 and 4 ranks on the transformers fixtures: greedy tokens equal
// the fixtures' references, teacher-forced logits and MTP drafts match them,
// speculative output equals TP-N greedy bit for bit at every K, and a run's
// bits do not depend on threads or timing. The CLI's --tensor-parallel.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "backend/cpu/ops.h"
#include "backend/cpu/qwen35.h"
#include "cli_util.h"
#include "core/cpu_comm.h"
#include "core/rank_threads.h"
#include "engine/generate.h"
#include "fixture_util.h"
#include "io/checkpoint.h"
#include "io/tensor_parallel_plan.h"
#include "model/runtime.h"
#include "speculative/verify_counters.h"

namespace nextn {
namespace {

// ---- the communicator ----

void run_ranks(CpuCommGroup& group, RankThreads& threads, const std::function<void(int)>& fn) {
  threads.run(fn, [&] { group.abort(); }, is_comm_aborted);
}

// Rank r's input element i: magnitudes far apart, so that a sum in any
// other order than rank order rounds differently.
float input(int r, size_t i) {
  static const float scale[] = {1e8f, 1.0f, -1e8f, 3.0f, 0.5f};
  return scale[r % 5] * (1.0f + float(i % 7) * 0.125f) + float(i) * 1e-3f;
}

TEST(TensorParallelComm, AllReduceSumsInRankOrderWhateverTheTiming) {
  for (int ranks : {2, 3, 4}) {
    CpuCommGroup group(ranks);
    RankThreads threads(ranks);
    const size_t count = 37;  // not a multiple of the ranks: uneven element ranges
    std::vector<float> want(count);
    for (size_t i = 0; i < count; ++i) {
      float s = input(0, i);
      for (int r = 1; r < ranks; ++r) s += input(r, i);
      want[i] = s;
    }
    // From 3 ranks on, another order (here each rank's own first, then the
    // rest) gives other bits on some element, or this test could not tell;
    // two addends commute exactly.
    bool order_matters = false;
    for (int first = 1; first < ranks; ++first)
      for (size_t i = 0; i < count; ++i) {
        float s = input(first, i);
        for (int r = 0; r < ranks; ++r)
          if (r != first) s += input(r, i);
        order_matters |= s != want[i];
      }
    ASSERT_EQ(order_matters, ranks >= 3);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<std::vector<float>> data(static_cast<size_t>(ranks), std::vector<float>(count));
      run_ranks(group, threads, [&](int r) {
        std::mt19937 rng(unsigned(trial * 16 + r));
        for (size_t i = 0; i < count; ++i) data[size_t(r)][i] = input(r, i);
        // Ranks arrive in a different order every trial.
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        group.communicator(r).all_reduce_sum(data[size_t(r)].data(), count);
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100));
        group.communicator(r).all_reduce_sum(data[size_t(r)].data(), 0);  // an empty one in between
      });
      for (int r = 0; r < ranks; ++r)
        ASSERT_EQ(0, std::memcmp(data[size_t(r)].data(), want.data(), count * sizeof(float)))
            << ranks << " ranks, rank " << r << ", trial " << trial;
    }
  }
}

TEST(TensorParallelComm, AllGatherConcatenatesInRankOrder) {
  const int ranks = 3;
  CpuCommGroup group(ranks);
  RankThreads threads(ranks);
  std::vector<std::vector<float>> recv(ranks, std::vector<float>(ranks * 5));
  run_ranks(group, threads, [&](int r) {
    std::vector<float> send(5);
    for (int i = 0; i < 5; ++i) send[size_t(i)] = float(100 * r + i);
    group.communicator(r).all_gather(send.data(), 5, recv[size_t(r)].data());
  });
  for (int r = 0; r < ranks; ++r)
    for (int q = 0; q < ranks; ++q)
      for (int i = 0; i < 5; ++i) EXPECT_EQ(recv[size_t(r)][size_t(q * 5 + i)], float(100 * q + i));
}

TEST(TensorParallelComm, ArgmaxReductionEqualsTheWholeRowsArgmax) {
  // Rows with ties inside and across shares, NaN, -inf and all-NaN shares:
  // each share's best, reduced, equals cpu::argmax of the whole row.
  std::mt19937 rng(7);
  for (int ranks : {2, 3, 4}) {
    CpuCommGroup group(ranks);
    RankThreads threads(ranks);
    const int V = 23, rows = 64;
    std::vector<float> logits(size_t(rows) * V);
    for (int t = 0; t < rows; ++t)
      for (int v = 0; v < V; ++v) {
        float x = float(rng() % 4);  // many ties
        if (rng() % 9 == 0) x = NAN;
        if (rng() % 13 == 0) x = -INFINITY;
        if (t % 16 == 5) x = NAN;  // whole rows of NaN: 0, as cpu::argmax
        logits[size_t(t) * V + size_t(v)] = x;
      }
    std::vector<std::vector<ArgmaxCandidate>> cand(static_cast<size_t>(ranks), std::vector<ArgmaxCandidate>(static_cast<size_t>(rows)));
    run_ranks(group, threads, [&](int r) {
      const int v0 = V * r / ranks, v1 = V * (r + 1) / ranks;
      for (int t = 0; t < rows; ++t) {
        const float* row = &logits[size_t(t) * V + size_t(v0)];
        const int32_t j = cpu::argmax(row, v1 - v0);
        if (!std::isnan(row[j])) cand[size_t(r)][size_t(t)] = {row[j], v0 + j};
      }
      group.communicator(r).argmax_reduce(cand[size_t(r)]);
    });
    for (int r = 0; r < ranks; ++r)
      for (int t = 0; t < rows; ++t)
        ASSERT_EQ(std::max(0, cand[size_t(r)][size_t(t)].index), cpu::argmax(&logits[size_t(t) * V], V))
            << ranks << " ranks, rank " << r << ", row " << t;
  }
}

TEST(TensorParallelComm, AFailingRankReleasesTheOthersAndItsErrorIsRethrown) {
  CpuCommGroup group(3);
  RankThreads threads(3);
  std::vector<float> x(4, 1.0f);
  try {
    run_ranks(group, threads, [&](int r) {
      std::vector<float> mine(x);
      if (r == 2) throw Error("rank 2 broke");
      group.communicator(r).all_reduce_sum(mine.data(), mine.size());  // would wait for rank 2 forever
    });
    FAIL() << "no error";
  } catch (const CommAborted&) {
    FAIL() << "the other ranks' report instead of the failure";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 2 broke");
  }
  group.reset();  // usable again
  std::vector<std::vector<float>> data(3, x);
  run_ranks(group, threads, [&](int r) { group.communicator(r).all_reduce_sum(data[size_t(r)].data(), 4); });
  EXPECT_EQ(data[1][3], 3.0f);
}

// ---- the partition ----

TEST(TensorParallelPlan, RefusesDegreesThatDoNotSplitTheHeadsByName) {
  const Qwen35Config c = load_qwen35_config(std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied");  // 4 q, 2 kv heads
  for (int bad : {0, -1, 3, 8}) {
    try {
      check_tensor_parallel(c, bad);
      ADD_FAILURE() << "degree " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--tensor-parallel " + std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  // 4 ranks over 2 KV heads: each KV head replicated on the two ranks whose query heads use it.
  for (int r = 0; r < 4; ++r) {
    const TensorParallelShard s = tensor_parallel_shard(c, 4, r);
    EXPECT_EQ(s.q_heads.begin, r);
    EXPECT_EQ(s.kv_heads.begin, r / 2);
    EXPECT_EQ(s.config.num_key_value_heads, 1);
    EXPECT_EQ(s.vocab.size(), c.vocab_size / 4);
  }
}

// ---- Qwen3.5 split over ranks ----

struct TpCase {
  std::string fixture;
  int degree;
};
void PrintTo(const TpCase& c, std::ostream* os) { *os << c.fixture << "/tp" << c.degree; }

// Every fixture at each degree its heads allow (2 for all of them; 4 where
// the query and GDN heads divide by 4, with the KV heads replicated).
std::vector<TpCase> tp_cases() {
  std::vector<TpCase> out;
  for (const std::string& dir : test::fixture_dirs())
    for (int degree : {2, 4}) {
      try {
        check_tensor_parallel(load_qwen35_config(dir), degree);
      } catch (const Error&) {
        continue;
      }
      out.push_back({test::fixture_name(dir), degree});
    }
  return out;
}

std::string tp_case_name(const ::testing::TestParamInfo<TpCase>& info) {
  std::string s = info.param.fixture + "_tp" + std::to_string(info.param.degree);
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

double rel_row_error(const float* got, const float* ref, int64_t n) {
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, double(std::fabs(got[i] - ref[i])));
    max_ref = std::max(max_ref, double(std::fabs(ref[i])));
  }
  return max_diff / max_ref;
}

class TensorParallelFixture : public ::testing::TestWithParam<TpCase> {
 protected:
  std::string dir() const { return std::string(NEXTN_FIXTURES) + "/" + GetParam().fixture; }
  // threads: per rank (1 keeps CI's two cores from oversubscription), every
  // matrix product split where threads allow (min_chunk_work 1).
  std::unique_ptr<ModelRuntime> runtime(const Qwen35Checkpoint& ck, int cap, int threads_per_rank = 1) const {
    CpuRuntimeOptions o;
    o.tensor_parallel = GetParam().degree;
    o.threads = threads_per_rank * GetParam().degree;
    o.min_chunk_work = 1;
    return make_cpu_runtime(ck, cap, o);
  }
};

TEST_P(TensorParallelFixture, GreedyTokensAndLogitsMatchTransformers) {
  const auto ref = test::load_reference(dir());
  const auto ck = Qwen35Checkpoint::open(dir());
  const int V = ck.config().vocab_size;
  auto rt = runtime(ck, int(ref.sequence.size()) + 4);
  std::vector<float> logits(static_cast<size_t>(V));
  rt->target_forward(ref.prompt);
  for (size_t p = 0; p < ref.prompt.size(); ++p) {  // teacher-forced over the prompt
    rt->head_logits(int(p), logits.data());
    EXPECT_LE(rel_row_error(logits.data(), &ref.logits[p * size_t(V)], V), 1e-4) << "position " << p;
  }
  int32_t tok = 0;
  rt->head_argmax(int(ref.prompt.size()) - 1, 1, &tok);
  std::vector<int32_t> got{tok};
  while (got.size() < ref.greedy.size()) {
    rt->target_forward(std::span<const int32_t>(&got.back(), 1));
    rt->head_logits(0, logits.data());
    const size_t p = ref.prompt.size() + got.size() - 1;
    EXPECT_LE(rel_row_error(logits.data(), &ref.logits[p * size_t(V)], V), 1e-4) << "decode position " << p;
    rt->head_argmax(0, 1, &tok);
    EXPECT_EQ(tok, cpu::argmax(logits.data(), V)) << "the reduced argmax against the gathered logits";
    got.push_back(tok);
  }
  EXPECT_EQ(got, ref.greedy);
}

TEST_P(TensorParallelFixture, TeacherForcedDraftsMatchTransformers) {
  const auto ref = test::load_reference(dir());
  const auto ck = Qwen35Checkpoint::open(dir());
  if (ck.mtp_layers() == 0) GTEST_SKIP() << "no MTP head";
  auto rt = runtime(ck, int(ref.sequence.size()) + 4);
  rt->target_forward(ref.sequence);
  const std::vector<int32_t> next(ref.sequence.begin() + 1, ref.sequence.end());
  mtp_of(*rt).mtp_forward(next, 0);
  std::vector<int32_t> drafts(next.size());
  mtp_of(*rt).mtp_argmax(int(drafts.size()), drafts.data());
  EXPECT_EQ(drafts, ref.drafts);
}

TEST_P(TensorParallelFixture, SpeculativeEqualsTensorParallelGreedyAtEveryK) {
  const auto ref = test::load_reference(dir());
  const auto ck = Qwen35Checkpoint::open(dir());
  const int n = 24;
  auto greedy_rt = runtime(ck, runtime_capacity(int(ref.prompt.size()), n, 1));
  const std::vector<int32_t> greedy = greedy_generate(*greedy_rt, ref.prompt, n, true).tokens;
  const size_t known = std::min(greedy.size(), ref.greedy.size());
  EXPECT_EQ(std::vector<int32_t>(greedy.begin(), greedy.begin() + long(known)),
            std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + long(known)));
  int64_t drafted = 0;
  for (int K : {2, 3, 4, 5, 6, 7, 8, 16, 32}) {
    GenerateOptions o;
    o.max_new_tokens = n;
    o.block_size = K;
    o.ignore_eos = true;
    o.draft = ck.mtp_layers() > 0 ? DraftKind::Mtp : DraftKind::Oracle;
    if (o.draft == DraftKind::Oracle) o.oracle.pattern = "1101001110";
    auto rt = runtime(ck, runtime_capacity(int(ref.prompt.size()), n, K));
    const GenerateResult r = generate(*rt, ref.prompt, o, &greedy);
    ASSERT_EQ(r.tokens, greedy) << "K=" << K;
    const auto v = counter_violations(r.stats.counters);
    EXPECT_TRUE(v.empty()) << v.front();
    drafted += r.stats.counters.drafted;
  }
  EXPECT_GT(drafted, 0);
}

TEST_P(TensorParallelFixture, BitsDoNotDependOnThreadsOrTiming) {
  // The same forward and MTP call with 1 and 3 threads per rank, repeated:
  // every logit the same bits (each sum has one order, whoever arrives first).
  const auto ref = test::load_reference(dir());
  const auto ck = Qwen35Checkpoint::open(dir());
  const int V = ck.config().vocab_size;
  auto run = [&](int threads_per_rank) {
    auto rt = runtime(ck, int(ref.sequence.size()) + 4, threads_per_rank);
    rt->target_forward(ref.sequence);
    std::vector<float> all(ref.sequence.size() * size_t(V));
    for (size_t p = 0; p < ref.sequence.size(); ++p) rt->head_logits(int(p), &all[p * size_t(V)]);
    if (ck.mtp_layers() > 0) {
      const std::vector<int32_t> next(ref.sequence.begin() + 1, ref.sequence.end());
      mtp_of(*rt).mtp_forward(next, 0);
      all.resize(all.size() + size_t(V));
      mtp_of(*rt).mtp_logits(&all[all.size() - size_t(V)]);
    }
    return all;
  };
  const std::vector<float> first = run(1);
  for (int threads_per_rank : {3, 1, 2}) {
    const std::vector<float> again = run(threads_per_rank);
    ASSERT_EQ(0, std::memcmp(first.data(), again.data(), first.size() * sizeof(float)))
        << threads_per_rank << " threads per rank";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelFixture, ::testing::ValuesIn(tp_cases()), tp_case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TensorParallelFixture);

TEST(TensorParallelFixtures, CoverDenseMoeAndReplicatedKvHeads) {
  bool moe = false, dense4 = false;
  for (const TpCase& c : tp_cases()) {
    const Qwen35Config cfg = load_qwen35_config(std::string(NEXTN_FIXTURES) + "/" + c.fixture);
    moe |= cfg.moe;
    dense4 |= !cfg.moe && c.degree == 4 && cfg.num_key_value_heads < 4;
  }
  EXPECT_TRUE(moe) << "no MoE fixture splits over 2 ranks";
  EXPECT_TRUE(dense4) << "no fixture runs 4 ranks with replicated KV heads";
}

// ---- the CLI ----

TEST(TensorParallelCli, GenerateSplitGivesTheReferenceTokens) {
  const std::string dir = std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied";
  const auto ref = test::load_reference(dir);
  std::string ids;
  for (int32_t t : ref.prompt) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const int n = int(ref.greedy.size());
  for (const char* draft : {"none", "mtp"}) {
    const auto r = test::run_cli("generate -m " + dir + " --prompt-ids " + ids + " -n " + std::to_string(n) +
                                 " --ignore-eos --json --threads 2 --tensor-parallel 2 --draft " + draft);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), ref.greedy) << draft;
  }
}

TEST(TensorParallelCli, BadDegreesAndCudaAreRefusedByName) {
  const std::string dir = std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied";
  const std::string base = "generate -m " + dir + " --prompt-ids 1,2,3 -n 2 ";
  for (const std::string& flags :
       {std::string("--tensor-parallel 0"), std::string("--tensor-parallel -2"), std::string("--tensor-parallel 3"),
        std::string("--tensor-parallel 8"), std::string("--tensor-parallel 2 --backend cuda")}) {
    const auto r = test::run_cli(base + flags);
    EXPECT_EQ(r.code, 1) << flags;
    ASSERT_EQ(r.err_lines().size(), 1u) << flags << ": " << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("--tensor-parallel"), std::string::npos) << r.err;
  }
  const auto cuda = test::run_cli(base + "--tensor-parallel 2 --backend cuda");
  EXPECT_NE(cuda.err.find("--backend cuda"), std::string::npos) << cuda.err;
}

}  // namespace
}  // namespace nextn
