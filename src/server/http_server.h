// The HTTP front end on cpp-httplib: routes, request -> job -> response,
// server-sent events for streams, OpenAI-style JSON errors for every failure
// (httplib's own 404 / 413 included). docs/server.md lists the API.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "server/engine.h"
#include "server/metrics.h"
#include "server/request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace nextn::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  std::string model_name;
  ServerLimits limits;
};

class HttpServer {
 public:
  HttpServer(Engine& engine, const tok::Tokenizer& tokenizer, std::optional<ChatTemplate> chat_template,
             Metrics& metrics, HttpOptions options);
  ~HttpServer();
  // Binds (throws Error when it cannot) and returns the port.
  int bind();
  // Serves until stop().
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nextn::server
