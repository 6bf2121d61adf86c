// The transformers-made Gemma 4 fixtures under tests/fixtures/gemma4/<case>/
// (scripts/fixtures/make_gemma4_fixtures.py): target/, assistant/,
// reference.json and reference.safetensors.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/gemma4_config.h"
#include "io/safetensors.h"
#include "model/runtime.h"

namespace nextn::test {

struct Gemma4Prefix {
  int prefix_len = 0;
  int32_t bonus = 0;
  std::vector<int32_t> drafts;
};

struct Gemma4Reference {
  std::string dir;
  std::vector<int32_t> prompt, greedy, sequence, long_greedy;
  std::vector<float> logits;       // [sequence.size()][vocab]
  std::vector<float> long_logits;  // [long_rows][vocab]: the rows that chose the last long_rows long tokens
  int64_t vocab = 0, long_rows = 0;
  std::vector<Gemma4Prefix> drafts;
  // Fixtures with a tokenizer beside the weights: a text prompt, plain and as one chat turn.
  std::string prompt_text, text_greedy_text, chat_greedy_text;
  std::vector<int32_t> text_greedy, chat_greedy;
  std::string target() const { return dir + "/target"; }
  std::string assistant() const { return dir + "/assistant"; }
};

inline std::vector<std::string> gemma4_fixture_dirs() {
  std::vector<std::string> out;
  const std::filesystem::path root = std::filesystem::path(NEXTN_FIXTURES) / "gemma4";
  if (!std::filesystem::exists(root)) return out;
  for (const auto& e : std::filesystem::directory_iterator(root))
    if (std::filesystem::exists(e.path() / "reference.json")) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The fixtures whose target has (moe) or has not MoE blocks: the CUDA Gemma 4
// runtime refuses MoE (docs/moe.md), so its tests run on the dense ones.
inline std::vector<std::string> gemma4_fixture_dirs(bool moe) {
  std::vector<std::string> out;
  for (const std::string& d : gemma4_fixture_dirs())
    if (load_gemma4_config(d + "/target").moe == moe) out.push_back(d);
  return out;
}

inline std::vector<float> read_all_floats(const TensorView& t) {
  std::vector<float> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_float(t.dtype, t.data, i);
  return v;
}

inline Gemma4Reference load_gemma4_reference(const std::string& dir) {
  std::ifstream f(dir + "/reference.json");
  const auto j = nlohmann::json::parse(f);
  Gemma4Reference r;
  r.dir = dir;
  r.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
  r.greedy = j.at("greedy_tokens").get<std::vector<int32_t>>();
  r.sequence = j.at("sequence").get<std::vector<int32_t>>();
  r.long_greedy = j.at("long_greedy_tokens").get<std::vector<int32_t>>();
  for (const auto& d : j.at("drafts_from_prefix"))
    r.drafts.push_back(
        {d.at("prefix_len").get<int>(), d.at("bonus").get<int32_t>(), d.at("drafts").get<std::vector<int32_t>>()});
  if (j.contains("prompt_text")) {
    r.prompt_text = j.at("prompt_text").get<std::string>();
    r.text_greedy = j.at("text_greedy_tokens").get<std::vector<int32_t>>();
    r.chat_greedy = j.at("chat_greedy_tokens").get<std::vector<int32_t>>();
    r.text_greedy_text = j.at("text_greedy_text").get<std::string>();
    r.chat_greedy_text = j.at("chat_greedy_text").get<std::string>();
  }
  const auto st = TensorStore::open(dir + "/reference.safetensors");
  r.logits = read_all_floats(st.get("logits"));
  r.vocab = st.get("logits").shape.at(1);
  r.long_logits = read_all_floats(st.get("long_logits"));
  r.long_rows = st.get("long_logits").shape.at(0);
  return r;
}

// max |got - ref| / max |ref| over one row.
inline double relative_row_error(const float* got, const float* ref, int64_t n) {
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, double(std::fabs(got[i] - ref[i])));
    max_ref = std::max(max_ref, double(std::fabs(ref[i])));
  }
  return max_diff / max_ref;
}

inline std::string gemma4_case_name(const std::string& dir) {
  std::string s = std::filesystem::path(dir).filename().string();
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

// Greedy decode of n tokens after `prompt`, one token per forward (the head's
// batched argmax of one row).
inline std::vector<int32_t> decode_greedy(ModelRuntime& rt, std::span<const int32_t> prompt, int n) {
  rt.target_forward(prompt);
  int32_t tok = 0;
  rt.head_argmax(int(prompt.size()) - 1, 1, &tok);
  std::vector<int32_t> out{tok};
  while (int(out.size()) < n) {
    rt.target_forward(std::span<const int32_t>(&out.back(), 1));
    rt.head_argmax(0, 1, &tok);
    out.push_back(tok);
  }
  return out;
}

// The CUDA bf16 mode's tensor-core matmul takes widths that are multiples of 32.
inline bool cuda_bf16_fits(const Gemma4TextConfig& c) {
  bool ok = c.hidden_size % 32 == 0 && c.intermediate_size % 32 == 0;
  for (const auto& s : c.layers) ok = ok && (c.num_attention_heads * s.head_dim) % 32 == 0;
  return ok;
}

}  // namespace nextn::test
