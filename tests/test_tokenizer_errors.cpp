// Bad tokenizer.json files: each is one nextn::Error line that starts with
// the file name and names the field at fault.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace nextn::tok {
namespace {

using nlohmann::json;
const char* const kFile = "bad/tokenizer.json";

json base(const std::string& kind) {
  std::ifstream in(std::string(NEXTN_FIXTURES) + "/tokenizers/" + kind + "/tokenizer.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::string error_of(const std::string& text) {
  try {
    Tokenizer::from_json(text, kFile);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_error(const std::string& text, const std::string& needle) {
  const std::string msg = error_of(text);
  EXPECT_EQ(msg.rfind(std::string(kFile) + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find(needle), std::string::npos) << "want '" << needle << "' in: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

void expect_edit_error(const std::string& kind, const std::function<void(json&)>& edit, const std::string& needle) {
  json j = base(kind);
  edit(j);
  expect_error(j.dump(), needle);
}

TEST(TokenizerErrors, TheFixturesLoad) {
  for (const char* kind : {"qwen35", "gemma3", "gemma4"}) EXPECT_EQ(error_of(base(kind).dump()), "(no error)") << kind;
}

TEST(TokenizerErrors, JsonSyntax) {
  expect_error("", "invalid JSON");
  expect_error("{", "invalid JSON");
  expect_error(std::string("{\"a\":1}\0", 8), "NUL byte");
  expect_error("{\"model\":{},\"model\":{}}", "duplicate key 'model'");
  expect_error("[1,2]", "top level: is not a JSON object");
}

TEST(TokenizerErrors, Model) {
  expect_edit_error(
      "qwen35", [](json& j) { j.erase("model"); }, "model: missing");
  expect_edit_error(
      "qwen35", [](json& j) { j["model"]["type"] = "WordPiece"; },
      "model.type: unsupported type 'WordPiece' (supported: BPE)");
  expect_edit_error(
      "qwen35", [](json& j) { j["model"]["vocab"] = json::array(); }, "model.vocab: is an array, not an object");
  expect_edit_error(
      "qwen35", [](json& j) { j["model"]["vocab"]["!"] = -1; }, "model.vocab['!']: is -1, not an integer");
  expect_edit_error(
      "qwen35", [](json& j) { j["model"]["vocab"]["zzz-new"] = 5; }, "is also the id of");
  expect_edit_error(
      "qwen35", [](json& j) { j["model"]["merges"][0] = "ab"; }, "model.merges[0]: 'ab' is not two tokens");
  expect_edit_error(
      "qwen35",
      [](json& j) {
        j["model"]["merges"][3] = json::array({"a", "b", "c"});
      },
      "model.merges[3]: has 3 elements");
  expect_edit_error(
      "qwen35",
      [](json& j) {
        j["model"]["merges"][2] = json::array({"a", "zzz-missing"});
      },
      "model.merges[2]: token 'zzz-missing' is not in model.vocab");
  expect_edit_error(
      "qwen35", [](json& j) { j["model"]["merges"][1] = 7; }, "model.merges[1]: is neither");
  expect_edit_error(
      "gemma3", [](json& j) { j["model"]["unk_token"] = "<nope>"; }, "model.unk_token: '<nope>' is not in model.vocab");
  expect_edit_error(
      "gemma3", [](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout: is not supported");
  expect_edit_error(
      "gemma3", [](json& j) { j["model"]["byte_fallback"] = "yes"; },
      "model.byte_fallback: is a string, not a boolean");
}

TEST(TokenizerErrors, Components) {
  expect_edit_error(
      "qwen35",
      [](json& j) {
        j["normalizer"] = {{"type", "Lowercase"}};
      },
      "normalizer.type: unsupported type 'Lowercase' (supported: NFC, NFD, NFKC, NFKD, Replace, Prepend, Sequence)");
  expect_edit_error(
      "qwen35", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; },
      "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex does not compile");
  expect_edit_error(
      "qwen35", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
      "pre_tokenizer.pretokenizers[0].behavior: unsupported behavior 'Sideways'");
  expect_edit_error(
      "qwen35",
      [](json& j) {
        j["pre_tokenizer"]["pretokenizers"][1] = {{"type", "WhitespaceSplit"}};
      },
      "pre_tokenizer.pretokenizers[1].type: unsupported type 'WhitespaceSplit' (supported: Split, ByteLevel, "
      "Metaspace, Sequence)");
  expect_edit_error(
      "qwen35",
      [](json& j) {
        j["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Metaspace"}};
      },
      "pre_tokenizer.pretokenizers[1].replacement: missing");
  expect_edit_error(
      "qwen35",
      [](json& j) {
        j["pre_tokenizer"]["pretokenizers"][1] = {
            {"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
      },
      "pre_tokenizer.pretokenizers[1].prepend_scheme: unsupported prepend_scheme 'sometimes'");
  expect_edit_error(
      "qwen35",
      [](json& j) {
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Other", "x"}};
      },
      "pre_tokenizer.pretokenizers[0].pattern: must be {\"String\": ...} or {\"Regex\": ...}");
  expect_edit_error(
      "gemma3",
      [](json& j) {
        j["normalizer"]["pattern"] = {{"String", ""}};
      },
      "normalizer.pattern.String: is empty");
  expect_edit_error(
      "gemma3", [](json& j) { j["decoder"]["decoders"][1]["type"] = "CTC"; },
      "decoder.decoders[1].type: unsupported type 'CTC'");
  expect_edit_error(
      "gemma3", [](json& j) { j["decoder"]["decoders"][0].erase("content"); }, "decoder.decoders[0].content: missing");
  expect_edit_error(
      "gemma3", [](json& j) { j["post_processor"]["single"][0]["SpecialToken"]["id"] = "<x>"; },
      "post_processor.single[0].SpecialToken.id: '<x>' is not in special_tokens");
  expect_edit_error(
      "gemma3", [](json& j) { j["post_processor"]["special_tokens"]["<bos>"]["ids"][0] = 99999; },
      "post_processor: special token id 99999 is not in the vocabulary");
  expect_edit_error(
      "gemma3", [](json& j) { j["post_processor"]["type"] = "RobertaProcessing"; },
      "post_processor.type: unsupported type 'RobertaProcessing'");
  expect_edit_error(
      "gemma3", [](json& j) { j["padding"] = 3; }, "padding: is neither null nor an object");
}

TEST(TokenizerErrors, AddedTokens) {
  expect_edit_error(
      "qwen35", [](json& j) { j["added_tokens"][0]["id"] = "7"; }, "added_tokens[0].id: is a string, not an integer");
  expect_edit_error(
      "qwen35", [](json& j) { j["added_tokens"][1]["content"] = ""; }, "added_tokens[1].content: is empty");
  expect_edit_error(
      "qwen35", [](json& j) { j["added_tokens"][2]["special"] = 1; },
      "added_tokens[2].special: is an integer, not a boolean");
  expect_edit_error(
      "qwen35", [](json& j) { j["added_tokens"][1]["id"] = 5; }, "added_tokens[1].id: 5 is the model.vocab id of");
  expect_edit_error(
      "qwen35", [](json& j) { j["added_tokens"][2]["id"] = j["added_tokens"][1]["id"]; },
      "is used by another added token");
  expect_edit_error(
      "gemma3", [](json& j) { j["added_tokens"][5]["id"] = 3000; },
      "added_tokens[5].id: 3000 differs from the model.vocab id 5 of '<start_of_turn>'");
  expect_edit_error(
      "qwen35", [](json& j) { j["added_tokens"] = json::object(); }, "added_tokens: is an object, not an array");
}

TEST(TokenizerErrors, EncodeRefusesInvalidUtf8) {
  const Tokenizer t = Tokenizer::from_json(base("qwen35").dump(), kFile);
  try {
    t.encode("ok \xC3(");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 (byte offset 3)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nextn::tok
