#include "server/request.h"

#include <cmath>
#include <limits>

#include "server/http_error.h"

namespace nextn::server {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& field, const std::string& why) {
  throw HttpError(400, fmt::format("'{}': {}", field, why), field);
}

// The value of `key`, or nullptr when absent or null (OpenAI treats both as "not given").
const Json* field(const Json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const Json& body, const char* key, double fallback, double lo, double hi) {
  const Json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number()) bad(key, "expected a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad(key, fmt::format("{} is outside [{}, {}]", x, lo, hi));
  return x;
}

int64_t integer(const Json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  const Json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number_integer()) bad(key, "expected an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(key, fmt::format("{} is outside [{}, {}]", v->get<uint64_t>(), lo, hi));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(key, fmt::format("{} is outside [{}, {}]", x, lo, hi));
  return x;
}

bool boolean(const Json& body, const char* key, bool fallback) {
  const Json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(key, "expected true or false");
  return v->get<bool>();
}

void parse_prompt(const Json& body, CompletionRequest& r) {
  const Json* p = field(body, "prompt");
  if (!p) bad("prompt", "required");
  auto ids = [&](const Json& arr) {
    if (arr.empty()) bad("prompt", "the token id list is empty");
    for (const Json& t : arr) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
        bad("prompt", "token ids must be non-negative integers");
      r.prompt_ids.push_back(int32_t(t.get<int64_t>()));
    }
    r.prompt_is_ids = true;
  };
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    ids(*p);
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt = (*p)[0].get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_array()) {
    ids((*p)[0]);
  } else if (p->is_array() && p->size() > 1) {
    bad("prompt", "only one prompt per request is supported");
  } else {
    bad("prompt", "expected a string, a list of one string, or a list of token ids");
  }
  if (!r.prompt_is_ids && r.prompt.empty()) bad("prompt", "the prompt is empty");
}

void parse_messages(const Json& body, CompletionRequest& r) {
  const Json* m = field(body, "messages");
  if (!m) bad("messages", "required");
  if (!m->is_array() || m->empty()) bad("messages", "expected a non-empty array of messages");
  r.messages = Json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const Json& msg = (*m)[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!msg.is_object()) bad(at, "expected an object");
    const Json* role = field(msg, "role");
    if (!role || !role->is_string()) bad(at + ".role", "required string");
    const std::string rs = role->get<std::string>();
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool" && rs != "developer")
      bad(at + ".role", fmt::format("'{}' is not one of system, developer, user, assistant, tool", rs));
    Json out = msg;
    if (const Json* c = field(msg, "content"); c && c->is_array()) {
      // Text parts are joined: the templates here take string content.
      std::string text;
      for (const Json& part : *c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          bad(at + ".content", "only text parts ({\"type\": \"text\", \"text\": ...}) are supported");
        text += part["text"].get<std::string>();
      }
      out["content"] = text;
    } else if (c && !c->is_string()) {
      bad(at + ".content", "expected a string or a list of text parts");
    }
    r.messages.push_back(std::move(out));
  }
  if (const Json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "expected an object");
    r.chat_template_kwargs = *kw;
  }
}

void parse_stop(const Json& body, CompletionRequest& r, const ServerLimits& limits) {
  const Json* s = field(body, "stop");
  if (!s) return;
  if (s->is_string()) {
    r.stop.push_back(s->get<std::string>());
  } else if (s->is_array()) {
    for (const Json& x : *s) {
      if (!x.is_string()) bad("stop", "expected a string or a list of strings");
      r.stop.push_back(x.get<std::string>());
    }
  } else {
    bad("stop", "expected a string or a list of strings");
  }
  if (int(r.stop.size()) > limits.max_stop_strings)
    bad("stop", fmt::format("{} stop strings, at most {}", r.stop.size(), limits.max_stop_strings));
  for (const auto& x : r.stop)
    if (x.empty()) bad("stop", "a stop string is empty");
}

void refuse_unsupported(const Json& body) {
  if (integer(body, "n", 1, 1, 1) != 1) bad("n", "only n = 1 is supported");
  if (integer(body, "best_of", 1, 1, 1) != 1) bad("best_of", "only best_of = 1 is supported");
  if (boolean(body, "echo", false)) bad("echo", "echo is not supported");
  if (field(body, "suffix")) bad("suffix", "suffix is not supported");
  if (number(body, "presence_penalty", 0, -2, 2) != 0) bad("presence_penalty", "penalties are not supported");
  if (number(body, "frequency_penalty", 0, -2, 2) != 0) bad("frequency_penalty", "penalties are not supported");
  if (const Json* lb = field(body, "logit_bias"); lb && !(lb->is_object() && lb->empty()))
    bad("logit_bias", "logit_bias is not supported");
  if (const Json* t = field(body, "tools"); t && !(t->is_array() && t->empty())) bad("tools", "tools are not supported");
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body_text, Endpoint endpoint, const ServerLimits& limits) {
  if (body_text.size() > limits.max_body_bytes)
    throw HttpError(413, fmt::format("the request body has {} bytes, the limit is {}", body_text.size(),
                                     limits.max_body_bytes));
  const Json body = Json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw HttpError(400, "the request body is not valid JSON");
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");

  CompletionRequest r;
  r.endpoint = endpoint;
  if (const Json* m = field(body, "model")) {
    if (!m->is_string()) bad("model", "expected a string");
    r.model = m->get<std::string>();
  }
  const bool chat = endpoint == Endpoint::ChatCompletions;
  if (chat)
    parse_messages(body, r);
  else
    parse_prompt(body, r);
  refuse_unsupported(body);

  const int64_t default_max = chat ? limits.max_tokens : std::min(16, limits.max_tokens);
  const char* max_key = chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  r.max_tokens = int(integer(body, max_key, default_max, 1, std::numeric_limits<int32_t>::max()));
  if (r.max_tokens > limits.max_tokens)
    bad(max_key, fmt::format("{} is above this server's limit of {}", r.max_tokens, limits.max_tokens));

  r.sampling.temperature = number(body, "temperature", 1.0, 0.0, 2.0);
  r.sampling.top_p = number(body, "top_p", 1.0, 0.0, 1.0);
  if (!(r.sampling.top_p > 0)) bad("top_p", "must be above 0");
  const int64_t top_k = integer(body, "top_k", 0, -1, std::numeric_limits<int32_t>::max());  // -1: off (vLLM)
  r.sampling.top_k = top_k < 0 ? 0 : int(top_k);
  r.sampling.min_p = number(body, "min_p", 0.0, 0.0, 1.0);
  if (field(body, "seed")) {
    r.sampling.seed = uint64_t(integer(body, "seed", 0, std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::max()));
    r.seed_given = true;
  }
  parse_stop(body, r, limits);
  r.stream = boolean(body, "stream", false);
  if (const Json* so = field(body, "stream_options")) {
    if (!r.stream) bad("stream_options", "only allowed with stream: true");
    if (!so->is_object()) bad("stream_options", "expected an object");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  if (chat) {
    r.logprobs = boolean(body, "logprobs", false);
    r.top_logprobs = int(integer(body, "top_logprobs", 0, 0, limits.max_top_logprobs));
    if (r.top_logprobs > 0 && !r.logprobs) bad("top_logprobs", "needs logprobs: true");
  } else if (field(body, "logprobs")) {
    r.logprobs = true;  // completions: an integer, the number of top logprobs (0..5)
    r.top_logprobs = int(integer(body, "logprobs", 0, 0, 5));
  }
  r.ignore_eos = boolean(body, "ignore_eos", false);
  return r;
}

}  // namespace nextn::server
