// Parsing and validating the bodies of POST /v1/completions and
// POST /v1/chat/completions. Every refusal is an HttpError (400, or 413 for
// a body over the limit) naming the field; nothing here touches the model,
// so it is fuzzed on its own (fuzz/fuzz_server_request.cpp). The fields
// are a whitelist: request_params() and message_fields() list every one,
// and docs/server.md's "Request parameters" tables are these tables.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sampling/sampling.h"

namespace nextn::server {

struct ServerLimits {
  size_t max_body_bytes = 1 << 20;
  int max_prompt_tokens = 2048;
  int max_tokens = 1024;  // the cap on a request's max_tokens (and its default for chat)
  int queue_depth = 16;   // requests waiting behind the running ones
  int max_batch = 8;      // requests generating at once (their forwards shared)
  int max_stop_strings = 4;
  int max_top_logprobs = 20;
  // Arrays and objects, the body's own object included. Refused while
  // parsing: copying a parsed value and converting it for the chat template
  // recurse, so a deeper body must never be built.
  int max_json_depth = 64;
  // Keys of any one object, also refused while parsing: each insert into an
  // ordered_json object searches its keys, so a huge object parses in quadratic time.
  int max_object_keys = 256;
};

enum class Endpoint { Completions, ChatCompletions };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;                      // empty: not given
  std::string prompt;                     // completions: the prompt text
  std::vector<int32_t> prompt_ids;        // completions: a prompt given as token ids
  bool prompt_is_ids = false;
  nlohmann::ordered_json messages;        // chat: the messages array
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();  // chat: extra template variables
  int max_tokens = 16;
  SamplingParams sampling;
  bool seed_given = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;
  bool ignore_eos = false;
};

// What nextn does with a field it accepts: uses it; keeps it as metadata that
// changes no output; accepts only the value that asks for nothing nextn lacks;
// or refuses it (a 400 naming it) whatever its value (null is always "not given").
enum class ParamStatus { Honored, Metadata, NoOpOnly, Refused };
const char* param_status_name(ParamStatus status);  // as the docs table writes it

enum class ParamEndpoints { Completions, Chat, Both };
const char* param_endpoints_name(ParamEndpoints endpoints);  // as the docs table writes it

struct RequestParam {
  const char* name;
  ParamEndpoints endpoints;  // the endpoints that know it; elsewhere it is unrecognized
  ParamStatus status;
  const char* note;  // markdown, the docs table's last column
};

// Every top-level field either endpoint knows; any other is a 400
// "Unrecognized request argument supplied" naming it.
const std::vector<RequestParam>& request_params();
// Every field a chat message may carry (chat only).
const std::vector<RequestParam>& message_fields();

// `body` is the raw request body. Throws HttpError.
CompletionRequest parse_completion_request(const std::string& body, Endpoint endpoint, const ServerLimits& limits);

}  // namespace nextn::server
