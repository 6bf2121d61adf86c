// The OpenAI-compatible API over the engine: routes, request -> job ->
// response (whole, or server-sent events), /health, /metrics, /v1/models,
// OpenAI-style JSON errors for every refusal. It answers through the HTTP
// layer's Responder (server/http_server.h); requests are parsed and
// tokenized on a small pool of its own, never on an I/O thread.
//
// States: loading (before set_engine: completions 503, /health 503),
// serving, faulted (the engine saw a DeviceFault), draining (after
// begin_drain). docs/server.md lists the API.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace nextn::server {

class OpenAiApi {
 public:
  OpenAiApi(const tok::Tokenizer& tokenizer, std::optional<ChatTemplate> chat_template, Metrics& metrics,
            std::string model_name, ServerLimits limits);
  ~OpenAiApi();  // shutdown()
  // The HTTP layer's handler: runs on an I/O thread, does not block.
  void handle(HttpRequest request, std::shared_ptr<Responder> responder);
  // The engine is loaded: completions are served from now on.
  void set_engine(Engine* engine);
  // Completions are refused (503) and /health says draining from now on.
  void begin_drain();
  // Waits for the requests being parsed; later ones get 503. Before the
  // engine goes away.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nextn::server
