#include "server/http_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>

#include "server/client_socket.h"
#include "server/http_error.h"
#include "server/openai_format.h"

namespace nextn::server {
namespace {

using Json = nlohmann::ordered_json;
using namespace std::chrono_literals;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "",
                const std::string& code = "") {
  res.status = status;
  res.set_content(dump_json(error_json(status, message, param, code)), "application/json");
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  const tok::Tokenizer& tokenizer;
  std::optional<ChatTemplate> chat_template;
  Metrics& metrics;
  HttpOptions options;
  httplib::Server svr;
  std::atomic<uint64_t> next_id{1};

  Impl(Engine& e, const tok::Tokenizer& t, std::optional<ChatTemplate> ct, Metrics& m, HttpOptions o)
      : engine(e), tokenizer(t), chat_template(std::move(ct)), metrics(m), options(std::move(o)) {}

  std::vector<int32_t> prompt_tokens(const CompletionRequest& r) {
    std::vector<int32_t> ids;
    if (r.endpoint == Endpoint::ChatCompletions) {
      if (!chat_template) throw HttpError(400, "this model has no chat template: use /v1/completions", "messages");
      ChatOptions co;
      co.add_generation_prompt = true;
      co.extra = r.chat_template_kwargs;
      std::string text;
      try {
        text = render_chat(*chat_template, r.messages, co);
        tok::EncodeOptions eo;
        eo.add_special_tokens = false;  // the template wrote any BOS itself (as `nextn generate --chat`)
        ids = tokenizer.encode(text, eo);
      } catch (const Error& e) {
        throw HttpError(400, fmt::format("the chat template refused the messages: {}", e.what()), "messages");
      }
    } else if (r.prompt_is_ids) {
      ids = r.prompt_ids;
      for (int32_t t : ids)
        if (t >= engine.vocab())
          throw HttpError(400, fmt::format("token id {} is outside the vocabulary [0, {})", t, engine.vocab()), "prompt");
    } else {
      try {
        ids = tokenizer.encode(r.prompt);  // as `nextn generate --prompt`
      } catch (const Error& e) {
        throw HttpError(400, e.what(), "prompt");
      }
    }
    if (ids.empty()) throw HttpError(400, "the prompt encodes to no tokens", "prompt");
    if (int(ids.size()) > options.limits.max_prompt_tokens)
      throw HttpError(400,
                      fmt::format("the prompt has {} tokens, this server's limit is {}", ids.size(),
                                  options.limits.max_prompt_tokens),
                      r.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt", "context_length_exceeded");
    return ids;
  }

  void completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    const char* name = endpoint == Endpoint::ChatCompletions ? "/v1/chat/completions" : "/v1/completions";
    try {
      CompletionRequest r = parse_completion_request(req.body, endpoint, options.limits);
      if (!r.model.empty() && r.model != options.model_name)
        throw HttpError(404, fmt::format("the model '{}' does not exist (this server serves '{}')", r.model,
                                         options.model_name),
                        "model", "model_not_found");
      std::vector<int32_t> ids = prompt_tokens(r);
      auto job = std::make_shared<Job>(std::move(r), std::move(ids));
      if (!engine.submit(job))
        throw HttpError(429, fmt::format("the queue is full ({} requests waiting): retry later", options.limits.queue_depth));
      ResponseHeader h{fmt::format("{}-{}", endpoint == Endpoint::ChatCompletions ? "chatcmpl" : "cmpl", next_id++),
                       unix_now(), options.model_name, endpoint};
      if (job->request.stream)
        stream(job, h, res);
      else
        wait_full(*job, h, req, res);
    } catch (const HttpError& e) {
      send_error(res, e.status(), e.what(), e.param(), e.code());
    } catch (const std::exception& e) {
      send_error(res, 500, fmt::format("internal error: {}", e.what()));
    }
    metrics.request(name, res.status == -1 ? 200 : res.status);  // httplib sets 200 after the handler
  }

  // Collects the whole answer. Nothing is written before the end, so a
  // client that goes away is seen on its socket (polled between events):
  // its job is cancelled, which frees the engine slot after the current round.
  void wait_full(Job& job, const ResponseHeader& h, const httplib::Request& req, httplib::Response& res) {
    std::string text;
    std::vector<LogprobEntry> logprobs;
    const int fd = find_connection_socket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    for (;;) {
      std::vector<JobEvent> events = job.take(100ms);
      if (fd >= 0 && peer_closed(fd) && !(!events.empty() && events.back().final)) {
        job.cancel();
        send_error(res, 499, "the client closed the connection before the answer was ready");
        return;
      }
      for (JobEvent& ev : events) {
        text += ev.text;
        for (auto& e : ev.logprobs) logprobs.push_back(std::move(e));
        if (!ev.final) continue;
        if (!ev.error.empty()) throw HttpError(500, fmt::format("generation failed: {}", ev.error));
        res.set_content(dump_json(full_response(h, text, logprobs, job.request.logprobs, ev.finish_reason,
                                                ev.prompt_tokens, ev.completion_tokens)),
                        "application/json");
        return;
      }
    }
  }

  struct StreamState {
    std::shared_ptr<Job> job;
    ResponseHeader header;
    bool first = true, finished = false;
    size_t text_offset = 0;
  };

  void stream(std::shared_ptr<Job> job, const ResponseHeader& h, httplib::Response& res) {
    auto st = std::make_shared<StreamState>(StreamState{job, h});
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) {
          if (st->finished) {
            sink.done();
            return true;
          }
          const CompletionRequest& r = st->job->request;
          std::string out;
          for (JobEvent& ev : st->job->take(200ms)) {
            if (!ev.error.empty()) {
              out += sse_event(error_json(500, fmt::format("generation failed: {}", ev.error)));
            } else if (!ev.final || !ev.text.empty() || st->first) {
              out += sse_event(stream_chunk(st->header, ev.text, ev.logprobs, r.logprobs, st->first, nullptr, st->text_offset));
              for (const auto& e : ev.logprobs) st->text_offset += e.token.size();
              st->first = false;
            }
            if (ev.final) {
              if (ev.error.empty()) {
                out += sse_event(stream_chunk(st->header, "", {}, false, false, &ev.finish_reason, st->text_offset));
                if (r.include_usage) out += sse_event(usage_chunk(st->header, ev.prompt_tokens, ev.completion_tokens));
              }
              out += "data: [DONE]\n\n";
              st->finished = true;
              break;
            }
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            st->job->cancel();  // the client went away: free the engine
            return false;
          }
          if (st->finished) sink.done();
          return true;
        },
        [st](bool success) {
          if (!success || !st->finished) st->job->cancel();
        });
  }

  void routes() {
    svr.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& s) {
      completion(q, s, Endpoint::Completions);
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& s) {
      completion(q, s, Endpoint::ChatCompletions);
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& s) {
      Json model = {{"id", options.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "nextn"}};
      s.set_content(dump_json({{"object", "list"}, {"data", Json::array({model})}}), "application/json");
      metrics.request("/v1/models", 200);
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& s) {
      s.set_content("{\"status\":\"ok\"}", "application/json");
      metrics.request("/health", 200);
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& s) {
      s.set_content(metrics.render(), "text/plain; version=0.0.4");
    });
    // httplib's own refusals (unknown route, body over the limit, bad
    // request line) arrive here with an empty body: give them OpenAI's shape.
    svr.set_error_handler([this](const httplib::Request& q, httplib::Response& s) {
      if (!s.body.empty()) return;
      std::string message = fmt::format("HTTP status {}", s.status);
      if (s.status == 400) message = "the request is malformed";
      if (s.status == 404) message = fmt::format("no route {} {}", q.method, q.path);
      if (s.status == 413)
        message = fmt::format("the request body is over this server's limit of {} bytes", options.limits.max_body_bytes);
      send_error(s, s.status, message);
      metrics.request("other", s.status);
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& s, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(s, 500, fmt::format("internal error: {}", what));
    });
    svr.set_payload_max_length(options.limits.max_body_bytes);
    // Every waiting or running stream holds a worker: room for the queue,
    // the running jobs and a few health / metrics probes.
    const size_t workers = size_t(options.limits.queue_depth) + size_t(options.limits.max_batch) + 8;
    svr.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  }
};

HttpServer::HttpServer(Engine& engine, const tok::Tokenizer& tokenizer, std::optional<ChatTemplate> chat_template,
                       Metrics& metrics, HttpOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(chat_template), metrics, std::move(options))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const auto& o = impl_->options;
  if (o.port == 0) {
    const int port = impl_->svr.bind_to_any_port(o.host);
    if (port <= 0) fail("--host {}: cannot bind a port", o.host);
    return port;
  }
  if (!impl_->svr.bind_to_port(o.host, o.port)) fail("--host {} --port {}: cannot bind (in use, or not a local address)", o.host, o.port);
  return o.port;
}

void HttpServer::serve() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace nextn::server
