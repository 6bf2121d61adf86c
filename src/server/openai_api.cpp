#include "server/openai_api.h"

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>

#include "server/http_error.h"
#include "server/openai_format.h"

namespace nextn::server {
namespace {

using Json = nlohmann::ordered_json;
using namespace std::chrono_literals;

// Parsing a 1 MiB body and tokenizing its prompt take milliseconds: two
// threads keep them off the I/O threads without competing with the engine.
constexpr int kParseThreads = 2;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_error(Responder& res, int status, const std::string& message, const std::string& param = "",
                const std::string& code = "") {
  res.send(status, "application/json", dump_json(error_json(status, message, param, code)));
}

// One admitted request's answer: job events in, HTTP out. pump() runs on
// the engine's threads (the job's listener), gone() on an I/O thread.
struct Answer {
  std::shared_ptr<Job> job;
  std::shared_ptr<Responder> res;
  ResponseHeader header;
  Metrics& metrics;
  const char* endpoint_name;

  std::mutex mu;
  bool done = false;
  bool first = true;       // streams: the first chunk (chat: carries the role)
  size_t text_offset = 0;  // streams: completions logprobs' text_offset
  std::string text;        // whole responses: collected until the end
  std::vector<LogprobEntry> logprobs;

  Answer(std::shared_ptr<Job> j, std::shared_ptr<Responder> r, ResponseHeader h, Metrics& m, const char* name)
      : job(std::move(j)), res(std::move(r)), header(std::move(h)), metrics(m), endpoint_name(name) {}

  void finish() {
    done = true;
    job->set_listener(nullptr);  // the job held this answer through its listener
  }

  void pump() {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    const bool stream = job->request.stream;
    std::string out;
    for (JobEvent& ev : job->take(0ms)) {
      if (stream) {
        stream_event(ev, out);
      } else {
        text += ev.text;
        for (auto& e : ev.logprobs) logprobs.push_back(std::move(e));
        if (ev.final) whole_response(ev);
      }
      if (ev.final) break;
    }
    if (!out.empty()) res->write(std::move(out));
    if (stream && done) res->end();
  }

  void stream_event(JobEvent& ev, std::string& out) {
    const CompletionRequest& r = job->request;
    if (!ev.error.empty()) {
      out += sse_event(error_json(500, fmt::format("generation failed: {}", ev.error)));
    } else if (!ev.final || !ev.text.empty() || first) {
      out += sse_event(stream_chunk(header, ev.text, ev.logprobs, r.logprobs, first, nullptr, text_offset));
      for (const auto& e : ev.logprobs) text_offset += e.token.size();
      first = false;
    }
    if (!ev.final) return;
    if (ev.error.empty()) {
      out += sse_event(stream_chunk(header, "", {}, false, false, &ev.finish_reason, text_offset));
      if (r.include_usage) out += sse_event(usage_chunk(header, ev.prompt_tokens, ev.completion_tokens));
    }
    out += "data: [DONE]\n\n";
    finish();
  }

  void whole_response(const JobEvent& ev) {
    finish();
    if (!ev.error.empty()) {
      metrics.request(endpoint_name, 500);
      return send_error(*res, 500, fmt::format("generation failed: {}", ev.error));
    }
    metrics.request(endpoint_name, 200);
    res->send(200, "application/json",
              dump_json(full_response(header, text, logprobs, job->request.logprobs, ev.finish_reason, ev.prompt_tokens,
                                      ev.completion_tokens)));
  }

  // The client went away: the engine stops the job after its current step.
  void gone() {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    job->cancel();
    if (!job->request.stream) metrics.request(endpoint_name, 499);  // nothing was sent
    finish();
  }
};

}  // namespace

struct OpenAiApi::Impl {
  const tok::Tokenizer& tokenizer;
  std::optional<ChatTemplate> chat_template;
  Metrics& metrics;
  std::string model_name;
  ServerLimits limits;
  std::atomic<Engine*> engine{nullptr};
  std::atomic<bool> draining{false}, closed{false};
  std::atomic<uint64_t> next_id{1};
  boost::asio::thread_pool parse_pool{kParseThreads};

  Impl(const tok::Tokenizer& t, std::optional<ChatTemplate> ct, Metrics& m, std::string name, ServerLimits l)
      : tokenizer(t), chat_template(std::move(ct)), metrics(m), model_name(std::move(name)), limits(l) {}

  // {status, reason} when completions cannot be served now.
  std::optional<std::pair<std::string, std::string>> unavailable() const {
    if (draining || closed) return std::pair<std::string, std::string>{"draining", "the server is shutting down"};
    const Engine* e = engine.load();
    if (!e) return std::pair<std::string, std::string>{"loading", "the model is loading"};
    if (std::string fault = e->fault(); !fault.empty())
      return std::pair<std::string, std::string>{"error", fmt::format("the device failed: {}", fault)};
    return std::nullopt;
  }

  void health(Responder& res) {
    const auto down = unavailable();
    if (!down) {
      res.send(200, "application/json", "{\"status\":\"ok\"}");
    } else {
      res.send(503, "application/json", dump_json(Json{{"status", down->first}, {"reason", down->second}}));
    }
    metrics.request("/health", down ? 503 : 200);
  }

  std::vector<int32_t> prompt_tokens(const CompletionRequest& r, const Engine& e) {
    std::vector<int32_t> ids;
    if (r.endpoint == Endpoint::ChatCompletions) {
      if (!chat_template) throw HttpError(400, "this model has no chat template: use /v1/completions", "messages");
      ChatOptions co;
      co.add_generation_prompt = true;
      co.extra = r.chat_template_kwargs;
      try {
        const std::string text = render_chat(*chat_template, r.messages, co);
        tok::EncodeOptions eo;
        eo.add_special_tokens = false;  // the template wrote any BOS itself (as `nextn generate --chat`)
        ids = tokenizer.encode(text, eo);
      } catch (const Error& err) {
        throw HttpError(400, fmt::format("the chat template refused the messages: {}", err.what()), "messages");
      }
    } else if (r.prompt_is_ids) {
      ids = r.prompt_ids;
      for (int32_t t : ids)
        if (t >= e.vocab())
          throw HttpError(400, fmt::format("token id {} is outside the vocabulary [0, {})", t, e.vocab()), "prompt");
    } else {
      try {
        ids = tokenizer.encode(r.prompt);  // as `nextn generate --prompt`
      } catch (const Error& err) {
        throw HttpError(400, err.what(), "prompt");
      }
    }
    if (ids.empty()) throw HttpError(400, "the prompt encodes to no tokens", "prompt");
    if (int(ids.size()) > limits.max_prompt_tokens)
      throw HttpError(400,
                      fmt::format("the prompt has {} tokens, this server's limit is {}", ids.size(),
                                  limits.max_prompt_tokens),
                      r.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt", "context_length_exceeded");
    return ids;
  }

  // On the parse pool: body -> job -> the engine's queue -> the answer.
  void completion(const std::string& body, const std::shared_ptr<Responder>& res, Endpoint endpoint) {
    const char* name = endpoint == Endpoint::ChatCompletions ? "/v1/chat/completions" : "/v1/completions";
    try {
      if (const auto down = unavailable()) throw HttpError(503, down->second);
      Engine& e = *engine.load();
      CompletionRequest r = parse_completion_request(body, endpoint, limits);
      if (!r.model.empty() && r.model != model_name)
        throw HttpError(404, fmt::format("the model '{}' does not exist (this server serves '{}')", r.model, model_name),
                        "model", "model_not_found");
      if (const auto refused = e.refuses(r)) throw HttpError(400, refused->second, refused->first);
      std::vector<int32_t> ids = prompt_tokens(r, e);
      auto job = std::make_shared<Job>(std::move(r), std::move(ids));
      if (!e.submit(job))
        throw HttpError(429, fmt::format("the queue is full ({} requests waiting): retry later", limits.queue_depth));
      ResponseHeader h{fmt::format("{}-{}", endpoint == Endpoint::ChatCompletions ? "chatcmpl" : "cmpl", next_id++),
                       unix_now(), model_name, endpoint};
      auto answer = std::make_shared<Answer>(job, res, std::move(h), metrics, name);
      if (job->request.stream) {
        res->start_stream(200, "text/event-stream");
        metrics.request(name, 200);
      }
      res->on_gone([answer] { answer->gone(); });
      job->set_listener([answer] { answer->pump(); });
    } catch (const HttpError& err) {
      send_error(*res, err.status(), err.what(), err.param(), err.code());
      metrics.request(name, err.status());
    } catch (const std::exception& err) {
      send_error(*res, 500, fmt::format("internal error: {}", err.what()));
      metrics.request(name, 500);
    }
  }
};

OpenAiApi::OpenAiApi(const tok::Tokenizer& tokenizer, std::optional<ChatTemplate> chat_template, Metrics& metrics,
                     std::string model_name, ServerLimits limits)
    : impl_(std::make_unique<Impl>(tokenizer, std::move(chat_template), metrics, std::move(model_name), limits)) {}

OpenAiApi::~OpenAiApi() { shutdown(); }

void OpenAiApi::set_engine(Engine* engine) { impl_->engine = engine; }

void OpenAiApi::begin_drain() { impl_->draining = true; }

void OpenAiApi::shutdown() {
  impl_->closed = true;
  impl_->parse_pool.join();
}

void OpenAiApi::handle(HttpRequest req, std::shared_ptr<Responder> res) {
  Impl& s = *impl_;
  const bool post = req.method == "POST", get = req.method == "GET";
  if (req.path == "/v1/completions" || req.path == "/v1/chat/completions") {
    const Endpoint endpoint = req.path == "/v1/completions" ? Endpoint::Completions : Endpoint::ChatCompletions;
    if (!post) return send_error(*res, 405, fmt::format("{} takes POST, not {}", req.path, req.method));
    if (s.closed) return send_error(*res, 503, "the server is shutting down");
    boost::asio::post(s.parse_pool, [&s, body = std::move(req.body), res, endpoint] { s.completion(body, res, endpoint); });
    return;
  }
  if (req.path == "/health" || req.path == "/metrics" || req.path == "/v1/models") {
    if (!get) return send_error(*res, 405, fmt::format("{} takes GET, not {}", req.path, req.method));
    if (req.path == "/health") return s.health(*res);
    if (req.path == "/metrics") return res->send(200, "text/plain; version=0.0.4", s.metrics.render());
    const Json model = {{"id", s.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "nextn"}};
    res->send(200, "application/json", dump_json({{"object", "list"}, {"data", Json::array({model})}}));
    s.metrics.request("/v1/models", 200);
    return;
  }
  send_error(*res, 404, fmt::format("no route {} {}", req.method, req.path));
  s.metrics.request("other", 404);
}

}  // namespace nextn::server
