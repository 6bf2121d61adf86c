// Shared by the fixture tests: the transformers-made checkpoints under
// tests/fixtures/<case>/ and their reference.json / reference.safetensors.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace nextn::test {

// Every tensor's bytes in a checkpoint directory, by name (shard boundaries ignored).
inline std::map<std::string, std::string> tensor_bytes(const std::string& dir) {
  std::map<std::string, std::string> m;
  const TensorStore s = TensorStore::open(dir);
  for (const auto& n : s.names()) {
    const TensorView& t = s.get(n);
    m[n] = std::string(reinterpret_cast<const char*>(t.data), t.nbytes);
  }
  return m;
}

struct Reference {
  std::vector<int32_t> prompt, greedy, sequence, drafts;
  std::vector<float> logits;      // [sequence.size()][vocab]
  std::vector<float> mtp_logits;  // [sequence.size()-1][vocab] (may be empty)
  int64_t vocab = 0;
};

// Every fixture directory with a config.json and a reference.json.
inline std::vector<std::string> fixture_dirs() {
  std::vector<std::string> out;
  const std::filesystem::path root(NEXTN_FIXTURES);
  if (!std::filesystem::exists(root)) return out;
  for (const auto& e : std::filesystem::directory_iterator(root))
    if (std::filesystem::exists(e.path() / "config.json") && std::filesystem::exists(e.path() / "reference.json"))
      out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

inline Reference load_reference(const std::string& dir) {
  std::ifstream f(dir + "/reference.json");
  const auto j = nlohmann::json::parse(f);
  Reference r;
  r.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
  r.greedy = j.at("greedy_tokens").get<std::vector<int32_t>>();
  r.sequence = j.at("sequence").get<std::vector<int32_t>>();
  r.drafts = j.at("drafts").get<std::vector<int32_t>>();
  const std::string lf = j.value("logits_file", std::string("reference.safetensors"));
  const auto st = TensorStore::open(dir + "/" + lf);
  const TensorView& lg = st.get("logits");
  r.vocab = lg.shape.at(1);
  r.logits.resize(size_t(lg.numel()));
  for (size_t i = 0; i < r.logits.size(); ++i) r.logits[i] = load_float(lg.dtype, lg.data, i);
  if (const TensorView* m = st.find("mtp_logits")) {
    r.mtp_logits.resize(size_t(m->numel()));
    for (size_t i = 0; i < r.mtp_logits.size(); ++i) r.mtp_logits[i] = load_float(m->dtype, m->data, i);
  }
  return r;
}

inline std::string fixture_name(const std::string& dir) { return std::filesystem::path(dir).filename().string(); }

}  // namespace nextn::test
