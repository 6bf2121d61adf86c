// Shared by the fixture tests: the transformers-made checkpoints under
// tests/fixtures/<case>/ and their reference.json / reference.safetensors.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/config.h"
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
  std::vector<float> mtp_logits;  // [mtp_rows.size()][vocab] (may be empty)
  std::vector<int> mtp_rows;      // the MTP entries mtp_logits holds (reference.json mtp_logits_rows; else all)
  std::vector<double> mtp_margin_std;  // [sequence.size()-1]: every entry's (top1 - top2) / population std
  int64_t vocab = 0;

  // Row i of mtp_logits is MTP entry mtp_rows[i].
  const float* mtp_row(size_t i) const { return &mtp_logits[i * size_t(vocab)]; }
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

// The fixtures of dense models: the CUDA backend refuses a mixture of
// experts (docs/moe.md), so its tests run on these.
inline std::vector<std::string> dense_fixture_dirs() {
  std::vector<std::string> out;
  for (const std::string& d : fixture_dirs())
    if (!load_qwen35_config(d).moe) out.push_back(d);
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
    const size_t rows = size_t(m->shape.at(0));
    if (j.contains("mtp_logits_rows")) {
      r.mtp_rows = j.at("mtp_logits_rows").get<std::vector<int>>();
      r.mtp_margin_std = j.at("mtp_margin_std").get<std::vector<double>>();
    } else {  // every entry stored: the margins from the rows
      for (size_t i = 0; i < rows; ++i) {
        r.mtp_rows.push_back(int(i));
        const float* x = r.mtp_row(i);
        double mean = 0, m2 = 0;
        for (int64_t v = 0; v < r.vocab; ++v) mean += x[v];
        mean /= double(r.vocab);
        for (int64_t v = 0; v < r.vocab; ++v) m2 += (x[v] - mean) * (x[v] - mean);
        const int64_t a = std::max_element(x, x + r.vocab) - x;
        float second = -INFINITY;
        for (int64_t v = 0; v < r.vocab; ++v)
          if (v != a) second = std::max(second, x[v]);
        r.mtp_margin_std.push_back((double(x[a]) - double(second)) / std::sqrt(m2 / double(r.vocab)));
      }
    }
    EXPECT_EQ(r.mtp_rows.size(), rows) << dir << ": mtp_logits_rows";
    EXPECT_EQ(r.mtp_margin_std.size(), r.sequence.size() - 1) << dir << ": mtp_margin_std";
  }
  return r;
}

inline std::string fixture_name(const std::string& dir) { return std::filesystem::path(dir).filename().string(); }

// A gtest parameter name for a fixture directory ("" when there are none:
// "none"): its name with every other character than letters and digits as '_'.
inline std::string fixture_param_name(const std::string& dir) {
  std::string n = dir.empty() ? "none" : fixture_name(dir);
  for (auto& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

}  // namespace nextn::test
