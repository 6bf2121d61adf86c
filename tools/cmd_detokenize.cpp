// nextn detokenize: token ids -> text with the model directory's
// tokenizer.json (no weights needed). Prints the text or {"text": ...}.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "tokenizer/model_tokenizer.h"

namespace nextn::cli {
namespace {

struct DetokenizeArgs {
  std::string model, ids;
  bool json = false, skip_special = false;
};

void run(const DetokenizeArgs& a) {
  const std::vector<int32_t> ids = parse_id_list(a.ids, "--ids");
  const std::string dir = model_dir_or_default(a.model);
  const auto t = tok::load_model_tokenizer(dir, "detokenize");
  for (int32_t id : ids)
    if (!t.has_token(id)) fail("--ids: token id {} is not in the vocabulary of {}", id, tok::tokenizer_path(dir));
  const std::string text = t.decode(ids, {.skip_special_tokens = a.skip_special});
  if (a.json) {
    nlohmann::ordered_json j;
    j["text"] = text;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
}

}  // namespace

void register_detokenize(CLI::App& app) {
  auto a = std::make_shared<DetokenizeArgs>();
  auto* cmd = app.add_subcommand("detokenize", "Token ids to text with the model's tokenizer.json");
  cmd->add_option("-m,--model", a->model, "Model directory with tokenizer.json (default: the shipped model)");
  cmd->add_option("--ids", a->ids, "Comma-separated token ids")->required();
  cmd->add_flag("--skip-special", a->skip_special, "Leave out special tokens");
  cmd->add_flag("--json", a->json, "Print {\"text\": ...}");
  cmd->callback([a] { run(*a); });
}

}  // namespace nextn::cli
