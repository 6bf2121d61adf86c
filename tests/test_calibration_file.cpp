// The calibration file format (io/calibration_file.h): valid files parse and
// answer lookups; every malformed field is one Error naming the field; a
// deterministic mutation run over fuzz/corpus/calibration (what
// fuzz/fuzz_calibration.cpp does open-ended) lets nothing but Error escape.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "cli_util.h"
#include "core/error.h"
#include "io/calibration_file.h"

namespace nextn {
namespace {

const std::string kValid = test::read_file(std::string(NEXTN_SOURCE_DIR) + "/fuzz/corpus/calibration/valid.json");

void expect_error(const std::string& text, const std::string& needle) {
  try {
    parse_calibration_file(text, "cal.json");
    ADD_FAILURE() << "parsed: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::string with(const std::string& from, const std::string& to) {
  std::string s = kValid;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(CalibrationFile, ParsesFindsAndReplaces) {
  ASSERT_FALSE(kValid.empty());
  auto f = parse_calibration_file(kValid, "cal.json");
  const auto w = find_calibrated_winner(f, {"cpu", "cpu AMD EPYC x 2", "fedcba9876543210", "mtp", 8});
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->winner, "pad");
  EXPECT_EQ(w->pad_width, 16);
  EXPECT_DOUBLE_EQ(w->tokens_per_second, 700.1);
  EXPECT_FALSE(find_calibrated_winner(f, {"cpu", "cpu AMD EPYC x 2", "fedcba9876543210", "mtp", 4}));
  EXPECT_FALSE(find_calibrated_winner(f, {"cpu", "cpu AMD EPYC x 2", "fedcba9876543210", "oracle rate 0.8 seed 1", 8}));
  put_calibration_entry(f, {{"backend", "cpu"}, {"hardware", "cpu AMD EPYC x 2"}, {"checkpoint_hash", "fedcba9876543210"},
                            {"drafter", "mtp"}, {"block_size", 8}, {"winner", "walk"}, {"pad_width", 0},
                            {"tokens_per_second_median", {{"walk", 1.5}}}});
  EXPECT_EQ(f["entries"].size(), 2u);  // replaced, not appended
  EXPECT_EQ(find_calibrated_winner(f, {"cpu", "cpu AMD EPYC x 2", "fedcba9876543210", "mtp", 8})->winner, "walk");
  EXPECT_THROW(put_calibration_entry(f, {{"backend", "cpu"}}), Error);
}

TEST(CalibrationFile, MalformedFieldsAreNamed) {
  expect_error("not json", "not JSON");
  expect_error("[]", "not a JSON object");
  expect_error(R"({"version": 1, "entries": []})", "version");
  expect_error(R"({"version": 2})", "entries");
  expect_error(with("\"winner\": \"batched\"", "\"winner\": \"fast\""), "entries[0].winner");
  expect_error(with("\"block_size\": 4", "\"block_size\": 65"), "entries[0].block_size");
  expect_error(with("\"block_size\": 4", "\"block_size\": \"4\""), "entries[0].block_size");
  expect_error(with("\"pad_width\": 16", "\"pad_width\": 8"), "entries[1].pad_width");
  expect_error(with("\"backend\": \"cuda\", ", ""), "entries[0].backend");
  expect_error(with("\"batched\": 250.5, ", ""), "no median for the winner");
  expect_error(with("\"walk\": 238.6", "\"walk\": \"fast\""), "tokens_per_second_median.walk");
  expect_error(with("\"commit\": \"716b792\"", "\"commit\": 7"), "entries[0].commit");
}

TEST(CalibrationFile, MutationsParseOrThrowError) {
  std::mt19937_64 rng(11);
  const std::string tokens[] = {"{", "}", "[", "]", ",", ":", "\"", "null", "-1", "1e999", "\"pad\"", "true", "0"};
  for (int i = 0; i < 20000; ++i) {
    std::string s = kValid;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = rng() % s.size();
      switch (rng() % 4) {
        case 0: s[at] = char(rng() & 0xff); break;
        case 1: s.erase(at, 1 + rng() % 8); break;
        case 2: s.insert(at, tokens[rng() % std::size(tokens)]); break;
        default: s.resize(at); break;
      }
    }
    try {
      auto f = parse_calibration_file(s, "m.json");
      for (const auto& e : f["entries"])
        EXPECT_TRUE(find_calibrated_winner(f, {e["backend"], e["hardware"], e["checkpoint_hash"], e["drafter"],
                                               int(e["block_size"].get<int64_t>())}));
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace nextn
