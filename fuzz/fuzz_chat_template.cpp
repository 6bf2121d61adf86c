// libFuzzer target: a chat template (the input) is parsed and rendered on a
// fixed conversation with tools. It must render or throw nextn::Error;
// crashes, hangs, UB or other exceptions are bugs. Small limits keep every
// input fast (steps, output bytes, nesting).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace {

const nlohmann::ordered_json& messages() {
  static const auto m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Zürich? 👋"},
    {"role": "assistant", "content": "<think>\nneed tool\n</think>\n\nChecking.", "reasoning_content": "need tool",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21.5"},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}, {"type": "image"}]}
  ])");
  return m;
}

const nlohmann::ordered_json& tools() {
  static const auto t = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}
  ])");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string src(reinterpret_cast<const char*>(data), size);
  try {
    nextn::ChatOptions opt;
    opt.add_generation_prompt = true;
    opt.tools = tools();
    opt.extra = {{"enable_thinking", false}};
    opt.limits.max_steps = 20000;
    opt.limits.max_output_bytes = 1 << 20;
    opt.limits.max_depth = 64;
    const nextn::ChatTemplate t =
        nextn::parse_chat_template(src, "fuzz", {{"bos_token", "<s>"}, {"eos_token", "</s>"}}, opt.limits.max_depth);
    nextn::render_chat(t, messages(), opt);
  } catch (const nextn::Error&) {
  }
  return 0;
}
