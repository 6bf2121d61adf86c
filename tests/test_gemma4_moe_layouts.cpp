// Gemma 4 MoE expert layouts (docs/moe.md): per expert bit for bit the
// stacked layout transformers writes; mlx-lm's experts.switch_glu layout at
// q4 and q8 bit for bit its dequantized copy, with speculative == greedy
// with the fixture's assistant; `nextn quantize` of a MoE target; bad expert
// tensors named in one error line. On the gemma4-moe-* fixtures.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/gemma4.h"
#include "cli_util.h"
#include "core/error.h"
#include "engine/generate.h"
#include "gemma4_fixture_util.h"
#include "io/checkpoint.h"
#include "io/gemma4_checkpoint.h"
#include "io/moe_experts.h"
#include "io/quantize.h"
#include "tensor_map_util.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::StoredTensor;
using test::TensorMap;

std::vector<std::string> moe_dirs() { return test::gemma4_fixture_dirs(/*moe=*/true); }

std::unique_ptr<ModelRuntime> cpu_runtime(const Gemma4Checkpoint& ck, int cap) {
  return make_cpu_gemma4_runtime(ck, cap, CpuRuntimeOptions{.threads = 2, .min_chunk_work = 1});
}

RuntimeFactory cpu_factory(const Gemma4Checkpoint& ck) {
  return [&ck](int cap) { return cpu_runtime(ck, cap); };
}

// Every teacher-forced logit row of `seq`.
std::vector<float> all_logits(const Gemma4Checkpoint& ck, const std::vector<int32_t>& seq) {
  auto rt = cpu_runtime(ck, int(seq.size()) + 4);
  rt->target_forward(seq);
  const size_t V = size_t(ck.config().vocab_size);
  std::vector<float> out(seq.size() * V);
  for (size_t p = 0; p < seq.size(); ++p) rt->head_logits(int(p), &out[p * V]);
  return out;
}

// The target's config.json beside `tensors` in `dst` (config edited by `edit`).
template <typename Edit>
void write_target(const std::string& src, const std::string& dst, const TensorMap& tensors, Edit edit) {
  fs::create_directories(dst);
  std::ifstream cf(src + "/config.json");
  json cfg = json::parse(cf);
  edit(cfg);
  std::ofstream(fs::path(dst) / "config.json") << cfg.dump(2);
  test::write_tensors(dst + "/model.safetensors", tensors);
}

void write_target(const std::string& src, const std::string& dst, const TensorMap& tensors) {
  write_target(src, dst, tensors, [](json&) {});
}

// Slice e of a stored [E, rows, cols] tensor, rows [row0, row0 + rows), as a [rows, cols] tensor.
StoredTensor expert_slice(const StoredTensor& t, int e, int64_t row0, int64_t rows) {
  const int64_t R = t.shape[1], cols = t.shape[2];
  const size_t elt = dtype_size(t.dtype);
  return {t.dtype, {rows, cols}, t.bytes.substr((size_t(e) * R + size_t(row0)) * cols * elt, size_t(rows * cols) * elt)};
}

// The stacked experts of every layer rewritten one tensor per expert and projection.
TensorMap per_expert(TensorMap m) {
  std::vector<std::string> layers;
  for (const auto& [name, t] : m)
    if (name.ends_with(".experts.gate_up_proj")) layers.push_back(name.substr(0, name.size() - 21));
  EXPECT_FALSE(layers.empty());
  for (const std::string& layer : layers) {
    const StoredTensor gate_up = m.at(layer + ".experts.gate_up_proj"), down = m.at(layer + ".experts.down_proj");
    const int E = int(gate_up.shape[0]);
    const int64_t I = gate_up.shape[1] / 2, H = down.shape[1];
    for (int e = 0; e < E; ++e) {
      const std::string p = layer + ".experts." + std::to_string(e) + ".";
      m[p + "gate_proj.weight"] = expert_slice(gate_up, e, 0, I);
      m[p + "up_proj.weight"] = expert_slice(gate_up, e, I, I);
      m[p + "down_proj.weight"] = expert_slice(down, e, 0, H);
    }
    m.erase(layer + ".experts.gate_up_proj");
    m.erase(layer + ".experts.down_proj");
  }
  return m;
}

TEST(Gemma4MoeLayouts, PerExpertTensorsGiveTheStackedResultsBitForBit) {
  for (const std::string& dir : moe_dirs()) {
    const auto ref = test::load_gemma4_reference(dir);
    const test::TempDir tmp;
    write_target(ref.target(), tmp.str(), per_expert(test::read_tensors(ref.target())));
    const auto stacked = Gemma4Checkpoint::open(ref.target()), split = Gemma4Checkpoint::open(tmp.str());
    ASSERT_EQ(detect_expert_layout(split.store(), split.dir(), split.stored("layers.0")), ExpertLayout::PerExpert);
    const std::vector<float> a = all_logits(stacked, ref.sequence), b = all_logits(split, ref.sequence);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << dir;
  }
}

// A matrix [rows, cols] quantized (MLX affine, group 32), stored with the
// leading dims `lead` (all but the last): the packed words, scales and
// biases, and its dequantized fp32 values.
struct Quantized {
  StoredTensor packed, scales, biases;
  std::vector<float> dequantized;
};

constexpr int kGroup = 32;

Quantized quantize(const std::vector<float>& w, std::vector<int64_t> lead, int64_t rows, int64_t cols, int bits) {
  const int64_t words = cols * bits / 32, groups = cols / kGroup;
  std::vector<uint32_t> packed(size_t(rows * words));
  std::vector<float> scales(size_t(rows * groups)), biases(size_t(rows * groups));
  quantize_affine(w.data(), rows, cols, bits, kGroup, packed.data(), scales.data(), biases.data());
  // The dequantized values exactly as the loader computes them (dequantize_row).
  TensorView tp{"p", DType::U32, {rows, words}, reinterpret_cast<const uint8_t*>(packed.data()), packed.size() * 4};
  TensorView ts{"s", DType::F32, {rows, groups}, reinterpret_cast<const uint8_t*>(scales.data()), scales.size() * 4};
  TensorView tb{"b", DType::F32, {rows, groups}, reinterpret_cast<const uint8_t*>(biases.data()), biases.size() * 4};
  WeightRef ref;
  ref.weight = &tp;
  ref.scales = &ts;
  ref.biases = &tb;
  ref.quant = {bits, kGroup};
  ref.rows = rows;
  ref.cols = cols;
  Quantized q;
  q.dequantized.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(ref, r, &q.dequantized[size_t(r * cols)]);
  auto shaped = [&](int64_t last) {
    std::vector<int64_t> s = lead;
    s.push_back(last);
    return s;
  };
  q.packed = {DType::U32, shaped(words), std::string(reinterpret_cast<const char*>(packed.data()), packed.size() * 4)};
  q.scales = test::f32_tensor(shaped(groups), scales);
  q.biases = test::f32_tensor(shaped(groups), biases);
  return q;
}

// `src`'s target in mlx-lm's layout (language_model.model.*, experts as
// experts.switch_glu.{gate,up,down}_proj), every matrix whose input width
// is a multiple of 32 quantized at `bits` (router.proj at 8, as mlx-lm
// does), into `quant_dir`; the same model dequantized to fp32 in
// transformers' layout into `dense_dir`.
void write_mlx_pair(const std::string& src, int bits, const std::string& quant_dir, const std::string& dense_dir) {
  const TensorMap m = test::read_tensors(src);
  TensorMap q, d;
  json overrides = json::object();
  auto mlx_name = [](const std::string& n) { return "language_model." + n; };  // model.* -> language_model.model.*
  auto put_quantized = [&](const std::string& mod, const std::vector<float>& w, std::vector<int64_t> lead,
                           int64_t rows, int64_t cols, int b) {
    Quantized x = quantize(w, lead, rows, cols, b);
    q[mod + ".weight"] = x.packed;
    q[mod + ".scales"] = x.scales;
    q[mod + ".biases"] = x.biases;
    if (b != bits) overrides[mod] = {{"group_size", kGroup}, {"bits", b}};
    return x.dequantized;
  };
  for (const auto& [name, t] : m) {
    if (name.ends_with(".experts.gate_up_proj")) {
      const std::string layer = name.substr(0, name.size() - 21), glu = mlx_name(layer) + ".experts.switch_glu.";
      const int64_t E = t.shape[0], I = t.shape[1] / 2, H = t.shape[2];
      const std::vector<float> all = test::f32_values(t);
      std::vector<float> gate, up;
      for (int64_t e = 0; e < E; ++e) {
        gate.insert(gate.end(), all.begin() + e * 2 * I * H, all.begin() + (e * 2 + 1) * I * H);
        up.insert(up.end(), all.begin() + (e * 2 + 1) * I * H, all.begin() + (e + 1) * 2 * I * H);
      }
      // An expert's rows quantize alone: the stacked [E * I, H] is E matrices [I, H].
      const std::vector<float> g = put_quantized(glu + "gate_proj", gate, {E, I}, E * I, H, bits);
      const std::vector<float> u = put_quantized(glu + "up_proj", up, {E, I}, E * I, H, bits);
      std::vector<float> restacked;
      for (int64_t e = 0; e < E; ++e) {
        restacked.insert(restacked.end(), g.begin() + e * I * H, g.begin() + (e + 1) * I * H);
        restacked.insert(restacked.end(), u.begin() + e * I * H, u.begin() + (e + 1) * I * H);
      }
      d[name] = test::f32_tensor(t.shape, restacked);
    } else if (name.ends_with(".experts.down_proj")) {
      const std::string mod = mlx_name(name.substr(0, name.size() - 18)) + ".experts.switch_glu.down_proj";
      const int64_t E = t.shape[0], H = t.shape[1], I = t.shape[2];
      if (I % kGroup != 0) {  // mlx-lm leaves it dense
        q[mod + ".weight"] = t;
        d[name] = t;
      } else {
        d[name] = test::f32_tensor(t.shape, put_quantized(mod, test::f32_values(t), {E, H}, E * H, I, bits));
      }
    } else if (t.shape.size() == 2 && name.ends_with(".weight") && t.shape[1] % kGroup == 0) {
      const std::string mod = mlx_name(name.substr(0, name.size() - 7));
      const int b = name.ends_with("router.proj.weight") ? 8 : bits;
      d[name] = test::f32_tensor(t.shape, put_quantized(mod, test::f32_values(t), {t.shape[0]}, t.shape[0], t.shape[1], b));
    } else {
      q[mlx_name(name)] = t;
      d[name] = t;
    }
  }
  write_target(src, quant_dir, q, [&](json& cfg) {
    json quant = {{"group_size", kGroup}, {"bits", bits}, {"mode", "affine"}};
    quant.update(overrides);
    cfg["quantization"] = quant;
  });
  write_target(src, dense_dir, d);
}

// q4 and q8 in mlx-lm's switch_glu layout: logits and greedy tokens equal the
// dequantized copy's exactly (the dequantized values are exact in fp32), and
// speculative output with the fixture's assistant equals greedy.
void check_mlx_switch_glu(int bits) {
  for (const std::string& dir : moe_dirs()) {
    const auto ref = test::load_gemma4_reference(dir);
    const test::TempDir tmp;
    const std::string qdir = (tmp.path / "q").string(), ddir = (tmp.path / "dense").string();
    write_mlx_pair(ref.target(), bits, qdir, ddir);
    const auto q = Gemma4Checkpoint::open(qdir), d = Gemma4Checkpoint::open(ddir);
    const Gemma4TextConfig& c = q.config();
    EXPECT_EQ(q.stored("layers.0"), "language_model.model.layers.0");
    EXPECT_EQ(detect_expert_layout(q.store(), q.dir(), q.stored("layers.0")), ExpertLayout::SwitchGlu);
    const ExpertMatrices x0 = expert_matrices(q.store(), c.quant, q.dir(), q.stored("layers.0"),
                                              ExpertLayout::SwitchGlu, 0, c.num_experts, c.moe_intermediate_size,
                                              c.hidden_size);
    EXPECT_TRUE(x0.gate.quantized());
    EXPECT_EQ(x0.gate.quant.bits, bits);
    EXPECT_EQ(x0.down.quantized(), c.moe_intermediate_size % kGroup == 0) << dir;
    EXPECT_EQ(q.matrix("layers.1.router.proj", c.num_experts, c.hidden_size).quant.bits, 8);

    const std::vector<float> a = all_logits(q, ref.sequence), b = all_logits(d, ref.sequence);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << dir << " q" << bits;

    GenerateOptions g;
    g.max_new_tokens = 40;
    g.ignore_eos = true;
    const std::vector<int32_t> greedy = generate_fresh(cpu_factory(q), ref.prompt, g).tokens;
    ASSERT_EQ(greedy.size(), 40u);
    EXPECT_EQ(generate_fresh(cpu_factory(d), ref.prompt, g).tokens, greedy) << dir << " q" << bits;
    for (int K = 2; K <= 6; ++K) {
      GenerateOptions s = g;
      s.block_size = K;
      const GenerateResult r = generate_with_assistant(cpu_factory(q), ref.assistant(), ref.prompt, s, 2);
      EXPECT_EQ(r.tokens, greedy) << dir << " q" << bits << " K=" << K;
      EXPECT_GT(r.stats.counters.drafted, 0);
    }
  }
}

TEST(Gemma4MoeQuantized, MlxSwitchGluQ4EqualsItsDequantizedCopyAndSpeculatesExactly) { check_mlx_switch_glu(4); }

TEST(Gemma4MoeQuantized, MlxSwitchGluQ8EqualsItsDequantizedCopyAndSpeculatesExactly) { check_mlx_switch_glu(8); }

// `nextn quantize` quantizes the router and the dense matrices under their
// stored names and keeps the stacked experts as stored; the result decodes
// and speculates exactly.
TEST(Gemma4MoeQuantized, QuantizeCommandKeepsTheStackedExperts) {
  const auto ref = test::load_gemma4_reference(moe_dirs().front());
  const test::TempDir tmp;
  const std::string out = (tmp.path / "q4").string();
  const auto r = test::run_cli("quantize -m " + ref.target() + " -o " + out + " --bits 4 --group-size 32");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ck = Gemma4Checkpoint::open(out);
  const Gemma4TextConfig& c = ck.config();
  EXPECT_TRUE(ck.matrix("layers.0.router.proj", c.num_experts, c.hidden_size).quantized());
  EXPECT_EQ(ck.store().get(ck.stored("layers.0.experts.gate_up_proj")).dtype, DType::BF16);
  GenerateOptions g;
  g.max_new_tokens = 24;
  g.ignore_eos = true;
  const std::vector<int32_t> greedy = generate_fresh(cpu_factory(ck), ref.prompt, g).tokens;
  ASSERT_EQ(greedy.size(), 24u);
  for (int K : {2, 3, 5}) {
    GenerateOptions s = g;
    s.block_size = K;
    EXPECT_EQ(generate_with_assistant(cpu_factory(ck), ref.assistant(), ref.prompt, s, 2).tokens, greedy)
        << "K=" << K;
  }
}

// Loading the edited target fails with one line naming `needle`, through the API and the CLI.
void expect_bad(const std::string& src, const TensorMap& tensors, const std::string& needle) {
  const test::TempDir tmp;
  write_target(src, tmp.str(), tensors);
  test::expect_error_naming([&] { (void)cpu_runtime(Gemma4Checkpoint::open(tmp.str()), 16); }, needle);
  test::expect_one_error_line(test::run_cli("generate -m " + tmp.str() + " --prompt-ids 1,2,3 -n 2"), needle);
}

TEST(Gemma4MoeLayouts, BadExpertTensorsAreNamed) {
  const std::string src = moe_dirs().front() + "/target";
  const TensorMap good = test::read_tensors(src);
  const std::string l0 = "model.layers.0", l1 = "model.layers.1";
  auto without = [&](const std::string& name) {
    TensorMap m = good;
    EXPECT_EQ(m.erase(name), 1u) << name;
    return m;
  };
  expect_bad(src, without(l1 + ".experts.down_proj"), l1 + ".experts.down_proj");
  expect_bad(src, without(l0 + ".router.proj.weight"), l0 + ".router.proj.weight");
  expect_bad(src, without(l1 + ".router.scale"), l1 + ".router.scale");
  expect_bad(src, without(l0 + ".router.per_expert_scale"), l0 + ".router.per_expert_scale");
  expect_bad(src, without(l1 + ".post_feedforward_layernorm_2.weight"), l1 + ".post_feedforward_layernorm_2.weight");
  {
    TensorMap m = good;
    StoredTensor& t = m[l0 + ".experts.gate_up_proj"];
    t.shape = {t.shape[0] * 2, t.shape[1] / 2, t.shape[2]};  // [2E, I, H]: the same bytes, the wrong split
    expect_bad(src, m, l0 + ".experts.gate_up_proj");
  }
  {
    TensorMap m = good;
    StoredTensor& t = m[l1 + ".router.per_expert_scale"];
    t.shape = {t.shape[0] / 2, 2};
    expect_bad(src, m, l1 + ".router.per_expert_scale");
  }
  {
    TensorMap m = without(l0 + ".experts.gate_up_proj");
    m.erase(l0 + ".experts.down_proj");
    expect_bad(src, m, "'" + l0 + "''s experts");
  }
  {
    TensorMap m = good;
    m[l0 + ".experts.switch_glu.gate_proj.weight"] = good.at(l0 + ".experts.down_proj");
    expect_bad(src, m, "more than one layout");
  }
}


}  // namespace
}  // namespace nextn
