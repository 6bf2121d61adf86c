// nextn draft-trace: the drafter's first-step greedy guesses, teacher-forced.
// drafts[p] is the guess for token p+2 from (token p+1, target hidden p):
// the MTP head of a Qwen3.5 checkpoint (--draft mtp), or a Gemma 4
// assistant checkpoint (--draft DIR) over its Gemma 4 target (-m).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/gemma4_checkpoint.h"
#include "model/runtime.h"
#include "model/target_model.h"
#include "speculative/gemma4_drafter.h"

namespace nextn::cli {
namespace {

std::vector<int32_t> mtp_trace(const std::string& dir, BackendKind kind, const RuntimeOptions& runtime,
                               const std::vector<int32_t>& ids) {
  if (!gemma4_model_type(dir).empty())
    fail("{}: --draft mtp: the checkpoint has no MTP head (a Gemma 4 target drafts with its assistant: --draft DIR)",
         dir);
  const auto ckpt = Qwen35Checkpoint::open(dir);
  if (ckpt.mtp_layers() == 0) fail("{}: --draft mtp: the checkpoint has no MTP head", ckpt.dir());
  auto rt = make_runtime(ckpt, kind, int(ids.size()) + 1, runtime);
  rt->target_forward(ids);
  const std::vector<int32_t> next(ids.begin() + 1, ids.end());
  MtpHead& mtp = mtp_of(*rt);
  mtp.mtp_forward(next, 0);
  std::vector<int32_t> drafts(next.size());
  mtp.mtp_argmax(int(drafts.size()), drafts.data());
  return drafts;
}

std::vector<int32_t> assistant_trace(const std::string& dir, const std::string& assistant_dir, BackendKind kind,
                                     const RuntimeOptions& runtime, const std::vector<int32_t>& ids) {
  check_assistant_dir(assistant_dir);
  const TargetModel target = open_target_model(dir, kind, runtime);
  if (target.family != "gemma4")
    fail("--draft {}: a drafter checkpoint drafts for a Gemma 4 target, and {} is not one", assistant_dir, dir);
  for (int32_t id : ids)  // the last id is only a bonus, never forwarded: check them all here
    if (id >= target.info.vocab_size)
      fail("--prompt-ids: token id {} is outside the vocabulary [0, {})", id, target.info.vocab_size);
  AssistantModel assistant(assistant_dir, target.gemma4->config(), runtime.cpu_threads);
  auto rt = target.factory(int(ids.size()));
  return assistant_draft_trace(*rt, assistant, ids);
}

}  // namespace

void register_draft_trace(CLI::App& app) {
  struct Opts {
    std::string model, draft = "mtp", ids, backend = "cpu";
    RuntimeArgs runtime;
    bool json = false;
  };
  auto opts = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("draft-trace", "Teacher-forced first-step drafts over given token ids");
  cmd->add_option("-m,--model", opts->model, "Checkpoint directory (default: the shipped model)");
  cmd->add_option("--draft", opts->draft, "Drafter: mtp, or a Gemma 4 assistant directory (with its target as -m)");
  cmd->add_option("--prompt-ids", opts->ids, "Comma-separated token ids (at least 2)")->required();
  cmd->add_option("--backend", opts->backend, "cpu or cuda");
  add_runtime_options(cmd, &opts->runtime);
  cmd->add_flag("--json", opts->json, "Print one JSON object");
  cmd->callback([opts] {
    const bool assistant = is_drafter_checkpoint(opts->draft);
    if (opts->draft != "mtp" && !assistant)
      fail("--draft: draft-trace needs a model drafter (mtp or a Gemma 4 assistant directory), not '{}'", opts->draft);
    const auto ids = parse_id_list(opts->ids, "--prompt-ids");
    if (ids.size() < 2) fail("--prompt-ids: draft-trace needs at least 2 ids");
    const auto kind = parse_backend(opts->backend);
    const RuntimeOptions runtime = runtime_options(opts->runtime);
    const std::string dir = model_dir_or_default(opts->model);
    const std::vector<int32_t> drafts = assistant ? assistant_trace(dir, opts->draft, kind, runtime, ids)
                                                  : mtp_trace(dir, kind, runtime, ids);
    if (opts->json) {
      std::printf("%s\n", nlohmann::json{{"drafts", drafts}}.dump().c_str());
    } else {
      for (size_t i = 0; i < drafts.size(); ++i) std::printf("%s%d", i ? " " : "", drafts[i]);
      std::printf("\n");
    }
  });
}

}  // namespace nextn::cli
