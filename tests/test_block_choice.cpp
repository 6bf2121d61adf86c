// K per step (engine/block_choice.h): the cost model's choices on planted
// cost tables (a nearly flat step grows K, a step whose every row costs a
// row shrinks it to 1, so many streams draft less than one), its
// interpolation and draft line, the exploration rounds; and through the
// engine: greedy sequences at a chosen K are exact alone and together, and
// the probe seeds the table from real forwards.
#include <gtest/gtest.h>

#include <algorithm>

#include <map>
#include <random>
#include <set>
#include <tuple>

#include "block_choice_util.h"
#include "engine/block_choice.h"
#include "engine/generate.h"
#include "engine/step_loop.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"
#include "core/error.h"
#include "speculative/drafter.h"

namespace nextn {
namespace {

const std::string kModel = std::string(NEXTN_SOURCE_DIR) + "/models/default";

// A sequence that has offered every position `rounds` times and accepted each with `rate`.
struct History {
  std::vector<int64_t> offered, accepted;
  History(int positions, int64_t rounds, double rate) {
    for (int i = 0; i < positions; ++i) {
      offered.push_back(rounds);
      accepted.push_back(int64_t(double(rounds) * rate));
    }
  }
  BlockCandidate candidate(int max_k) const { return {max_k, offered, accepted, 0}; }
};

TEST(BlockChoice, AFlatStepGrowsKAndALinearOneKeepsItAtOne) {
  const History good(7, 100, 0.9);
  {
    CostModelChooser flat;  // one stream on a bandwidth-bound GPU: 8 rows cost barely more than 1
    for (int rows : {1, 2, 4, 8}) flat.record_verify(1, rows, 10.0 + 0.1 * rows);
    std::vector<BlockCandidate> c = {good.candidate(8)};
    std::vector<int> k(1);
    flat.choose(c, 0, k);
    EXPECT_EQ(k[0], 8);
    EXPECT_GT(flat.report().expected_tokens, 4.0);
  }
  {
    CostModelChooser linear;  // every row costs a row: no draft pays for itself below acceptance 1
    for (int rows : {1, 2, 4, 8}) linear.record_verify(1, rows, 10.0 * rows);
    std::vector<BlockCandidate> c = {good.candidate(8)};
    std::vector<int> k(1);
    linear.choose(c, 0, k);
    EXPECT_EQ(k[0], 1);
  }
}

TEST(BlockChoice, ManyStreamsDraftLessThanOne) {
  // Flat up to 32 rows, then linear: one stream drafts wide, 32 streams do not draft.
  CostModelChooser chooser;
  auto ms = [](int rows) { return rows <= 32 ? 10.0 : 10.0 * rows / 32.0; };
  for (int n : {1, 2, 4, 8, 16, 32})
    for (int k : {1, 2, 4, 8}) chooser.record_verify(n, n * k, ms(n * k));
  const History h(7, 100, 0.8);
  for (const auto& [streams, expect_at_least, expect_at_most] :
       std::vector<std::tuple<int, int, int>>{{1, 8, 8}, {4, 8, 8}, {16, 2, 2}, {32, 1, 1}}) {
    std::vector<BlockCandidate> c(static_cast<size_t>(streams), h.candidate(8));
    std::vector<int> k(static_cast<size_t>(streams));
    chooser.choose(c, 0, k);
    for (int K : k) {
      EXPECT_GE(K, expect_at_least) << streams << " streams";
      EXPECT_LE(K, expect_at_most) << streams << " streams";
    }
  }
}

TEST(BlockChoice, InterpolatesRowsAndFitsTheDraftLine) {
  CostModelChooser m;
  m.record_verify(1, 1, 10);
  m.record_verify(1, 4, 13);
  EXPECT_DOUBLE_EQ(m.predicted_ms(1, 2, 0, 0), 11);
  EXPECT_DOUBLE_EQ(m.predicted_ms(1, 8, 0, 0), 26);  // past the widest: rows scale
  EXPECT_DOUBLE_EQ(m.predicted_ms(1, 4, 0, 0), 13);
  m.record_verify(1, 4, 17);  // a measured step moves its cell a quarter of the way
  EXPECT_DOUBLE_EQ(m.predicted_ms(1, 4, 0, 0), 14);
  // Two sequences, draft stages costing 1 ms per chained step + 0.5 ms per token.
  for (int rep = 0; rep < 20; ++rep)
    for (const auto& [chain, drafts] : std::vector<std::pair<int, int>>{{1, 2}, {3, 6}, {3, 4}, {2, 2}})
      m.observe_step(2, 8, 12, chain, drafts, 1.0 * chain + 0.5 * drafts);
  EXPECT_NEAR(m.predicted_ms(1, 1, 3, 5) - m.predicted_ms(1, 1, 0, 0), 5.5, 0.1);
  // The table is what was measured.
  const auto table = m.verify_table();
  EXPECT_EQ(table.size(), 3u);
  EXPECT_DOUBLE_EQ(table.at({2, 8}), 12);
}

TEST(BlockChoice, NewAndStoppedSequencesDraftOnce) {
  CostModelChooser linear;
  for (int rows : {1, 2, 4, 8}) linear.record_verify(1, rows, 10.0 * rows);
  std::vector<int> k(1);
  const History none(7, 0, 0);
  std::vector<BlockCandidate> c = {none.candidate(8)};
  linear.choose(c, 0, k);
  EXPECT_EQ(k[0], 2);  // no acceptance of its own yet
  const History poor(7, 50, 0.1);
  c = {poor.candidate(8)};
  linear.choose(c, 0, k);
  EXPECT_EQ(k[0], 1);
  c[0].rounds_without_drafts = 16;
  linear.choose(c, 0, k);
  EXPECT_EQ(k[0], 2);
  c[0].max_k = 1;  // one token left: nothing to draft
  linear.choose(c, 0, k);
  EXPECT_EQ(k[0], 1);
  // Among 32 sequences a stopped one re-drafts 16 times less often: after
  // 16 x 16 rounds, not 16.
  std::vector<BlockCandidate> many(32, poor.candidate(8));
  std::vector<int> ks(32);
  for (auto& m : many) m.rounds_without_drafts = 16;
  linear.choose(many, 0, ks);
  EXPECT_EQ(std::count(ks.begin(), ks.end(), 1), 32);
  many[5].rounds_without_drafts = 16 * 16;
  linear.choose(many, 0, ks);
  EXPECT_EQ(ks[5], 2);
  EXPECT_EQ(std::count(ks.begin(), ks.end(), 1), 31);
}

TEST(BlockChoice, PooledAcceptanceFollowsTheRounds) {
  CostModelChooser m;
  EXPECT_DOUBLE_EQ(m.pooled_acceptance(0), 0.5);
  for (int i = 0; i < 200; ++i) m.observe_round(2, i % 4 == 0 ? 0 : 1);  // draft 1 accepted 3 in 4, draft 2 never
  EXPECT_NEAR(m.pooled_acceptance(0), 0.75, 0.02);
  EXPECT_LT(m.pooled_acceptance(1), 0.05);
  // A sequence's own counts outweigh the pool after a few rounds.
  const std::vector<int64_t> off = {40}, acc = {40};
  EXPECT_GT(m.acceptance(off, acc, 0), 0.95);
}

// Greedy sequences of a CPU group at K chosen per step answer what plain
// greedy answers alone; the probe filled the table from real forwards.
TEST(BlockChoice, AutoSequencesTogetherEqualPlainGreedy) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {7, 7, 7, 7}, {100, 200}, {3}, {42, 43, 44, 45, 46}};
  constexpr int kTokens = 40;
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    auto rt = make_runtime(ckpt, BackendKind::Cpu, 128);
    alone.push_back(greedy_generate(*rt, p, kTokens, /*ignore_eos=*/true).tokens);
  }
  for (DraftKind draft : {DraftKind::Mtp, DraftKind::Oracle}) {
    auto group = make_sequence_group(ckpt, BackendKind::Cpu);
    const test::Slots slots(*group, prompts.size(), 128);
    const std::vector<ModelRuntime*>& raw = slots.raw;
    StepLoop loop(*group);
    probe_step_costs(*group, raw, kAutoMaxBlockSize, loop.cost_model());
    const auto table = loop.cost_model().verify_table();
    EXPECT_EQ(table.size(), 3u * 4u);  // n = 1, 2, 4 at K = 1, 2, 4, 8
    EXPECT_TRUE(table.count({4, 32})) << "4 sequences x 8 rows";
    std::map<int, size_t> by_id;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerateOptions o;
      o.max_new_tokens = kTokens;
      o.ignore_eos = true;
      o.draft = draft;
      o.block_policy = BlockPolicy::Auto;
      o.oracle.position_rates = {0.9, 0.8, 0.7};
      by_id[loop.add(*raw[i], prompts[i], o, nullptr, draft == DraftKind::Oracle ? alone[i] : std::vector<int32_t>{})] = i;
    }
    std::set<int> sizes;
    while (loop.running() > 0) loop.step();
    for (auto& f : loop.take_finished()) {
      ASSERT_FALSE(f.error);
      const size_t i = by_id.at(f.id);
      EXPECT_EQ(f.result.tokens, alone[i]) << draft_kind_name(draft) << " prompt " << i;
      EXPECT_EQ(f.result.stats.block_policy, "auto");
      int64_t rounds = 0;
      for (size_t K = 0; K < f.result.stats.rounds_at_block.size(); ++K) {
        rounds += f.result.stats.rounds_at_block[K];
        if (f.result.stats.rounds_at_block[K] > 0) sizes.insert(int(K) + 1);
      }
      EXPECT_EQ(rounds, f.result.stats.counters.rounds);
    }
    EXPECT_GE(sizes.size(), 2u) << "the chooser moved K";
  }
}

// Rounds at K = 1 skip the MTP pairing (the head's cache gets gaps); the
// drafts after a gap are still only proposals, so the output stays plain greedy's.
TEST(BlockChoice, MtpSequencesThatSkipTheirPairingStayExact) {
  const auto ckpt = Qwen35Checkpoint::open(kModel);
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {7, 7, 7, 7}, {100, 200}};
  constexpr int kTokens = 40;
  auto group = make_sequence_group(ckpt, BackendKind::Cpu);
  std::vector<std::unique_ptr<ModelRuntime>> slots;
  StepLoop loop(*group);
  test::CyclingChooser chooser;
  loop.set_block_chooser(&chooser);
  std::map<int, std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    auto rt = make_runtime(ckpt, BackendKind::Cpu, 128);
    const auto plain = greedy_generate(*rt, p, kTokens, /*ignore_eos=*/true).tokens;
    slots.push_back(group->add_sequence(128));
    GenerateOptions o;
    o.max_new_tokens = kTokens;
    o.ignore_eos = true;
    o.draft = DraftKind::Mtp;
    o.block_policy = BlockPolicy::Auto;
    alone[loop.add(*slots.back(), p, o)] = plain;
  }
  while (loop.running() > 0) loop.step();
  const StepWork work = group->step_work();
  for (auto& f : loop.take_finished()) {
    ASSERT_FALSE(f.error);
    EXPECT_EQ(f.result.tokens, alone.at(f.id));
    EXPECT_GT(f.result.stats.rounds_at_block[0], 0);  // rounds at K = 1 ran
    EXPECT_GT(f.result.stats.counters.accepted, 0);   // and drafts after the gaps were still accepted
  }
  EXPECT_LT(work.mtp_forward_launches, loop.steps()) << "pairings were skipped";
}

}  // namespace
}  // namespace nextn

namespace nextn {
namespace {

// --accept-rates takes a command-line string: random ones (up to 4 KiB, the
// characters a list of numbers is made of) parse or throw Error, nothing else;
// what parses has 1..64 entries.
TEST(BlockChoice, AcceptRatesParserTakesAnyStringWithoutCrashing) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "0123456789.,-+eE x";
  for (int i = 0; i < 3000; ++i) {
    std::string text(size_t(rng() % (i < 2900 ? 40 : 4096)), ' ');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    try {
      const auto rates = parse_position_rates(text);
      EXPECT_GE(rates.size(), 1u);
      EXPECT_LE(rates.size(), 64u);
    } catch (const Error&) {
    }
  }
  EXPECT_EQ(parse_position_rates("0.9,0.8,0.7"), (std::vector<double>{0.9, 0.8, 0.7}));
  std::string list = "1";
  for (int i = 1; i < 64; ++i) list += ",1";
  EXPECT_EQ(parse_position_rates(list).size(), 64u);
  EXPECT_THROW(parse_position_rates(list + ",1"), Error);  // more than the 64 positions it takes
  EXPECT_THROW(parse_position_rates("0.9,,0.7"), Error);
}

}  // namespace
}  // namespace nextn
