// nextn tokenize: text -> token ids with the model directory's
// tokenizer.json (no weights needed). Prints "1,2,3" or {"ids": [...]}.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "tokenizer/model_tokenizer.h"

namespace nextn::cli {
namespace {

struct TokenizeArgs {
  std::string model, text, file;
  bool json = false, no_special = false;
  CLI::Option *text_opt = nullptr, *file_opt = nullptr;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("--file {}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void run(const TokenizeArgs& a) {
  if ((a.text_opt->count() > 0) == (a.file_opt->count() > 0)) fail("give exactly one of --text or --file");
  const std::string text = a.text_opt->count() > 0 ? a.text : read_text_file(a.file);
  const auto t = tok::load_model_tokenizer(model_dir_or_default(a.model), "tokenize");
  std::vector<int32_t> ids;
  try {
    ids = t.encode(text, {.add_special_tokens = !a.no_special});
  } catch (const Error& e) {
    fail("{}: {}", a.text_opt->count() > 0 ? "--text" : "--file " + a.file, e.what());
  }
  if (a.json) {
    nlohmann::ordered_json j;
    j["ids"] = ids;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
  std::printf("\n");
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* cmd = app.add_subcommand("tokenize", "Text to token ids with the model's tokenizer.json");
  cmd->add_option("-m,--model", a->model, "Model directory with tokenizer.json (default: the shipped model)");
  a->text_opt = cmd->add_option("--text", a->text, "The text to encode");
  a->file_opt = cmd->add_option("--file", a->file, "A file whose bytes (UTF-8) are the text to encode");
  cmd->add_flag("--no-special", a->no_special, "Do not add the post-processor's special tokens (e.g. <bos>)");
  cmd->add_flag("--json", a->json, "Print {\"ids\": [...]}");
  cmd->callback([a] { run(*a); });
}

}  // namespace nextn::cli
