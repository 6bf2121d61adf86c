// nextn serve: the OpenAI-compatible HTTP server (docs/server.md). The engine
// runs up to --max-batch requests at once with shared target forwards; HTTP
// workers parse, queue and stream.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <pthread.h>
#include <thread>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "server/engine.h"
#include "server/http_server.h"
#include "speculative/verify.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/model_tokenizer.h"

namespace nextn::cli {
namespace {

struct ServeArgs {
  std::string model, draft = "none", host = "127.0.0.1", backend = "cpu", served_name;
  int port = 8000, block_size = 0, threads = 0;
  int max_body_kib = 1024, max_prompt_tokens = 2048, max_tokens = 1024, queue_depth = 16, max_batch = 8;
  CLI::Option* block_opt = nullptr;
};

void run(const ServeArgs& a) {
  const DraftKind draft = parse_draft_kind(a.draft);
  if (draft == DraftKind::Oracle) fail("--draft oracle needs a known answer: serve supports none or mtp");
  if (a.block_opt->count() > 0) {
    if (draft == DraftKind::None) fail("--block-size applies to --draft mtp only");
    check_block_size(a.block_size);
  }
  if (a.port < 0 || a.port > 65535) fail("--port {} is outside [0, 65535]", a.port);
  if (a.max_body_kib < 1) fail("--max-body-kib {} must be at least 1", a.max_body_kib);
  if (a.max_prompt_tokens < 1) fail("--max-prompt-tokens {} must be at least 1", a.max_prompt_tokens);
  if (a.max_tokens < 1) fail("--max-tokens {} must be at least 1", a.max_tokens);
  if (a.queue_depth < 1) fail("--queue-depth {} must be at least 1", a.queue_depth);
  if (a.max_batch < 1) fail("--max-batch {} must be at least 1", a.max_batch);
  const BackendKind kind = parse_backend(a.backend);

  const std::string dir = model_dir_or_default(a.model);
  const tok::Tokenizer tokenizer = tok::load_model_tokenizer(dir, "serve");
  std::optional<ChatTemplate> chat_template;
  try {
    chat_template = load_chat_template(dir);
  } catch (const Error& e) {  // completions still work; chat answers 400
    std::fprintf(stderr, "nextn serve: no chat template (%s): /v1/chat/completions is off\n", e.what());
  }
  const auto ckpt = Qwen35Checkpoint::open(dir);
  if (draft == DraftKind::Mtp && ckpt.mtp_layers() == 0)
    fail("{}: --draft mtp: the checkpoint has no MTP head (0 MTP layers)", dir);

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
  server::EngineOptions eo{kind, a.threads, draft, a.block_opt->count() > 0 ? a.block_size : 0, limits};
  server::Engine engine(ckpt, tokenizer, eo, metrics);
  server::HttpOptions ho;
  ho.host = a.host;
  ho.port = a.port;
  ho.model_name = a.served_name.empty() ? std::filesystem::path(dir).lexically_normal().filename().string() : a.served_name;
  if (ho.model_name.empty()) ho.model_name = "nextn";
  ho.limits = limits;
  server::HttpServer http(engine, tokenizer, std::move(chat_template), metrics, ho);
  const int port = http.bind();
  std::fprintf(stderr, "nextn serve: model '%s' (%s backend, draft %s) listening on http://%s:%d\n", ho.model_name.c_str(),
               a.backend.c_str(), a.draft.c_str(), a.host.c_str(), port);
  std::fflush(stderr);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    http.stop();
  });
  http.serve();
  pthread_kill(waiter.native_handle(), SIGTERM);  // serve() may also end on its own
  waiter.join();
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)");
  cmd->add_option("-m,--model", a->model, "Checkpoint directory (default: the shipped model)");
  cmd->add_option("--draft", a->draft, "Drafter: none or mtp (greedy: exact; sampling: lossless speculative sampling)");
  a->block_opt = cmd->add_option("--block-size", a->block_size, "Verify width K, 2..64 (default: MTP layers + 2)")->check(number());
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
  cmd->add_option("--max-batch", a->max_batch,
                  "Requests generating at once, their target forwards shared (default 8; the cuda backend runs 1)")
      ->check(number());
  add_threads_option(cmd, &a->threads);
  cmd->callback([a] { run(*a); });
}

}  // namespace nextn::cli
