// The sampling library (sampling/sampling.h, sampling/stop_strings.h):
// filters against hand-computed distributions, seeded reproducibility,
// logprobs, and streaming-safe stop strings.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "sampling/sampling.h"
#include "sampling/stop_strings.h"

namespace nextn {
namespace {

std::vector<double> dist(const std::vector<float>& logits, SamplingParams p) {
  std::vector<double> probs;
  std::vector<int32_t> scratch;
  sampling_distribution(logits, p, probs, scratch);
  return probs;
}

TEST(Sampling, SoftmaxWithTemperature) {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(4.0f), -1e30f};
  auto p = dist(logits, {.temperature = 1.0});
  EXPECT_NEAR(p[0], 1.0 / 7, 1e-7);
  EXPECT_NEAR(p[1], 2.0 / 7, 1e-7);
  EXPECT_NEAR(p[2], 4.0 / 7, 1e-7);
  EXPECT_EQ(p[3], 0.0);
  p = dist(logits, {.temperature = 0.5});  // squares the ratios: 1 : 4 : 16
  EXPECT_NEAR(p[2], 16.0 / 21, 1e-7);
}

TEST(Sampling, TopKTopPMinP) {
  const std::vector<float> logits = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};  // 0.1 .. 0.4
  auto p = dist(logits, {.temperature = 1.0, .top_k = 2});
  EXPECT_EQ(p[0], 0.0);
  EXPECT_EQ(p[1], 0.0);
  EXPECT_NEAR(p[2], 3.0 / 7, 1e-7);
  // top_p 0.65: 0.4 + 0.3 = 0.7 reaches it, 0.4 alone does not.
  p = dist(logits, {.temperature = 1.0, .top_p = 0.65});
  EXPECT_EQ(p[1], 0.0);
  EXPECT_NEAR(p[3], 4.0 / 7, 1e-7);
  // min_p 0.6: keep p >= 0.24 (0.3, 0.4).
  p = dist(logits, {.temperature = 1.0, .min_p = 0.6});
  EXPECT_EQ(p[1], 0.0);
  EXPECT_NEAR(p[2], 3.0 / 7, 1e-7);
  // top_p small keeps the single most likely token.
  p = dist(logits, {.temperature = 1.0, .top_p = 0.01});
  EXPECT_EQ(p[3], 1.0);
}

TEST(Sampling, SeededDrawsAreReproducibleAndFollowTheDistribution) {
  const std::vector<double> w = {0.1, 0.0, 0.6, 0.3};
  SamplingRng a(42), b(42), c(43);
  std::vector<int32_t> da, db, dc;
  for (int i = 0; i < 64; ++i) {
    da.push_back(sample_index(w, a));
    db.push_back(sample_index(w, b));
    dc.push_back(sample_index(w, c));
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
  SamplingRng r(7);
  std::map<int32_t, int> counts;
  const int N = 20000;
  for (int i = 0; i < N; ++i) ++counts[sample_index(w, r)];
  EXPECT_EQ(counts.count(1), 0u);
  for (int t : {0, 2, 3}) EXPECT_NEAR(double(counts[t]) / N, w[size_t(t)], 0.02) << t;
}

TEST(Sampling, BadParametersNameTheField) {
  auto msg = [](SamplingParams p) {
    try {
      check_sampling_params(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg({.temperature = -1}).find("temperature"), std::string::npos);
  EXPECT_NE(msg({.temperature = NAN}).find("temperature"), std::string::npos);
  EXPECT_NE(msg({.top_k = -2}).find("top_k"), std::string::npos);
  EXPECT_NE(msg({.top_p = 0}).find("top_p"), std::string::npos);
  EXPECT_NE(msg({.min_p = 1.5}).find("min_p"), std::string::npos);
  EXPECT_EQ(msg({}), "");
}

TEST(Sampling, LogprobsAreLogSoftmaxOfTheRawLogits) {
  const std::vector<float> logits = {0.0f, std::log(3.0f), std::log(6.0f)};
  const TokenLogprob lp = token_logprob(logits, 1, 2);
  EXPECT_NEAR(lp.logprob, std::log(0.3), 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 2);
  EXPECT_NEAR(lp.top[0].second, std::log(0.6), 1e-6);
  EXPECT_EQ(lp.top[1].first, 1);
}

TEST(StopStrings, HoldsBackPartialMatchesAndCutsAtTheFirstMatch) {
  StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.feed("abc E"), "abc ");  // "E" may start END
  EXPECT_EQ(m.feed("N"), "");
  EXPECT_EQ(m.feed("x"), "ENx");  // not END after all
  EXPECT_EQ(m.feed("y\n"), "y");
  EXPECT_EQ(m.feed("\nmore"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.feed("later"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, FlushReleasesHeldTextWhenTheStreamEnds) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.feed("go ST"), "go ");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.flush(), "ST");
  StopMatcher none({});
  EXPECT_EQ(none.feed("anything"), "anything");
  StopMatcher split({"abc"});
  std::string out;
  for (char ch : std::string("xxabxabcyy")) out += split.feed(std::string(1, ch));
  EXPECT_EQ(out, "xxabx");
}

}  // namespace
}  // namespace nextn
