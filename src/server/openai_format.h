// The OpenAI response shapes: text_completion / chat.completion objects and
// their streaming chunks (server-sent events), with logprobs in the
// completions style (tokens, token_logprobs, top_logprobs, text_offset) or
// the chat style (content: [{token, logprob, bytes, top_logprobs}]).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/job.h"
#include "server/request.h"

namespace nextn::server {

struct ResponseHeader {
  std::string id;  // cmpl-... or chatcmpl-...
  int64_t created = 0;
  std::string model;
  Endpoint endpoint = Endpoint::Completions;
};

nlohmann::ordered_json usage_json(int prompt_tokens, int completion_tokens);

// The whole (non-streamed) response. `text_offset0` is where the completion
// text starts in the completions logprobs' text_offset (0: OpenAI counts from
// the prompt with echo; without echo vLLM counts from the completion).
nlohmann::ordered_json full_response(const ResponseHeader& h, const std::string& text,
                                     const std::vector<LogprobEntry>& logprobs, bool want_logprobs,
                                     const std::string& finish_reason, int prompt_tokens, int completion_tokens);

// One streamed chunk: a text delta (chat: `first` adds the assistant role),
// or the last one with finish_reason set.
nlohmann::ordered_json stream_chunk(const ResponseHeader& h, const std::string& text,
                                    const std::vector<LogprobEntry>& logprobs, bool want_logprobs, bool first,
                                    const std::string* finish_reason, size_t text_offset);
// stream_options.include_usage: the chunk after the last, with no choices.
nlohmann::ordered_json usage_chunk(const ResponseHeader& h, int prompt_tokens, int completion_tokens);

// "data: <json>\n\n"; invalid UTF-8 is replaced, never thrown on.
std::string sse_event(const nlohmann::ordered_json& j);
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace nextn::server
