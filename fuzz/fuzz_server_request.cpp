// libFuzzer target: the request parser of nextn serve must accept a body or
// throw HttpError with a 4xx status; anything else (crash, UB, another
// exception, a 5xx) is a bug. The first byte picks the endpoint. The limits
// are the server's defaults, so bodies run up to the full 1 MiB
// (scripts/fuzz.sh passes -max_len=1048576 for this target): deep nesting
// needs the room.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/http_error.h"
#include "server/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto endpoint = data[0] & 1 ? nextn::server::Endpoint::ChatCompletions : nextn::server::Endpoint::Completions;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const nextn::server::ServerLimits limits;
  try {
    const auto r = nextn::server::parse_completion_request(body, endpoint, limits);
    // What the engine relies on.
    if (r.max_tokens < 1 || r.max_tokens > limits.max_tokens) std::abort();
    if (int(r.stop.size()) > limits.max_stop_strings) std::abort();
    if (r.top_logprobs < 0 || r.top_logprobs > limits.max_top_logprobs) std::abort();
    if (!(r.sampling.temperature >= 0 && r.sampling.temperature <= 2)) std::abort();
  } catch (const nextn::server::HttpError& e) {
    if (e.status() < 400 || e.status() >= 500) std::abort();
  }
  return 0;
}
