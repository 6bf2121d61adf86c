// nextn serve: the OpenAI-compatible HTTP server (docs/server.md). The engine
// runs up to --max-batch requests at once with shared target forwards; the
// event-driven HTTP layer (server/http_server.h) holds the connections and
// the API (server/openai_api.h) parses, queues and streams. The port is
// bound first, so /health answers "loading" while the model loads; SIGTERM
// and SIGINT drain. Qwen3.5 targets run on the backend's
// sequence group (MTP drafts); Gemma 4 targets on theirs (the CPU's shares
// forwards, CUDA's is serial), optionally with the assistant (--draft DIR) as drafter.
#include <chrono>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <pthread.h>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/gemma4_checkpoint.h"
#include "model/target_model.h"
#include "server/engine.h"
#include "server/http_server.h"
#include "server/openai_api.h"
#include "speculative/gemma4_drafter.h"
#include "engine/block_choice.h"
#include "engine/prefill_budget.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/model_tokenizer.h"

namespace nextn::cli {
namespace {

struct ServeArgs {
  std::string model, draft = "none", host = "127.0.0.1", backend = "cpu", served_name, block_size, draft_cost = "free";
  int port = 8000, draft_vocab = 0, prefill_chunk = kDefaultPrefillChunk, kv_cache_tokens = 0;
  RuntimeArgs runtime;
  OracleArgs oracle;
  bool log_steps = false;
  double prefill_stall = 0;
  int max_body_kib = 1024, max_prompt_tokens = 2048, max_tokens = 1024, queue_depth = 16, max_batch = 8;
  int max_connections = 2048;
  double header_timeout = 10, body_timeout = 30, idle_timeout = 15, write_timeout = 30, drain_timeout = 30;
  CLI::Option *block_opt = nullptr, *draft_vocab_opt = nullptr, *max_connections_opt = nullptr, *cost_opt = nullptr;
};

// The engine of a Gemma 4 target: its backend's group (TargetModel::make_group),
// and with an assistant directory as --draft, one drafter per job.
std::unique_ptr<server::Engine> gemma4_engine(const std::string& dir, const ServeArgs& a, BackendKind kind,
                                              bool assistant_draft, server::EngineOptions eo,
                                              const tok::Tokenizer& tokenizer, server::Metrics& metrics) {
  const TargetModel target = open_target_model(dir, kind, eo.runtime);
  std::unique_ptr<SequenceGroup> group = target.make_group();
  const bool assistant_cost = eo.draft_cost == DraftCost::Drafter;  // --draft oracle --draft-cost ASSISTANT_DIR
  if (assistant_draft || assistant_cost) {
    auto assistant = std::make_shared<AssistantModel>(assistant_cost ? a.draft_cost : a.draft,
                                                      target.gemma4->config(), eo.runtime.cpu_threads);
    // The assistant is loaded where the target runs (its device) by the
    // first drafter: one made now reports a bad checkpoint before serving.
    (void)assistant->drafter(*group->add_sequence(1));
    eo.make_drafter = [assistant](ModelRuntime& sequence) { return assistant->drafter(sequence); };
    if (assistant_draft && eo.block_size == 0 && eo.block_policy == BlockPolicy::Fixed) eo.block_size = kAssistantBlockSize;
  }
  return std::make_unique<server::Engine>(std::move(group), tokenizer, eo, metrics);
}

void run(const ServeArgs& a) {
  // A directory is a drafter checkpoint (a Gemma 4 assistant).
  const bool assistant_draft = is_drafter_checkpoint(a.draft);
  const DraftKind draft = assistant_draft ? DraftKind::None : parse_draft_kind(a.draft);
  const OracleSpec oracle = oracle_spec(a.draft, a.oracle);
  // --draft-cost ASSISTANT_DIR: the oracle's tokens at the Gemma 4 assistant's cost.
  const bool assistant_cost = is_drafter_checkpoint(a.draft_cost);
  const DraftCost draft_cost = assistant_cost ? DraftCost::Drafter : parse_draft_cost(a.draft_cost);
  if (a.cost_opt->count() > 0 && draft != DraftKind::Oracle) fail("--draft-cost applies to --draft oracle only");
  // A drafter's block size is chosen per step unless --block-size fixes it.
  BlockSizeFlag block{.policy = draft != DraftKind::None || assistant_draft ? BlockPolicy::Auto : BlockPolicy::Fixed};
  if (a.block_opt->count() > 0) {
    if (draft == DraftKind::None && !assistant_draft)
      fail("--block-size applies to a drafter only (--draft mtp, oracle or an assistant directory)");
    block = parse_block_size_flag(a.block_size);
  }
  const int draft_vocab = draft_vocab_from_flag(draft, a.draft_vocab_opt->count() > 0, a.draft_vocab);
  if (a.port < 0 || a.port > 65535) fail("--port {} is outside [0, 65535]", a.port);
  if (a.max_body_kib < 1) fail("--max-body-kib {} must be at least 1", a.max_body_kib);
  if (a.max_prompt_tokens < 1) fail("--max-prompt-tokens {} must be at least 1", a.max_prompt_tokens);
  if (a.max_tokens < 1) fail("--max-tokens {} must be at least 1", a.max_tokens);
  if (a.queue_depth < 1) fail("--queue-depth {} must be at least 1", a.queue_depth);
  if (a.max_batch < 1) fail("--max-batch {} must be at least 1", a.max_batch);
  if (a.prefill_chunk < 1) fail("--prefill-chunk {} must be at least 1", a.prefill_chunk);
  check_prefill_stall(a.prefill_stall);
  if (a.kv_cache_tokens < 0) fail("--kv-cache-tokens {} must not be negative", a.kv_cache_tokens);
  if (a.max_connections < 1) fail("--max-connections {} must be at least 1", a.max_connections);
  for (const auto& [flag, v] : {std::pair{"--header-timeout", a.header_timeout}, {"--body-timeout", a.body_timeout},
                                {"--idle-timeout", a.idle_timeout}, {"--write-timeout", a.write_timeout}})
    if (!(v > 0 && v <= 3600)) fail("{} {} is outside (0, 3600] seconds", flag, v);
  if (!(a.drain_timeout >= 0 && a.drain_timeout <= 3600)) fail("--drain-timeout {} is outside [0, 3600] seconds", a.drain_timeout);
  const BackendKind kind = parse_backend(a.backend);
  const RuntimeOptions runtime = runtime_options(a.runtime);

  const std::string dir = model_dir_or_default(a.model);
  const tok::Tokenizer tokenizer = tok::load_model_tokenizer(dir, "serve");
  const std::string gemma4_type = gemma4_model_type(dir);
  if (gemma4_type == "gemma4_assistant")
    fail("{}: a gemma4_assistant checkpoint is a drafter: pass its target with -m and it with --draft", dir);
  std::optional<ChatTemplate> chat_template;
  try {
    chat_template = load_chat_template(dir);
  } catch (const Error& e) {  // completions still work; chat answers 400
    std::fprintf(stderr, "nextn serve: no chat template (%s): /v1/chat/completions is off\n", e.what());
  }
  const bool gemma4 = !gemma4_type.empty();
  if (assistant_draft && !gemma4)
    fail("--draft {}: a drafter checkpoint drafts for a Gemma 4 target, and {} is not one", a.draft, dir);
  std::optional<Qwen35Checkpoint> ckpt;  // Qwen3.5; a Gemma 4 target is opened by gemma4_engine
  if (!gemma4) ckpt = Qwen35Checkpoint::open(dir);
  if (draft == DraftKind::Mtp && (gemma4 || ckpt->mtp_layers() == 0))
    fail("{}: --draft mtp: the checkpoint has no MTP head (0 MTP layers)", dir);
  if (draft_cost == DraftCost::Mtp && (gemma4 || ckpt->mtp_layers() == 0))
    fail("{}: --draft-cost mtp: the checkpoint has no MTP head (0 MTP layers)", dir);
  if (assistant_cost && !gemma4)
    fail("--draft-cost {}: an assistant's cost applies to a Gemma 4 target, and {} is not one", a.draft_cost, dir);

  server::ServerLimits limits;
  limits.max_body_bytes = size_t(a.max_body_kib) * 1024;
  limits.max_prompt_tokens = a.max_prompt_tokens;
  limits.max_tokens = a.max_tokens;
  limits.queue_depth = a.queue_depth;
  limits.max_batch = a.max_batch;

  // SIGINT / SIGTERM are taken by a waiting thread (not a handler), blocked
  // before any other thread starts so that they all inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  server::Metrics metrics;
  server::EngineOptions eo;
  eo.backend = kind;
  eo.runtime = runtime;
  eo.draft = draft;
  eo.block_size = block.size;
  eo.block_policy = block.policy;
  eo.limits = limits;
  eo.draft_vocab = draft_vocab;
  eo.oracle = oracle;
  eo.draft_cost = draft_cost;
  eo.prefill_chunk = a.prefill_chunk;
  eo.prefill_stall = a.prefill_stall;
  eo.kv_cache_tokens = a.kv_cache_tokens;
  eo.log_steps = a.log_steps;
  std::string model_name =
      a.served_name.empty() ? std::filesystem::path(dir).lexically_normal().filename().string() : a.served_name;
  if (model_name.empty()) model_name = "nextn";
  server::OpenAiApi api(tokenizer, std::move(chat_template), metrics, model_name, limits);
  server::ConnectionLimits cl;
  cl.max_connections = a.max_connections;
  cl.lower_to_fit_file_limit = a.max_connections_opt->count() == 0;
  cl.header_timeout_s = a.header_timeout;
  cl.body_timeout_s = a.body_timeout;
  cl.idle_timeout_s = a.idle_timeout;
  cl.write_timeout_s = a.write_timeout;
  cl.max_body_bytes = limits.max_body_bytes;
  server::HttpServer http([&api](server::HttpRequest r, std::shared_ptr<server::Responder> s) { api.handle(std::move(r), std::move(s)); },
                          metrics, cl);
  const int port = http.bind(a.host, a.port);
  if (http.max_connections() != cl.max_connections)
    std::fprintf(stderr, "nextn serve: note: the open-file limit (hard) holds %d connections, not the default %d\n",
                 http.max_connections(), cl.max_connections);
  http.start();  // from here /health answers (503 "loading" until the engine is made)
  std::unique_ptr<server::Engine> engine;
  try {
    engine = gemma4 ? gemma4_engine(dir, a, kind, assistant_draft, eo, tokenizer, metrics)
                    : std::make_unique<server::Engine>(*ckpt, tokenizer, eo, metrics);
  } catch (...) {
    http.stop();
    throw;
  }
  api.set_engine(engine.get());
  std::fprintf(stderr, "nextn serve: model '%s' (%s backend, draft %s) listening on http://%s:%d\n", model_name.c_str(),
               a.backend.c_str(), a.draft.c_str(), a.host.c_str(), port);
  std::fflush(stderr);

  int sig = 0;
  sigwait(&signals, &sig);
  // The drain: no new connections or requests (503, /health says draining);
  // what is queued or running finishes within --drain-timeout; a second
  // signal cuts it short. Then the rest is cancelled and the process exits 0.
  api.begin_drain();
  http.stop_accepting();
  std::fprintf(stderr, "nextn serve: %s: draining %d request(s), at most %g s\n", strsignal(sig), engine->active(),
               a.drain_timeout);
  std::fflush(stderr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.drain_timeout);
  const timespec tick{0, 50'000'000};
  while (engine->active() > 0 && std::chrono::steady_clock::now() < deadline)
    if (sigtimedwait(&signals, nullptr, &tick) > 0) break;
  const int cut = engine->active();
  engine->cancel_all();
  api.shutdown();
  engine.reset();  // joins the jobs' threads: a cancelled job ends after its current step
  // Connections close after their last response (no keep-alive while draining): let them flush.
  for (int i = 0; i < 40 && http.open_connections() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  http.stop();
  std::fprintf(stderr, "nextn serve: stopped (%d request(s) cut at the drain deadline)\n", cut);
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)");
  cmd->add_option("-m,--model", a->model, "Checkpoint directory (default: the shipped model)");
  cmd->add_option("--draft", a->draft,
                  "Drafter: none, mtp, oracle (greedy requests only: replays each request's greedy answer, run once "
                  "first, at the acceptance --accept-rate(s)/--accept-pattern give), or a Gemma 4 assistant directory "
                  "(greedy: exact; sampling: lossless speculative sampling)");
  a->block_opt = cmd->add_option("--block-size", a->block_size,
                                 "Verify width K, 2..64, or auto (the default with a drafter): chosen every step from "
                                 "each request's acceptance and a cost model measured at start, up to 8");
  add_oracle_options(cmd, &a->oracle);
  a->cost_opt = cmd->add_option("--draft-cost", a->draft_cost,
                                "Oracle: free (default), mtp (run the MTP draft chain for its cost, use the oracle's tokens) or a Gemma 4 "
                                "assistant directory (run the assistant for its cost)");
  a->draft_vocab_opt = cmd->add_option("--draft-vocab", a->draft_vocab,
                                       "--draft mtp: draft from token ids [0, N) only (default: the whole vocabulary)")
                           ->check(number());
  cmd->add_option("--prefill-chunk", a->prefill_chunk,
                  "Prompt tokens a request forwards per engine step beside the running streams (default 512)")
      ->check(number());
  cmd->add_option("--prefill-stall", a->prefill_stall,
                  "While requests decode, cut arriving prompts' chunks so that a step costs at most this many times "
                  "their step alone, by a cost model measured at start (above 1; default 0: off, whole chunks). On "
                  "CUDA, Qwen3.5 needs --prefill-chunk 64 or less")
      ->check(number());
  cmd->add_option("--host", a->host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", a->port, "Port (default 8000; 0: any free port, printed at start)")->check(number());
  cmd->add_option("--backend", a->backend, "cpu or cuda (default cpu)");
  cmd->add_option("--served-model-name", a->served_name, "Model id in the API (default: the model directory's name)");
  cmd->add_option("--max-body-kib", a->max_body_kib, "Largest request body, KiB (default 1024; above: 413)")->check(number());
  cmd->add_option("--max-prompt-tokens", a->max_prompt_tokens, "Longest prompt in tokens (default 2048; above: 400)")
      ->check(number());
  cmd->add_option("--max-tokens", a->max_tokens, "Largest max_tokens a request may ask (default 1024; above: 400)")
      ->check(number());
  cmd->add_option("--queue-depth", a->queue_depth, "Requests that may wait behind the running ones (default 16; above: 429)")
      ->check(number());
  cmd->add_option("--kv-cache-tokens", a->kv_cache_tokens,
                  "Positions the KV cache may hold across all requests (default: --max-batch requests of "
                  "--max-prompt-tokens plus --max-tokens); it grows with use in blocks of 64 and a request waits "
                  "in the queue until its prompt plus max_tokens fits (each pool: Gemma 4 has two)")
      ->check(number());
  cmd->add_flag("--log-steps", a->log_steps,
               "Print one line per engine step to stderr: sequences, rows, and the host time of its parts");
  cmd->add_option("--max-batch", a->max_batch,
                  "Requests generating at once, their target forwards shared (default 8; cuda: at most 32 for Qwen3.5, 64 for "
                  "Gemma 4); "
                  "every slot is made at start")
      ->check(number());
  a->max_connections_opt = cmd->add_option("--max-connections", a->max_connections,
                  "Open client connections at most (default 2048; at the cap a new one closes the oldest idle one; "
                  "the open-file limit is raised to fit)")
      ->check(number());
  cmd->add_option("--header-timeout", a->header_timeout, "Seconds a new connection has to send its request headers (default 10; then 408)")
      ->check(number());
  cmd->add_option("--body-timeout", a->body_timeout, "Seconds a request's body may take after its headers (default 30; then 408)")
      ->check(number());
  cmd->add_option("--idle-timeout", a->idle_timeout, "Seconds a keep-alive connection may stay idle between requests (default 15)")
      ->check(number());
  cmd->add_option("--write-timeout", a->write_timeout, "Seconds a client may leave one write of its answer unread (default 30; then closed)")
      ->check(number());
  cmd->add_option("--drain-timeout", a->drain_timeout,
                  "On SIGTERM/SIGINT: seconds the running requests get to finish before they are cut (default 30)")
      ->check(number());
  add_runtime_options(cmd, &a->runtime);
  cmd->callback([a] { run(*a); });
}

}  // namespace nextn::cli
