// `nextn tokenize`, `nextn detokenize` and `nextn generate --prompt` as a
// user runs them, against the ids Hugging Face `tokenizers` recorded in
// tests/fixtures/tokenizers/<kind>/cases.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "tokenizer/tokenizer.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

const std::string kRoot = NEXTN_FIXTURES;
const std::string kQwen = kRoot + "/tokenizers/qwen35";
const std::string kGemma = kRoot + "/tokenizers/gemma3";
// vocab_size 4096 >= the qwen35 reference tokenizer's ids.
const std::string kModel = kRoot + "/qwen35-causal-sharded";

nlohmann::json parse_json(const test::CliResult& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

void expect_one_error(const test::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(needle), std::string::npos) << "expected '" << needle << "' in: " << lines[0];
}

// The recorded case for `text` in a reference fixture.
nlohmann::json recorded(const std::string& dir, const std::string& text) {
  const auto cases = nlohmann::json::parse(test::read_file(dir + "/cases.json"));
  for (const auto& c : cases["encode"])
    if (c["text"] == text) return c;
  ADD_FAILURE() << "no recorded case for " << text;
  return {};
}

std::string join_ids(const nlohmann::json& ids, const char* sep) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += sep;
    s += std::to_string(ids[i].get<int>());
  }
  return s;
}

TEST(CliTokenize, EncodesLikeHuggingFace) {
  for (const std::string& dir : {kQwen, kGemma}) {
    const auto c = recorded(dir, "Hello, world!");
    const auto j = parse_json(run_cli("tokenize -m " + dir + " --text 'Hello, world!' --json"));
    EXPECT_EQ(j, nlohmann::json({{"ids", c["ids"]}}));
    const auto r = run_cli("tokenize -m " + dir + " --text 'Hello, world!'");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, join_ids(c["ids"], ",") + "\n");
    EXPECT_EQ(parse_json(run_cli("tokenize -m " + dir + " --text 'Hello, world!' --no-special --json"))["ids"],
              c.value("ids_no_special", c["ids"]));
  }
}

TEST(CliTokenize, FileInputAndRoundTrip) {
  // Text the shell would mangle goes through --file; decode gives it back.
  const std::string text = "def f(x):\r\n\treturn x  # 👨‍👩‍👧 café <|im_start|>\n";
  test::TempDir tmp;
  const std::string f = tmp.str() + "/in.txt";
  std::ofstream(f, std::ios::binary) << text;
  const auto c = recorded(kQwen, "<|im_start|> <|im_end|>");
  EXPECT_EQ(parse_json(run_cli("tokenize -m " + kQwen + " --text '<|im_start|> <|im_end|>' --json"))["ids"], c["ids"]);
  const auto ids = parse_json(run_cli("tokenize -m " + kQwen + " --file " + f + " --json"))["ids"];
  ASSERT_GT(ids.size(), 5u);
  const auto j = parse_json(run_cli("detokenize -m " + kQwen + " --ids " + join_ids(ids, ",") + " --json"));
  EXPECT_EQ(j, nlohmann::json({{"text", text}}));
  const auto r = run_cli("detokenize -m " + kQwen + " --ids " + join_ids(ids, ","));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, text + "\n");
  const auto skip =
      parse_json(run_cli("detokenize -m " + kQwen + " --ids " + join_ids(ids, ",") + " --skip-special --json"));
  EXPECT_EQ(skip["text"], "def f(x):\r\n\treturn x  # 👨‍👩‍👧 café \n");
}

TEST(CliTokenize, DefaultModelDirectory) {
  const auto c = recorded(kGemma, "Hello world");
  const auto j = parse_json(run_cli("tokenize --text 'Hello world' --json", "NEXTN_DEFAULT_MODEL=" + kGemma));
  EXPECT_EQ(j["ids"], c["ids"]);
}

TEST(CliTokenize, ErrorsAreOneLine) {
  test::TempDir tmp;
  expect_one_error(run_cli("tokenize -m " + tmp.str() + " --text hi"), tmp.str() + "/tokenizer.json: not found");
  expect_one_error(run_cli("detokenize -m " + tmp.str() + " --ids 1"), tmp.str() + "/tokenizer.json: not found");
  expect_one_error(run_cli("tokenize -m " + kQwen + " --text hi --file x"), "exactly one of --text or --file");
  expect_one_error(run_cli("tokenize -m " + kQwen), "exactly one of --text or --file");
  expect_one_error(run_cli("tokenize -m " + kQwen + " --file " + tmp.str() + "/missing"), "--file");
  const std::string bad = tmp.str() + "/bad.txt";
  std::ofstream(bad, std::ios::binary) << "ok\xff";
  expect_one_error(run_cli("tokenize -m " + kQwen + " --file " + bad), "not valid UTF-8 (byte offset 2)");
  expect_one_error(run_cli("detokenize -m " + kQwen + " --ids 1,99999"), "token id 99999 is not in the vocabulary");
  expect_one_error(run_cli("detokenize -m " + kQwen + " --ids 1,x"), "--ids");
  std::ofstream(tmp.str() + "/tokenizer.json") << R"({"model": {"type": "Unigram"}})";
  expect_one_error(run_cli("tokenize -m " + tmp.str() + " --text hi"),
                   tmp.str() + "/tokenizer.json: model.type: unsupported type 'Unigram' (supported: BPE)");
}

class CliGeneratePrompt : public ::testing::Test {
 protected:
  // A model directory with a tokenizer: the checkpoint's files linked, plus
  // the qwen35 reference tokenizer.json.
  void SetUp() override {
    for (const auto& e : fs::directory_iterator(kModel)) fs::create_symlink(e.path(), dir_.path / e.path().filename());
    fs::copy_file(kQwen + "/tokenizer.json", dir_.path / "tokenizer.json");
  }
  test::TempDir dir_;
};

TEST_F(CliGeneratePrompt, PromptTextEqualsItsIds) {
  const std::string prompt = "def fibonacci(n):";
  const auto ids = parse_json(run_cli("tokenize -m " + dir_.str() + " --text '" + prompt + "' --json"))["ids"];
  ASSERT_GT(ids.size(), 2u);
  const auto by_text =
      parse_json(run_cli("generate -m " + dir_.str() + " --prompt '" + prompt + "' -n 6 --ignore-eos --json"));
  const auto by_ids = parse_json(
      run_cli("generate -m " + dir_.str() + " --prompt-ids " + join_ids(ids, ",") + " -n 6 --ignore-eos --json"));
  EXPECT_EQ(by_text["tokens"], by_ids["tokens"]);
  ASSERT_EQ(by_text["tokens"].size(), 6u);
  // The model's vocabulary (4096) is larger than the tokenizer's (3010), so
  // some generated ids may have no token: decode skips those, as tokenizers does.
  const std::string text =
      tok::Tokenizer::load(kQwen + "/tokenizer.json").decode(by_text["tokens"].get<std::vector<int32_t>>());
  EXPECT_EQ(by_text["text"], text);
  EXPECT_EQ(by_ids["text"], text);
  const auto plain = run_cli("generate -m " + dir_.str() + " --prompt '" + prompt + "' -n 6 --ignore-eos");
  EXPECT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out, text + "\n");
}

TEST_F(CliGeneratePrompt, Errors) {
  expect_one_error(run_cli("generate -m " + dir_.str() + " --prompt '' -n 2"),
                   "--prompt: the text encodes to no tokens");
  expect_one_error(run_cli("generate -m " + dir_.str() + " --prompt hi --prompt-ids 1 -n 2"), "not both");
  // A model whose vocabulary (2048) is smaller than the tokenizer's ids.
  test::TempDir small;
  for (const auto& e : fs::directory_iterator(kRoot + "/qwen35-causal-tied"))
    fs::create_symlink(e.path(), small.path / e.path().filename());
  fs::copy_file(kQwen + "/tokenizer.json", small.path / "tokenizer.json");
  expect_one_error(run_cli("generate -m " + small.str() + " --prompt '<|im_start|>' -n 2"),
                   "tokenizer.json gives token id 3001, outside the model's vocabulary [0, 2048)");
  fs::remove(dir_.path / "tokenizer.json");
  std::ofstream(dir_.path / "tokenizer.json") << "{";
  expect_one_error(run_cli("generate -m " + dir_.str() + " --prompt hi -n 2"), "tokenizer.json: invalid JSON");
}

}  // namespace
}  // namespace nextn
