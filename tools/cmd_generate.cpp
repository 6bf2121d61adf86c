// nextn generate: greedy decoding, plain (--draft none) or speculative
// (--draft mtp|oracle|assistant DIR), a batch of one through the engine step
// (engine/generate.h). The verify head is the batched argmax, the recorded
// winner at every K (docs/benchmark_results/mtp-verify-early-exit-decision-h200-2026-11-30.md;
// the other arms are measured by `nextn bench verify`). The output is the
// same token ids either way; --json adds the counters (docs/speculative.md).
#include <cstdio>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/runtime.h"
#include "model/target_model.h"
#include "speculative/gemma4_drafter.h"
#include "engine/block_choice.h"
#include "engine/generate.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/model_tokenizer.h"

namespace nextn::cli {
namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_ids, draft = "none", backend = "cpu", draft_cost = "free", block_size;
  int n = 32;
  OracleArgs oracle;
  int draft_vocab = 0, prefill_chunk = kDefaultPrefillChunk;
  RuntimeArgs runtime;
  bool ignore_eos = false, json = false, chat = false;
  CLI::Option *block_opt = nullptr, *prompt_opt = nullptr, *ids_opt = nullptr, *cost_opt = nullptr,
              *draft_vocab_opt = nullptr;
};

// Per draft position i: the share of rounds whose draft i was accepted
// (", accepted at draft 1..3: 0.78 0.59 0.41"); empty without drafts.
std::string per_position_acceptance(const VerifyCounters& c) {
  if (c.rounds == 0 || c.accepted_at.empty()) return "";
  std::string out = fmt::format(", accepted at draft 1..{}:", c.accepted_at.size());
  for (size_t i = 0; i < c.accepted_at.size(); ++i)
    out += fmt::format(" {:.2f}", double(c.accepted_at[i]) / double(c.rounds));
  return out;
}

void run(const GenerateArgs& a) {
  // Flags first: everything that can be refused without reading the model.
  if (a.prompt_opt->count() > 0 && a.ids_opt->count() > 0) fail("give --prompt or --prompt-ids, not both");
  const bool text_prompt = a.prompt_opt->count() > 0;
  if (!text_prompt && a.ids_opt->count() == 0) fail("no prompt: pass --prompt TEXT or token ids with --prompt-ids 1,2,3");
  if (a.chat && !text_prompt) fail("--chat needs --prompt TEXT (it wraps the text as one user turn)");
  std::vector<int32_t> prompt;
  if (!text_prompt) prompt = parse_id_list(a.prompt_ids, "--prompt-ids");
  if (a.n < 0) fail("-n {} is negative", a.n);
  GenerateOptions o;
  o.max_new_tokens = a.n;
  o.prefill_chunk = a.prefill_chunk;
  // A directory is a drafter checkpoint (a Gemma 4 assistant), run by its own loop driver.
  const bool assistant_draft = is_drafter_checkpoint(a.draft);
  o.draft = assistant_draft ? DraftKind::None : parse_draft_kind(a.draft);
  o.ignore_eos = a.ignore_eos;
  o.oracle = oracle_spec(a.draft, a.oracle);
  o.draft_cost = parse_draft_cost(a.draft_cost);
  if (a.cost_opt->count() > 0 && o.draft != DraftKind::Oracle) fail("--draft-cost applies to --draft oracle only");
  BlockSizeFlag block;
  if (a.block_opt->count() > 0) {
    if (o.draft == DraftKind::None && !assistant_draft)
      fail("--block-size applies to a drafter only (--draft mtp, oracle or an assistant directory)");
    block = parse_block_size_flag(a.block_size);
  }
  o.block_policy = block.policy;
  o.draft_vocab = draft_vocab_from_flag(o.draft, a.draft_vocab_opt->count() > 0, a.draft_vocab);
  const BackendKind kind = parse_backend(a.backend);
  const RuntimeOptions runtime = runtime_options(a.runtime);
  check_backend_options(kind, runtime);  // the tensor-parallel degree's fit to the model: once it is read

  const std::string dir = model_dir_or_default(a.model);
  // The tokenizer first: --prompt needs it, and a bad tokenizer.json is
  // refused before the weights are read.
  std::optional<tok::Tokenizer> tokenizer =
      text_prompt ? std::optional<tok::Tokenizer>(tok::load_model_tokenizer(dir, "--prompt"))
                  : tok::load_model_tokenizer_if_present(dir);
  if (text_prompt) {
    std::string text = a.prompt;
    tok::EncodeOptions encode_options;
    if (a.chat) {
      // One user turn through the checkpoint's own template, as transformers'
      // apply_chat_template(add_generation_prompt=True) renders it; the
      // template writes any BOS itself, so the encoder adds none
      // (add_special_tokens=False) and matches the special tokens it wrote.
      const ChatTemplate chat_template = load_chat_template(dir);
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      messages.push_back({{"role", "user"}, {"content", a.prompt}});
      ChatOptions chat_options;
      chat_options.add_generation_prompt = true;
      text = render_chat(chat_template, messages, chat_options);
      encode_options.add_special_tokens = false;
    }
    try {
      prompt = tokenizer->encode(text, encode_options);
    } catch (const Error& e) {
      fail("--prompt: {}", e.what());
    }
    if (prompt.empty()) fail("--prompt: the text encodes to no tokens");
  }
  const TargetModel target = open_target_model(dir, kind, runtime);
  const int vocab = target.info.vocab_size;
  for (int32_t t : prompt) {
    if (t < vocab) continue;
    if (text_prompt)
      fail("--prompt: {} gives token id {}, outside the model's vocabulary [0, {})", tok::tokenizer_path(dir), t, vocab);
    fail("--prompt-ids: token id {} is outside the vocabulary [0, {})", t, vocab);
  }
  if (o.draft == DraftKind::Mtp && target.info.mtp_layers == 0)
    fail("{}: --draft mtp: the checkpoint has no MTP head (0 MTP layers)", dir);
  if (o.draft_cost == DraftCost::Mtp && target.info.mtp_layers == 0)
    fail("{}: --draft-cost mtp: the checkpoint has no MTP head (0 MTP layers)", dir);
  if (assistant_draft && target.family != "gemma4")
    fail("--draft {}: a drafter checkpoint drafts for a Gemma 4 target, and {} is not one", a.draft, dir);
  o.block_size = resolve_block_size(block.policy, block.size,
                                    assistant_draft ? kAssistantBlockSize : default_block_size(target.info.mtp_layers));
  const GenerateResult r = assistant_draft ? generate_with_assistant(target.factory, a.draft, prompt, o, runtime.cpu_threads)
                                           : generate_fresh(target.factory, prompt, o);
  const auto stats = stats_json(r.stats);
  const std::optional<std::string> text =
      tokenizer ? std::optional<std::string>(tokenizer->decode(r.tokens)) : std::nullopt;
  if (a.json) {
    nlohmann::ordered_json j;
    j["tokens"] = r.tokens;
    j["text"] = text ? nlohmann::ordered_json(*text) : nlohmann::ordered_json(nullptr);
    j["stats"] = stats;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  if (text) {
    std::fwrite(text->data(), 1, text->size(), stdout);
  } else {
    for (size_t i = 0; i < r.tokens.size(); ++i) std::printf("%s%d", i ? " " : "", r.tokens[i]);
  }
  std::printf("\n");
  std::fflush(stdout);
  const auto& c = r.stats.counters;
  std::fprintf(stderr,
               "stats: draft %s, block_size %d%s, verify %s (runtime: %s), rounds %lld, drafted %lld, accepted %lld "
               "(%.3f)%s, rows_projected %lld, %d tokens, stop %s, %.1f tokens/s decode, prefill %.3f ms\n",
               r.stats.draft.c_str(), c.block_size, r.stats.block_policy == "auto" ? " (auto)" : "", c.verify_chosen.c_str(), c.verify_taken.c_str(),
               (long long)c.rounds, (long long)c.drafted, (long long)c.accepted, stats["acceptance"].get<double>(),
               per_position_acceptance(c).c_str(), (long long)c.rows_projected, r.stats.generated,
               r.stats.stop.c_str(), r.stats.tokens_per_second(), r.stats.prefill_ms);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Greedy decoding, plain or MTP-speculative (exact)");
  cmd->add_option("-m,--model", a->model, "Checkpoint directory (default: the shipped model)");
  a->prompt_opt = cmd->add_option("--prompt", a->prompt, "Prompt text, encoded with the model's tokenizer.json");
  a->ids_opt = cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as comma-separated token ids");
  cmd->add_option("-n", a->n, "Tokens to generate (default 32)")->check(number());
  cmd->add_option("--draft", a->draft, "Drafter: none (plain greedy), mtp (the checkpoint's MTP head), oracle, or a Gemma 4 assistant directory");
  add_oracle_options(cmd, &a->oracle);
  a->cost_opt = cmd->add_option("--draft-cost", a->draft_cost,
                                 "Oracle: free (default) or mtp (run the MTP draft chain for its cost, use the oracle's tokens)");
  a->block_opt = cmd->add_option("--block-size", a->block_size,
                                 "Verify width K, 2..64, or auto: chosen every step from the acceptance so far and "
                                 "a measured cost model, up to 8 (default: MTP layers + 2; with an assistant 4)");
  a->draft_vocab_opt = cmd->add_option("--draft-vocab", a->draft_vocab,
                                       "--draft mtp: draft from token ids [0, N) only; the output stays exact "
                                       "(default: the whole vocabulary; N above it is clamped)")
                           ->check(number());
  cmd->add_option("--backend", a->backend, "cpu or cuda (default cpu)");
  add_runtime_options(cmd, &a->runtime);
  cmd->add_option("--prefill-chunk", a->prefill_chunk,
                  "Prompt tokens forwarded per engine step (default 512; the same in serve, so answers match)")
      ->check(number());
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the EOS token");
  cmd->add_flag("--chat", a->chat, "Render --prompt as one user turn with the model's chat template");
  cmd->add_flag("--json", a->json, "Print one JSON object: tokens, text (null without tokenizer.json), stats");
  cmd->callback([a] { run(*a); });
}

}  // namespace nextn::cli
