#include "server/openai_format.h"

namespace nextn::server {
namespace {

using Json = nlohmann::ordered_json;

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

Json logprobs_json(const ResponseHeader& h, const std::vector<LogprobEntry>& entries, size_t text_offset) {
  if (h.endpoint == Endpoint::ChatCompletions) {
    Json content = Json::array();
    for (const auto& e : entries) {
      Json top = Json::array();
      for (const auto& [tok, lp] : e.top) top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", bytes_of(tok)}});
      content.push_back({{"token", e.token}, {"logprob", e.logprob}, {"bytes", bytes_of(e.token)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(), offsets = Json::array();
  for (const auto& e : entries) {
    tokens.push_back(e.token);
    token_logprobs.push_back(e.logprob);
    Json top = Json::object();
    for (const auto& [tok, lp] : e.top) top[tok] = lp;
    top_logprobs.push_back(top);
    offsets.push_back(text_offset);
    text_offset += e.token.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", offsets}};
}

Json header(const ResponseHeader& h, const char* object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

}  // namespace

Json usage_json(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

Json full_response(const ResponseHeader& h, const std::string& text, const std::vector<LogprobEntry>& logprobs,
                   bool want_logprobs, const std::string& finish_reason, int prompt_tokens, int completion_tokens) {
  const bool chat = h.endpoint == Endpoint::ChatCompletions;
  Json j = header(h, chat ? "chat.completion" : "text_completion");
  Json choice = {{"index", 0}};
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  choice["logprobs"] = want_logprobs ? logprobs_json(h, logprobs, 0) : Json(nullptr);
  choice["finish_reason"] = finish_reason;
  j["choices"] = Json::array({choice});
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  return j;
}

Json stream_chunk(const ResponseHeader& h, const std::string& text, const std::vector<LogprobEntry>& logprobs,
                  bool want_logprobs, bool first, const std::string* finish_reason, size_t text_offset) {
  const bool chat = h.endpoint == Endpoint::ChatCompletions;
  Json j = header(h, chat ? "chat.completion.chunk" : "text_completion");
  Json choice = {{"index", 0}};
  if (chat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!finish_reason || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = want_logprobs && !logprobs.empty() ? logprobs_json(h, logprobs, text_offset) : Json(nullptr);
  choice["finish_reason"] = finish_reason ? Json(*finish_reason) : Json(nullptr);
  j["choices"] = Json::array({choice});
  return j;
}

Json usage_chunk(const ResponseHeader& h, int prompt_tokens, int completion_tokens) {
  Json j = header(h, h.endpoint == Endpoint::ChatCompletions ? "chat.completion.chunk" : "text_completion");
  j["choices"] = Json::array();
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  return j;
}

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string sse_event(const Json& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace nextn::server
