// The Gemma 4 assistant drafter against transformers (drafts after every
// prefix of each fixture's continuation) and the exactness of speculative
// decoding with it: output identical to plain greedy for K = 2..16.
#include <gtest/gtest.h>

#include <memory>

#include "backend/cpu/gemma4.h"
#include "backend/cpu/gemma4_assistant.h"
#include "bench/verify_arms.h"
#include "core/error.h"
#include "engine/generate.h"
#include "gemma4_fixture_util.h"
#include "io/gemma4_checkpoint.h"
#include "model/gemma4_target.h"
#include "speculative/gemma4_drafter.h"

namespace nextn {
namespace {

using test::Gemma4Reference;
using test::load_gemma4_reference;

class Gemma4AssistantFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4AssistantFixture, DraftsMatchTransformersAfterEveryPrefix) {
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto target_ck = Gemma4Checkpoint::open(ref.target());
  const auto assistant_ck = Gemma4Checkpoint::open_assistant(ref.assistant());
  CpuGemma4Assistant assistant(assistant_ck, target_ck.config(), 2);
  ASSERT_FALSE(ref.drafts.empty());
  auto rt = make_cpu_gemma4_runtime(target_ck, int(ref.sequence.size()) + 4, CpuRuntimeOptions{.threads = 2});
  auto* target = dynamic_cast<Gemma4Target*>(rt.get());
  ASSERT_NE(target, nullptr);
  int matched = 0;
  for (const auto& d : ref.drafts) {
    rt->reset();
    rt->target_forward(std::span<const int32_t>(ref.sequence.data(), size_t(d.prefix_len)));
    Gemma4AssistantDrafter drafter(*rt, assistant);
    drafter.begin(std::span<const int32_t>(ref.sequence.data(), size_t(d.prefix_len)), d.bonus);
    std::vector<int32_t> got;
    drafter.propose(int(d.drafts.size()), got);
    EXPECT_EQ(got, d.drafts) << "prefix " << d.prefix_len;
    matched += got == d.drafts;
  }
  EXPECT_EQ(matched, int(ref.drafts.size()));
}

TEST_P(Gemma4AssistantFixture, DraftsAfterAPartlyAcceptedBlockMatchTransformers) {
  // The state after a verify block whose first j drafts were right: the
  // target ran [x_P .. x_P+5] (the true continuation) and kept j + 1 rows.
  // The next round pairs the bonus x_P+j+1 with the last kept row, which
  // must give transformers' drafts after the prefix x_0 .. x_P+j.
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto target_ck = Gemma4Checkpoint::open(ref.target());
  const auto assistant_ck = Gemma4Checkpoint::open_assistant(ref.assistant());
  CpuGemma4Assistant assistant(assistant_ck, target_ck.config(), 2);
  const int P = int(ref.prompt.size()), block = 6;
  for (int keep = 1; keep <= block; ++keep) {
    auto rt = make_cpu_gemma4_runtime(target_ck, int(ref.sequence.size()) + 4, CpuRuntimeOptions{.threads = 2});
    rt->target_forward(std::span<const int32_t>(ref.sequence.data(), size_t(P)));
    rt->target_forward(std::span<const int32_t>(ref.sequence.data() + P, size_t(block)));
    rt->target_rollback(keep);
    const int length = P + keep;
    const auto it = std::find_if(ref.drafts.begin(), ref.drafts.end(),
                                 [&](const test::Gemma4Prefix& p) { return p.prefix_len == length; });
    ASSERT_NE(it, ref.drafts.end()) << length;
    Gemma4AssistantDrafter drafter(*rt, assistant);
    drafter.begin({}, it->bonus);
    std::vector<int32_t> got;
    drafter.propose(int(it->drafts.size()), got);
    EXPECT_EQ(got, it->drafts) << "kept " << keep << " of " << block;
  }
}

TEST_P(Gemma4AssistantFixture, SpeculativeWithTheAssistantEqualsGreedyForEveryBlockSize) {
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  const RuntimeFactory factory = [&ck](int cap) {
    return make_cpu_gemma4_runtime(ck, cap, CpuRuntimeOptions{.threads = 2, .min_chunk_work = 1});
  };
  const int n = int(ref.long_greedy.size());  // long enough to wrap the sliding rings
  for (int K = 2; K <= 16; ++K) {
    GenerateOptions o;
    o.max_new_tokens = n;
    o.block_size = K;
    o.ignore_eos = true;
    // Odd K through the walk arm (bench-only, at the engine step's head), even K the product's batched head.
    ArmChoice choice;
    choice.arm = K % 2 ? VerifyArm::Walk : VerifyArm::Batched;
    ArmHeadStage head(choice);
    GenerateResult r = generate_with_assistant(factory, ref.assistant(), ref.prompt, o, 2, &head);
    head.label(r.stats);
    ASSERT_EQ(r.tokens, ref.long_greedy) << "K=" << K;
    EXPECT_EQ(r.stats.draft, "assistant");
    EXPECT_GT(r.stats.counters.drafted, 0);
    EXPECT_EQ(r.stats.counters.verify_chosen, verify_arm_name(choice.arm)) << "K=" << K;
    EXPECT_EQ(counter_violations(r.stats.counters), std::vector<std::string>{}) << "K=" << K;
  }
}

// What the drafter proposed at each target length.
using Proposals = std::vector<std::pair<int, std::vector<int32_t>>>;

// Records the inner drafter's proposals into `seen` (which outlives it: the
// engine owns the drafter it is given).
class Recording final : public Drafter {
 public:
  Recording(std::unique_ptr<Drafter> inner, const ModelRuntime& rt, Proposals& seen)
      : inner_(std::move(inner)), rt_(rt), seen_(seen) {}
  const char* name() const override { return inner_->name(); }
  void begin(std::span<const int32_t> p, int32_t first) override { inner_->begin(p, first); }
  void propose(int n, std::vector<int32_t>& out) override {
    inner_->propose(n, out);
    seen_.push_back({rt_.target_length(), out});
  }
  void commit(std::span<const int32_t> d, int a, int32_t next) override { inner_->commit(d, a, next); }

 private:
  std::unique_ptr<Drafter> inner_;
  const ModelRuntime& rt_;
  Proposals& seen_;
};

TEST_P(Gemma4AssistantFixture, EveryRoundDraftsWhatTransformersDraftsAfterThatPrefix) {
  // Inside the loop the target has verified, rolled back and committed; its
  // kept rows are bit-identical to a fresh prefill of the same text, so each
  // round's drafts must equal transformers' drafts after that prefix.
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto ck = Gemma4Checkpoint::open(ref.target());
  const auto assistant_ck = Gemma4Checkpoint::open_assistant(ref.assistant());
  CpuGemma4Assistant assistant(assistant_ck, ck.config(), 2);
  int checked = 0;
  for (int K : {2, 3, 5, 7}) {
    GenerateOptions o;
    o.max_new_tokens = int(ref.greedy.size());
    o.block_size = K;
    o.ignore_eos = true;
    auto rt = make_cpu_gemma4_runtime(ck, runtime_capacity(int(ref.prompt.size()), o.max_new_tokens, K));
    Proposals seen;
    const GenerateResult r = generate_with_drafter(
        *rt, std::make_unique<Recording>(std::make_unique<Gemma4AssistantDrafter>(*rt, assistant), *rt, seen),
        ref.prompt, o);
    ASSERT_EQ(r.tokens, ref.greedy);
    EXPECT_EQ(r.stats.draft, "assistant");
    for (const auto& [length, drafts] : seen) {
      const auto it = std::find_if(ref.drafts.begin(), ref.drafts.end(),
                                   [&](const test::Gemma4Prefix& p) { return p.prefix_len == length; });
      if (it == ref.drafts.end()) continue;
      const size_t m = std::min(drafts.size(), it->drafts.size());
      EXPECT_EQ(std::vector<int32_t>(drafts.begin(), drafts.begin() + long(m)),
                std::vector<int32_t>(it->drafts.begin(), it->drafts.begin() + long(m)))
          << "K=" << K << " target length " << length;
      ++checked;
    }
  }
  EXPECT_GE(checked, 20);
}

TEST_P(Gemma4AssistantFixture, MismatchedPairIsOneErrorLine) {
  const Gemma4Reference ref = load_gemma4_reference(GetParam());
  const auto assistant_ck = Gemma4Checkpoint::open_assistant(ref.assistant());
  Gemma4TextConfig other = Gemma4Checkpoint::open(ref.target()).config();
  other.hidden_size += 16;
  try {
    CpuGemma4Assistant a(assistant_ck, other, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backbone_hidden_size"), std::string::npos) << e.what();
  }
  other = Gemma4Checkpoint::open(ref.target()).config();
  other.vocab_size += 1;
  EXPECT_THROW(CpuGemma4Assistant(assistant_ck, other, 1), Error);
}

INSTANTIATE_TEST_SUITE_P(Transformers, Gemma4AssistantFixture, ::testing::ValuesIn(test::gemma4_fixture_dirs()),
                         [](const auto& info) { return test::gemma4_case_name(info.param); });

}  // namespace
}  // namespace nextn
