// A checkpoint's chat template: loaded from the model directory
// (chat_template.jinja, or `chat_template` in tokenizer_config.json) and
// rendered the way transformers' apply_chat_template(..., tokenize=False)
// renders it, by the focused Jinja interpreter in jinja_*.cpp.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "tokenizer/jinja_eval.h"

namespace nextn {

struct ChatTemplate {
  std::string source;  // template text
  std::string origin;  // where it came from, for error messages
  // Named special tokens as strings (bos_token, eos_token, unk_token, ...):
  // transformers passes each one that is set to the template.
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  std::shared_ptr<const jinja::Template> parsed;
};

struct ChatOptions {
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;  // null: no tools; else a JSON array of tool schemas
  // Extra template variables, e.g. {"enable_thinking": false}; they override
  // special tokens of the same name, as in transformers.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  jinja::Limits limits;
};

// Parses template text; syntax errors throw nextn::Error naming `origin` and the line.
ChatTemplate parse_chat_template(std::string source, std::string origin,
                                 nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object(),
                                 int max_depth = 256);

// chat_template.jinja if present, else tokenizer_config.json's chat_template
// (a string, or a list of {name, template} of which "default" is used).
// Special tokens come from tokenizer_config.json (strings or AddedToken dicts).
ChatTemplate load_chat_template(const std::string& model_dir);

// messages: JSON array of message objects ({"role":..., "content":...}).
// As apply_chat_template does, keys whose value is null are dropped and a
// message's reasoning (reasoning_content / thinking / reasoning) is copied
// under both `thinking` and `reasoning_content`.
std::string render_chat(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages, const ChatOptions& options);

}  // namespace nextn
