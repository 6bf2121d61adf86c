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

// Checks of the fields that are not parsed into CompletionRequest: the value
// must have the metadata's type, or be the one value that asks for nothing.
using Check = void (*)(const Json& value, const std::string& name);

void a_string(const Json& v, const std::string& name) {
  if (!v.is_string()) bad(name, "expected a string");
}
void a_boolean(const Json& v, const std::string& name) {
  if (!v.is_boolean()) bad(name, "expected true or false");
}
void a_list(const Json& v, const std::string& name) {
  if (!v.is_array()) bad(name, "expected a list");
}
void string_map(const Json& v, const std::string& name) {
  if (!v.is_object()) bad(name, "expected an object of strings");
  for (const auto& [k, x] : v.items())
    if (!x.is_string()) bad(name, fmt::format("the value of '{}' is not a string", k));
}
void only_one(const Json& v, const std::string& name) {
  if (!v.is_number_integer()) bad(name, "expected an integer");
  if (v != 1) bad(name, "only 1 is supported: one choice per request");
}
void only_false(const Json& v, const std::string& name) {
  a_boolean(v, name);
  if (v.get<bool>()) bad(name, name == "store" ? "nothing is stored: only false" : "only false is supported");
}
void only_zero_penalty(const Json& v, const std::string& name) {
  if (!v.is_number()) bad(name, "expected a number");
  const double x = v.get<double>();
  if (!(x >= -2 && x <= 2)) bad(name, fmt::format("{} is outside [-2, 2]", x));
  if (x != 0) bad(name, "penalties are not supported: only 0");
}
void only_empty_map(const Json& v, const std::string& name) {
  if (!v.is_object()) bad(name, "expected an object");
  if (!v.empty()) bad(name, "logit_bias is not supported: only {}");
}
void only_text_format(const Json& v, const std::string& name) {
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string()) bad(name, "expected {\"type\": ...}");
  const std::string type = v["type"].get<std::string>();
  if (type == "json_object" || type == "json_schema") bad(name, "constrained decoding is not supported");
  if (type != "text") bad(name, fmt::format("unknown type '{}'; only {{\"type\": \"text\"}} is supported", type));
  if (v.size() != 1) bad(name, "{\"type\": \"text\"} takes no other keys");
}
void only_no_tools(const Json& v, const std::string& name) {
  if (!v.is_array()) bad(name, "expected a list");
  if (!v.empty()) bad(name, "tool calling is not supported: only []");
}
void only_no_tool_choice(const Json& v, const std::string& name) {
  if (!(v == "none" || v == "auto"))
    bad(name, "tool calling is not supported: only \"none\" or \"auto\" (with no tools)");
}
void only_text_modality(const Json& v, const std::string& name) {
  if (v != Json::array({"text"})) bad(name, "only [\"text\"] is supported");
}

struct ParamRule {
  RequestParam param;
  Check check;  // nullptr: honored (parsed below) or refused (the note is the reason)
};

constexpr auto kBoth = ParamEndpoints::Both, kCompletionsOnly = ParamEndpoints::Completions,
               kChatOnly = ParamEndpoints::Chat;
constexpr auto kHonored = ParamStatus::Honored, kMetadata = ParamStatus::Metadata, kNoOp = ParamStatus::NoOpOnly,
               kRefused = ParamStatus::Refused;

// The OpenAI reference's fields of both endpoints, and the vLLM extensions
// nextn implements (top_k, min_p, ignore_eos, chat_template_kwargs).
const ParamRule kParams[] = {
    {{"model", kBoth, kHonored, "optional; another name than the served model's is a 404 `model_not_found`"}, nullptr},
    {{"prompt", kCompletionsOnly, kHonored,
      "required: a string, a list of one string, or token ids (or a list of one such list)"},
     nullptr},
    {{"messages", kChatOnly, kHonored, "required: a non-empty list of messages (fields below)"}, nullptr},
    {{"max_tokens", kBoth, kHonored, "1 to `--max-tokens`; default 16 (completions) or `--max-tokens` (chat)"},
     nullptr},
    {{"max_completion_tokens", kChatOnly, kHonored, "as `max_tokens`, and wins over it"}, nullptr},
    {{"temperature", kBoth, kHonored, "0..2, default 1; 0 is greedy"}, nullptr},
    {{"top_p", kBoth, kHonored, "(0, 1], default 1"}, nullptr},
    {{"top_k", kBoth, kHonored, "vLLM's: -1 or 0 is off"}, nullptr},
    {{"min_p", kBoth, kHonored, "vLLM's: 0..1"}, nullptr},
    {{"seed", kBoth, kHonored, "a 64-bit integer; absent: a random seed"}, nullptr},
    {{"stop", kBoth, kHonored, "a string or a list of up to 4 non-empty strings"}, nullptr},
    {{"stream", kBoth, kHonored, "server-sent events"}, nullptr},
    {{"stream_options", kBoth, kHonored,
      "with `stream: true` only; `include_usage` honored, `include_obfuscation` false only (nothing is obfuscated), "
      "other keys refused"},
     nullptr},
    {{"logprobs", kBoth, kHonored, "completions: an integer 0..5, the top tokens per position; chat: a boolean"},
     nullptr},
    {{"top_logprobs", kChatOnly, kHonored, "0..20, needs `logprobs: true`"}, nullptr},
    {{"ignore_eos", kBoth, kHonored, "vLLM's: generate past the EOS token"}, nullptr},
    {{"chat_template_kwargs", kChatOnly, kHonored,
      "vLLM's: an object of extra template variables, e.g. `{\"enable_thinking\": false}`"},
     nullptr},
    {{"user", kBoth, kMetadata, "a string"}, a_string},
    {{"metadata", kChatOnly, kMetadata, "an object of strings"}, string_map},
    {{"service_tier", kChatOnly, kMetadata, "a string; there is one tier"}, a_string},
    {{"prompt_cache_key", kChatOnly, kMetadata, "a string; nextn keeps no prompt cache"}, a_string},
    {{"safety_identifier", kChatOnly, kMetadata, "a string"}, a_string},
    {{"store", kChatOnly, kNoOp, "`false` only: nothing is stored"}, only_false},
    {{"n", kBoth, kNoOp, "`1` only: one choice per request"}, only_one},
    {{"best_of", kCompletionsOnly, kNoOp, "`1` only"}, only_one},
    {{"echo", kCompletionsOnly, kNoOp, "`false` only"}, only_false},
    {{"presence_penalty", kBoth, kNoOp, "`0` only: penalties are not implemented"}, only_zero_penalty},
    {{"frequency_penalty", kBoth, kNoOp, "`0` only: penalties are not implemented"}, only_zero_penalty},
    {{"logit_bias", kBoth, kNoOp, "`{}` only"}, only_empty_map},
    {{"response_format", kChatOnly, kNoOp,
      "`{\"type\": \"text\"}` only; `json_object` and `json_schema` are refused: constrained decoding is not "
      "supported"},
     only_text_format},
    {{"tools", kChatOnly, kNoOp, "`[]` only: tool calling is not supported"}, only_no_tools},
    {{"tool_choice", kChatOnly, kNoOp, "`\"none\"` or `\"auto\"` only (there are no tools)"}, only_no_tool_choice},
    {{"parallel_tool_calls", kChatOnly, kNoOp, "a boolean; there are no tools"}, a_boolean},
    {{"modalities", kChatOnly, kNoOp, "`[\"text\"]` only"}, only_text_modality},
    {{"suffix", kCompletionsOnly, kRefused, "suffix (fill-in-the-middle) is not supported"}, nullptr},
    {{"functions", kChatOnly, kRefused, "function calling is not supported"}, nullptr},
    {{"function_call", kChatOnly, kRefused, "function calling is not supported"}, nullptr},
    {{"audio", kChatOnly, kRefused, "audio output is not supported"}, nullptr},
    {{"prediction", kChatOnly, kRefused, "predicted outputs are not supported"}, nullptr},
    {{"reasoning_effort", kChatOnly, kRefused,
      "not supported; Qwen3.5 thinking is switched with `chat_template_kwargs` `{\"enable_thinking\": false}`"},
     nullptr},
    {{"verbosity", kChatOnly, kRefused, "not supported"}, nullptr},
    {{"web_search_options", kChatOnly, kRefused, "web search is not supported"}, nullptr},
};

// Message fields are passed to the chat template as they are (content parts
// joined first); the shipped templates (Qwen3.5's, Gemma 4's) read role,
// content, tool_calls and reasoning_content / reasoning.
const ParamRule kMessageFields[] = {
    {{"role", kChatOnly, kHonored, "required: system, developer, user, assistant or tool"}, nullptr},
    {{"content", kChatOnly, kHonored,
      "a string or a list of text parts `{\"type\": \"text\", \"text\": ...}` (joined); other part types are refused"},
     nullptr},
    {{"tool_calls", kChatOnly, kHonored,
      "a list, rendered by the template (an assistant turn of an earlier conversation)"},
     a_list},
    {{"reasoning_content", kChatOnly, kHonored, "a string, rendered by templates that show reasoning"}, a_string},
    {{"reasoning", kChatOnly, kHonored, "a string, as `reasoning_content`"}, a_string},
    {{"name", kChatOnly, kMetadata, "a string; passed to the template, which the shipped ones ignore"}, a_string},
    {{"tool_call_id", kChatOnly, kMetadata, "a string; passed to the template, which the shipped ones ignore"},
     a_string},
    {{"refusal", kChatOnly, kMetadata, "a string; passed to the template, which the shipped ones ignore"}, a_string},
};

template <size_t N>
const ParamRule* find_rule(const ParamRule (&rules)[N], const std::string& name) {
  for (const ParamRule& r : rules)
    if (name == r.param.name) return &r;
  return nullptr;
}

// Every key must be in the table for this endpoint; refused fields and the
// values of the unparsed ones are settled here, before anything is parsed.
void check_known_fields(const Json& body, Endpoint endpoint) {
  const bool chat = endpoint == Endpoint::ChatCompletions;
  for (const auto& [key, value] : body.items()) {
    const ParamRule* rule = find_rule(kParams, key);
    if (!rule || !(rule->param.endpoints == ParamEndpoints::Both ||
                   rule->param.endpoints == (chat ? ParamEndpoints::Chat : ParamEndpoints::Completions))) {
      const std::string other = !rule ? "" : chat ? " (a /v1/completions field)" : " (a /v1/chat/completions field)";
      throw HttpError(400, fmt::format("Unrecognized request argument supplied: {}{}", key, other), key);
    }
    if (value.is_null()) continue;
    if (rule->param.status == ParamStatus::Refused) bad(key, rule->param.note);
    if (rule->check) rule->check(value, key);
  }
}

std::vector<RequestParam> params_of(const auto& rules) {
  std::vector<RequestParam> out;
  for (const ParamRule& r : rules) out.push_back(r.param);
  return out;
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
    for (const auto& [key, value] : msg.items()) {
      const ParamRule* rule = find_rule(kMessageFields, key);
      if (!rule) bad(at + "." + key, "unrecognized message field");
      if (!value.is_null() && rule->check) rule->check(value, at + "." + key);
    }
    Json out = msg;
    if (const Json* c = field(msg, "content"); c && c->is_array()) {
      // Text parts are joined: the templates here take string content.
      std::string text;
      for (size_t k = 0; k < c->size(); ++k) {
        const Json& part = (*c)[k];
        const std::string part_at = fmt::format("{}.content[{}]", at, k);
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          bad(part_at, "expected a part {\"type\": \"text\", \"text\": ...}");
        if (part["type"] != "text")
          bad(part_at, fmt::format("'{}' parts are not supported: only text parts", part["type"].get<std::string>()));
        if (!part.contains("text") || !part["text"].is_string()) bad(part_at + ".text", "required string");
        if (part.size() != 2) bad(part_at, "a text part takes only \"type\" and \"text\"");
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

// nlohmann's own DOM builder (what Json::parse uses), refusing a body that
// nests too deeply or has an object with too many keys as it is read:
// nlohmann parses iteratively, so a container is refused before anything
// deeper exists; the exception abandons the parse and the partial value is
// freed by its (iterative) destructor. Not Json::parse's callback: after
// every object its builder scans the parent for discarded values, so 1 MiB
// of [{}, {}, ...] took 215 s. The key limit matters because ordered_json's
// objects are vectors searched on every insert: one 1 MiB object of
// 100,000 keys took 50 s.
class BoundedDomBuilder {
 public:
  BoundedDomBuilder(Json& result, const ServerLimits& limits)
      : dom_(result, /*allow_exceptions=*/false), limits_(limits) {}
  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(Json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(Json::number_float_t v, const Json::string_t& text) { return dom_.number_float(v, text); }
  bool string(Json::string_t& v) { return dom_.string(v); }
  bool binary(Json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    open_container();
    keys_per_object_.push_back(0);
    return dom_.start_object(n);
  }
  bool key(Json::string_t& k) {
    if (depth_ == 1) top_key_ = k;
    if (++keys_per_object_.back() > limits_.max_object_keys)
      throw HttpError(400, fmt::format("an object in the request body has more than {} keys", limits_.max_object_keys),
                      top_key_);
    return dom_.key(k);
  }
  bool end_object() {
    keys_per_object_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    open_container();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& e) {
    return dom_.parse_error(position, token, e);
  }
  bool is_errored() const { return dom_.is_errored(); }

 private:
  void open_container() {
    if (++depth_ > limits_.max_json_depth)
      throw HttpError(400, fmt::format("the request body nests deeper than {} levels", limits_.max_json_depth),
                      top_key_);
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  const ServerLimits& limits_;
  int depth_ = 0;                     // open arrays and objects
  std::vector<int> keys_per_object_;  // per open object, innermost last
  std::string top_key_;               // the body field being read, for `param`
};

// The body, or a discarded value when it is not JSON. Throws HttpError past the limits.
Json parse_bounded(const std::string& text, const ServerLimits& limits) {
  Json body;
  BoundedDomBuilder builder(body, limits);
  if (!Json::sax_parse(text, &builder, Json::input_format_t::json, /*strict=*/true) || builder.is_errored())
    return Json(Json::value_t::discarded);
  return body;
}

}  // namespace

const char* param_status_name(ParamStatus status) {
  switch (status) {
    case ParamStatus::Honored:
      return "honored";
    case ParamStatus::Metadata:
      return "metadata";
    case ParamStatus::NoOpOnly:
      return "no-op value only";
    case ParamStatus::Refused:
      return "refused";
  }
  return "?";
}

const char* param_endpoints_name(ParamEndpoints endpoints) {
  switch (endpoints) {
    case ParamEndpoints::Completions:
      return "completions";
    case ParamEndpoints::Chat:
      return "chat";
    case ParamEndpoints::Both:
      return "both";
  }
  return "?";
}

const std::vector<RequestParam>& request_params() {
  static const std::vector<RequestParam> params = params_of(kParams);
  return params;
}

const std::vector<RequestParam>& message_fields() {
  static const std::vector<RequestParam> fields = params_of(kMessageFields);
  return fields;
}

CompletionRequest parse_completion_request(const std::string& body_text, Endpoint endpoint,
                                           const ServerLimits& limits) {
  if (body_text.size() > limits.max_body_bytes)
    throw HttpError(
        413, fmt::format("the request body has {} bytes, the limit is {}", body_text.size(), limits.max_body_bytes));
  const Json body = parse_bounded(body_text, limits);
  if (body.is_discarded()) throw HttpError(400, "the request body is not valid JSON");
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");
  check_known_fields(body, endpoint);

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
    r.sampling.seed =
        uint64_t(integer(body, "seed", 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    r.seed_given = true;
  }
  parse_stop(body, r, limits);
  r.stream = boolean(body, "stream", false);
  if (const Json* so = field(body, "stream_options")) {
    if (!r.stream) bad("stream_options", "only allowed with stream: true");
    if (!so->is_object()) bad("stream_options", "expected an object");
    for (const auto& [key, value] : so->items()) {
      if (key == "include_usage") {
        if (!value.is_boolean() && !value.is_null()) bad("stream_options.include_usage", "expected true or false");
        continue;
      }
      // OpenAI pads streamed chunks with an "obfuscation" field on request; nextn never does.
      if (key == "include_obfuscation" && value.is_boolean() && !value.get<bool>()) continue;
      bad("stream_options." + key, key == "include_obfuscation" ? "only false is supported" : "unknown option");
    }
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
