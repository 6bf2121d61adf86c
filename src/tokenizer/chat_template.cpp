#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace nextn {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("{}: cannot open", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Deep JSON would make value conversion and printing recurse deeply.
void check_json_depth(const ojson& j, int depth, const std::string& what) {
  if (depth > 128) fail("{}: JSON nested deeper than 128 levels", what);
  if (j.is_array() || j.is_object())
    for (const auto& e : j) check_json_depth(e, depth + 1, what);
}

// transformers' SPECIAL_TOKENS_ATTRIBUTES, in its order.
const char* const kSpecialTokenNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

}  // namespace

ChatTemplate parse_chat_template(std::string source, std::string origin, ojson special_tokens, int max_depth) {
  ChatTemplate t;
  try {
    t.parsed = jinja::parse_template(source, max_depth);
  } catch (const Error& e) {
    fail("{}: chat template: {}", origin, e.what());
  }
  t.source = std::move(source);
  t.origin = std::move(origin);
  t.special_tokens = std::move(special_tokens);
  return t;
}

ChatTemplate load_chat_template(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const fs::path config_path = dir / "tokenizer_config.json";
  const fs::path jinja_path = dir / "chat_template.jinja";
  ojson config = ojson::object();
  std::error_code ec;
  if (fs::exists(config_path, ec)) {
    try {
      config = ojson::parse(read_file(config_path));
    } catch (const ojson::exception& e) {
      fail("{}: invalid JSON: {}", config_path.string(), e.what());
    }
    if (!config.is_object()) fail("{}: expected a JSON object", config_path.string());
  }
  ojson special = ojson::object();
  for (const char* name : kSpecialTokenNames) {
    auto it = config.find(name);
    if (it == config.end() || it->is_null()) continue;
    if (it->is_string()) {
      special[name] = *it;
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      special[name] = (*it)["content"];  // AddedToken dict
    } else {
      fail("{}: {}: expected a string or an AddedToken object with a string \"content\"", config_path.string(), name);
    }
  }
  if (fs::exists(jinja_path, ec)) return parse_chat_template(read_file(jinja_path), jinja_path.string(), special);
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    fail("{}: no chat template (neither chat_template.jinja nor \"chat_template\" in tokenizer_config.json)",
         model_dir);
  const std::string origin = config_path.string() + ": chat_template";
  if (it->is_string()) return parse_chat_template(it->get<std::string>(), origin, special);
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
          !entry["template"].is_string())
        fail("{}: each entry must be {{\"name\": string, \"template\": string}}", origin);
      if (entry["name"] == "default")
        return parse_chat_template(entry["template"].get<std::string>(), origin + "[default]", special);
    }
    fail("{}: no template named \"default\"", origin);
  }
  fail("{}: expected a string or a list of {{name, template}}", origin);
}

std::string render_chat(const ChatTemplate& tmpl, const ojson& messages, const ChatOptions& options) {
  using jinja::Value;
  if (!tmpl.parsed) fail("chat template: not loaded");
  if (!messages.is_array()) fail("chat messages: expected a JSON array of message objects");
  // transformers refuses before rendering.
  if (messages.empty()) fail("chat messages: Cannot apply chat template to an empty conversation. Provide at least one message.");
  check_json_depth(messages, 0, "chat messages");
  check_json_depth(options.tools, 0, "chat tools");
  check_json_depth(options.extra, 0, "chat template variables");
  jinja::ValueList chat;
  for (const auto& m : messages) {
    if (!m.is_object()) fail("chat messages: each message must be a JSON object");
    jinja::ValueDict msg;
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it.value().is_null()) msg.emplace_back(it.key(), Value::from_json(it.value()));
    // transformers: {"thinking": r, **message, "reasoning_content": r} for
    // the first non-null of reasoning_content, thinking, reasoning.
    const Value* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      for (const auto& kv : msg)
        if (kv.first == key) reasoning = &kv.second;
      if (reasoning) break;
    }
    if (reasoning) {
      const Value r = *reasoning;
      Value aliased = Value::from_dict({{"thinking", r}});
      for (auto& kv : msg) aliased.set(kv.first, kv.second);
      aliased.set("reasoning_content", r);
      chat.push_back(std::move(aliased));
    } else {
      chat.push_back(Value::from_dict(std::move(msg)));
    }
  }
  jinja::ValueDict context;
  context.emplace_back("messages", Value::from_list(std::move(chat)));
  context.emplace_back("tools", options.tools.is_null() ? Value::none() : Value::from_json(options.tools));
  context.emplace_back("documents", Value::none());
  context.emplace_back("add_generation_prompt", Value::from_bool(options.add_generation_prompt));
  auto put = [&](const std::string& k, Value v) {
    for (auto& kv : context)
      if (kv.first == k) {
        kv.second = std::move(v);
        return;
      }
    context.emplace_back(k, std::move(v));
  };
  for (auto it = tmpl.special_tokens.begin(); it != tmpl.special_tokens.end(); ++it)
    put(it.key(), Value::from_json(it.value()));
  if (!options.extra.is_null()) {
    if (!options.extra.is_object()) fail("chat template variables: expected a JSON object");
    for (auto it = options.extra.begin(); it != options.extra.end(); ++it) put(it.key(), Value::from_json(it.value()));
  }
  try {
    return jinja::render_template(*tmpl.parsed, context, options.limits);
  } catch (const Error& e) {
    fail("{}: chat template: {}", tmpl.origin, e.what());
  }
}

}  // namespace nextn
