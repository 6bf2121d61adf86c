// Exactness on the transformers-made fixtures and the shipped trained model: speculative output equals
// plain greedy output token for token, for every K in {2..8, 16, 32} x every
// arm x budgets {K-1, K, K+1, 24} x drafters {mtp, oracle p=0.5, oracle
// pattern}, with every run's counters matching its arm's identity. Also: the
// loop's first MTP draft of each round equals the teacher-forced draft in
// the transformers reference (the MTP bookkeeping pairs the right hiddens).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "model/runtime.h"
#include "speculative/generate.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> fixtures() {
  std::vector<std::string> out;
  const fs::path root(NEXTN_FIXTURES);
  if (fs::exists(root))
    for (const auto& e : fs::directory_iterator(root))
      if (fs::exists(e.path() / "config.json")) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json reference(const std::string& dir) {
  std::ifstream f(dir + "/reference.json");
  if (!f) return nlohmann::json::object();
  return nlohmann::json::parse(f);
}

std::vector<int32_t> prompt_of(const nlohmann::json& ref) {
  if (ref.contains("prompt_ids")) return ref["prompt_ids"].get<std::vector<int32_t>>();
  return {1, 2, 3, 4, 5, 6, 7, 8};
}

enum class Drafter { Mtp, OracleRate, OraclePattern };
const char* drafter_name(Drafter d) {
  return d == Drafter::Mtp ? "mtp" : d == Drafter::OracleRate ? "oracle_rate" : "oracle_pattern";
}

constexpr int kBlockSizes[] = {2, 3, 4, 5, 6, 7, 8, 16, 32};

// One test per fixture x drafter x K, so ctest spreads them and none comes
// near the per-test timeout under the sanitizers.
struct Case {
  std::string fixture;  // directory name, also the test name
  Drafter drafter;
  int block_size;
  std::string root = NEXTN_FIXTURES;  // where the directory is
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.fixture << "/" << drafter_name(c.drafter) << "/K=" << c.block_size;
}

class SpecExactness : public ::testing::TestWithParam<Case> {};

TEST_P(SpecExactness, SpeculativeEqualsGreedy) {
  const Case c = GetParam();
  const std::string dir = c.root + "/" + c.fixture;
  const auto ckpt = Qwen35Checkpoint::open(dir);
  if (c.drafter == Drafter::Mtp && ckpt.mtp_layers() == 0) GTEST_SKIP() << c.fixture << " has no MTP head";
  const auto prompt = prompt_of(reference(dir));
  const RuntimeFactory factory = [&ckpt](int cap) { return make_runtime(ckpt, BackendKind::Cpu, cap); };

  std::map<int, std::vector<int32_t>> greedy;  // budget -> plain greedy tokens
  auto greedy_for = [&](int n) -> const std::vector<int32_t>& {
    auto it = greedy.find(n);
    if (it == greedy.end()) {
      auto rt = factory(runtime_capacity(int(prompt.size()), n, 1));
      it = greedy.emplace(n, greedy_generate(*rt, prompt, n, false).tokens).first;
    }
    return it->second;
  };

  int64_t accepted = 0, drafted = 0;
  const int K = c.block_size;
  {
    for (int n : {K - 1, K, K + 1, 24}) {
      const auto& want = greedy_for(n);
      for (VerifyArm arm : {VerifyArm::Batched, VerifyArm::Walk, VerifyArm::Pad, VerifyArm::Fused}) {
        GenerateOptions o;
        o.max_new_tokens = n;
        o.block_size = K;
        o.verify = arm;
        if (c.drafter == Drafter::Mtp) {
          o.draft = DraftKind::Mtp;
        } else {
          o.draft = DraftKind::Oracle;
          if (c.drafter == Drafter::OracleRate) {
            o.oracle.accept_rate = 0.5;
            o.oracle.seed = uint64_t(1000 * K + n);
          } else {
            o.oracle.pattern = "1101001110";
          }
        }
        auto rt = factory(runtime_capacity(int(prompt.size()), n, K));
        const GenerateResult r = generate(*rt, prompt, o, &want);
        SCOPED_TRACE(::testing::Message() << c.fixture << " " << drafter_name(c.drafter) << " K=" << K << " n=" << n
                                          << " arm=" << verify_arm_name(arm));
        ASSERT_EQ(r.tokens, want);
        const auto v = counter_violations(r.stats.counters);
        EXPECT_TRUE(v.empty()) << v.front();
        EXPECT_EQ(r.stats.counters.verify_taken, r.stats.counters.rounds > 0 ? verify_arm_name(arm) : "none");
        EXPECT_EQ(r.stats.counters.verify_chosen, verify_arm_name(arm));
        accepted += r.stats.counters.accepted;
        drafted += r.stats.counters.drafted;
      }
    }
  }
  // The oracle must exercise drafts both ways, or the test proves little. (An
  // MTP head may accept nothing: the quantized fixtures' heads disagree with
  // their quantized targets; exactness holds all the same.)
  // The shipped model's MTP head is trained: it must accept some drafts and miss others too.
  if (c.drafter != Drafter::Mtp || c.root != NEXTN_FIXTURES) {
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, drafted);
  }
  RecordProperty("acceptance", std::to_string(double(accepted) / double(std::max<int64_t>(1, drafted))));
}

std::vector<Case> all_cases() {
  std::vector<Case> cs;
  for (const auto& f : fixtures())
    for (Drafter d : {Drafter::Mtp, Drafter::OracleRate, Drafter::OraclePattern})
      for (int K : kBlockSizes) cs.push_back({f, d, K});
  return cs;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.fixture + "_" + drafter_name(info.param.drafter) + "_K" +
                  std::to_string(info.param.block_size);
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpecExactness, ::testing::ValuesIn(all_cases()), case_name);

// The shipped trained model (models/nextn-code-15m): real, partial MTP acceptance. The widest
// blocks are left to the fixtures: on this larger model they cost CI most and add least.
std::vector<Case> shipped_cases() {
  std::vector<Case> cs;
  for (int K : {2, 3, 4, 5, 8}) cs.push_back({"nextn-code-15m", Drafter::Mtp, K, std::string(NEXTN_SOURCE_DIR) + "/models"});
  return cs;
}
INSTANTIATE_TEST_SUITE_P(ShippedModel, SpecExactness, ::testing::ValuesIn(shipped_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SpecExactness);

// Records the first draft of every round with the target length it was made at.
class RecordingDrafter final : public nextn::Drafter {
 public:
  RecordingDrafter(ModelRuntime& rt) : rt_(rt), inner_(rt) {}
  const char* name() const override { return "mtp"; }
  void begin(std::span<const int32_t> p, int32_t first) override { inner_.begin(p, first); }
  void propose(int n, std::vector<int32_t>& out) override {
    inner_.propose(n, out);
    if (n > 0) firsts.emplace_back(rt_.target_length(), out[0]);
  }
  void commit(std::span<const int32_t> d, int a, int32_t next) override { inner_.commit(d, a, next); }
  std::vector<std::pair<int, int32_t>> firsts;

 private:
  ModelRuntime& rt_;
  MtpDrafter inner_;
};

TEST(SpecMtpBookkeeping, FirstDraftOfEachRoundMatchesTheTeacherForcedReference) {
  int checked = 0;
  for (const auto& f : fixtures()) {
    const std::string dir = std::string(NEXTN_FIXTURES) + "/" + f;
    const auto ref = reference(dir);
    if (!ref.contains("drafts") || ref["drafts"].empty()) continue;
    const auto ckpt = Qwen35Checkpoint::open(dir);
    if (ckpt.mtp_layers() == 0) continue;
    const auto prompt = prompt_of(ref);
    const auto drafts = ref["drafts"].get<std::vector<int32_t>>();  // drafts[p]: from (sequence[p+1], hidden p)
    const auto sequence = ref["sequence"].get<std::vector<int32_t>>();
    const int n = int(sequence.size() - prompt.size());
    for (int K : {2, 3, 4, 8}) {
      auto rt = make_runtime(ckpt, BackendKind::Cpu, runtime_capacity(int(prompt.size()), n, K));
      RecordingDrafter d(*rt);
      GenerateOptions o;
      o.max_new_tokens = n;
      o.block_size = K;
      o.draft = DraftKind::Mtp;
      o.ignore_eos = true;
      const auto r = speculative_generate(*rt, d, prompt, o);
      ASSERT_EQ(r.tokens, std::vector<int32_t>(sequence.begin() + long(prompt.size()), sequence.end())) << f << " K=" << K;
      for (const auto& [L, first] : d.firsts) {
        // The round's bonus sits at position L; entry L-1 pairs it with hidden L-1.
        ASSERT_LT(size_t(L - 1), drafts.size());
        EXPECT_EQ(first, drafts[size_t(L - 1)]) << f << " K=" << K << " at target length " << L;
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no fixture with an MTP reference";
}

}  // namespace
}  // namespace nextn
