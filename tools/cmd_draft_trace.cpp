// nextn draft-trace: the drafter's first-step greedy guesses, teacher-forced.
// drafts[p] is the guess for token p+2 from (token p+1, target hidden p).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/runtime.h"

namespace nextn::cli {

void register_draft_trace(CLI::App& app) {
  struct Opts {
    std::string model, draft = "mtp", ids, backend = "cpu";
    RuntimeArgs runtime;
    bool json = false;
  };
  auto opts = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("draft-trace", "Teacher-forced first-step drafts over given token ids");
  cmd->add_option("-m,--model", opts->model, "Checkpoint directory (default: the shipped model)");
  cmd->add_option("--draft", opts->draft, "Drafter: mtp");
  cmd->add_option("--prompt-ids", opts->ids, "Comma-separated token ids (at least 2)")->required();
  cmd->add_option("--backend", opts->backend, "cpu or cuda");
  add_runtime_options(cmd, &opts->runtime);
  cmd->add_flag("--json", opts->json, "Print one JSON object");
  cmd->callback([opts] {
    if (opts->draft != "mtp") {
      if (opts->draft == "none" || opts->draft == "oracle")
        fail("--draft: draft-trace needs a model drafter (mtp), not '{}'", opts->draft);
      fail("--draft: separate drafter checkpoints ('{}') are not supported yet", opts->draft);
    }
    const auto ids = parse_id_list(opts->ids, "--prompt-ids");
    if (ids.size() < 2) fail("--prompt-ids: draft-trace needs at least 2 ids");
    const auto kind = parse_backend(opts->backend);
    const RuntimeOptions runtime = runtime_options(opts->runtime);
    const auto ckpt = Qwen35Checkpoint::open(model_dir_or_default(opts->model));
    if (ckpt.mtp_layers() == 0) fail("{}: --draft mtp: the checkpoint has no MTP head", ckpt.dir());
    auto rt = make_runtime(ckpt, kind, int(ids.size()) + 1, runtime);
    rt->target_forward(ids);
    const std::vector<int32_t> next(ids.begin() + 1, ids.end());
    rt->mtp_forward(next, 0);
    std::vector<int32_t> drafts(next.size());
    rt->mtp_argmax(int(drafts.size()), drafts.data());
    if (opts->json) {
      std::printf("%s\n", nlohmann::json{{"drafts", drafts}}.dump().c_str());
    } else {
      for (size_t i = 0; i < drafts.size(); ++i) std::printf("%s%d", i ? " " : "", drafts[i]);
      std::printf("\n");
    }
  });
}

}  // namespace nextn::cli
