// nextn make-checkpoint --quant fp8 / gptq4 (src/io/synthetic_hf_quant.cpp):
// the real presets' quantization_config, the layout the loader
// (src/io/hf_quant_decode.cpp) accepts with the modules the real uploads
// leave bf16, dequantized values with the bf16 preset's std, reproducibility,
// and the CLI: inspect names the format, generate runs on the CPU and
// `--draft mtp --block-size 3` gives the greedy tokens, a bad --quant is one
// error line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <set>

#include "cli_util.h"
#include "fixture_util.h"
#include "synthetic_checkpoint_util.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/synthetic.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using test::make_preset;
using test::run_cli;
using test::TempDir;

bool lists(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(MakeCheckpointHfQuant, RealPresetConfigs) {
  for (const char* name : {"qwen3.5-4b", "qwen3.5-27b", "qwen3.5-35b-a3b"}) {
    const auto p = synthetic_preset(name);
    ASSERT_TRUE(p) << name;
    const Qwen35Config f = parse_qwen35_config(synthetic_config_json(*p, "fp8"), "config.json");
    EXPECT_EQ(f.quant.method, QuantMethod::Fp8) << name;
    EXPECT_EQ(f.quant.hf.block_out, 128);
    EXPECT_EQ(f.quant.hf.block_in, 128);
    EXPECT_EQ(f.quant.hf.activation_scheme, "dynamic");
    const auto& nc = f.quant.hf.not_convert;
    EXPECT_TRUE(lists(nc, "lm_head") && lists(nc, "model.language_model.embed_tokens") && lists(nc, "mtp"));
    EXPECT_TRUE(lists(nc, "model.language_model.layers.0.linear_attn.in_proj_a"));
    EXPECT_TRUE(lists(nc, "model.language_model.layers.0.linear_attn.in_proj_b"));
    EXPECT_FALSE(lists(nc, "model.language_model.layers.3.linear_attn.in_proj_a"));  // full attention there
    EXPECT_EQ(lists(nc, "model.language_model.layers.0.mlp.gate"), p->moe());
    EXPECT_FALSE(f.quant.hf.not_converted("model.language_model.layers.0.mlp.down_proj"));
    EXPECT_TRUE(f.quant.hf.not_converted("mtp.layers.0.mlp.down_proj"));

    const Qwen35Config g = parse_qwen35_config(synthetic_config_json(*p, "gptq4"), "config.json");
    EXPECT_EQ(g.quant.method, QuantMethod::Gptq) << name;
    EXPECT_EQ(g.quant.hf.bits, 4);
    EXPECT_EQ(g.quant.hf.group_size, 128);  // every real preset's inputs are multiples of 128
    EXPECT_TRUE(g.quant.hf.sym);
    EXPECT_FALSE(g.quant.hf.desc_act);

    // fp8 weights are 1 byte and gptq4 ones half a byte, beside the same bf16 rest.
    const uint64_t bf16 = synthetic_checkpoint_bytes(*p, "bf16"), fp8 = synthetic_checkpoint_bytes(*p, "fp8"),
                   gptq = synthetic_checkpoint_bytes(*p, "gptq4");
    EXPECT_LT(fp8, bf16 * 3 / 4) << name;
    EXPECT_GT(fp8, bf16 * 9 / 20) << name;
    EXPECT_LT(gptq, fp8) << name;
  }
  // test-tiny's inputs are 64 wide: its GPTQ groups are 64.
  const Qwen35Config t = parse_qwen35_config(synthetic_config_json(*synthetic_preset("test-tiny"), "gptq4"), "c");
  EXPECT_EQ(t.quant.hf.group_size, 64);
}

class MakeCheckpointHfQuantFormat : public ::testing::TestWithParam<const char*> {};

TEST_P(MakeCheckpointHfQuantFormat, LoadsWithTheRealModulesLeftBf16AndBf16Std) {
  const std::string q = GetParam();
  const bool fp8 = q == "fp8";
  TempDir d;
  const auto rep = make_preset("test-tiny", d.str(), q, 3, 2, uint64_t(1) << 16);  // small shards: several files
  EXPECT_GT(rep.files.size(), 1u);
  EXPECT_EQ(rep.bytes, synthetic_checkpoint_bytes(*synthetic_preset("test-tiny"), q));
  const auto ck = Qwen35Checkpoint::open(d.str());
  ck.validate();
  EXPECT_EQ(ck.layout(), Layout::ConditionalGeneration);
  EXPECT_EQ(ck.config().quant.method, fp8 ? QuantMethod::Fp8 : QuantMethod::Gptq);
  EXPECT_EQ(ck.mtp_layers(), 1);

  const TensorStore& s = ck.store();
  const std::string l0 = "model.language_model.layers.0.";
  for (const std::string& mod : {l0 + "mlp.gate_proj", l0 + "linear_attn.in_proj_qkv", l0 + "linear_attn.out_proj",
                                std::string("model.language_model.layers.3.self_attn.o_proj")}) {
    if (fp8) {
      ASSERT_TRUE(s.find(mod + ".weight")) << mod;
      EXPECT_EQ(s.find(mod + ".weight")->dtype, DType::F8_E4M3) << mod;
      EXPECT_EQ(s.find(mod + ".weight_scale_inv")->dtype, DType::F32) << mod;
    } else {
      ASSERT_TRUE(s.find(mod + ".qweight")) << mod;
      EXPECT_EQ(s.find(mod + ".qweight")->dtype, DType::I32);
      EXPECT_EQ(s.find(mod + ".scales")->dtype, DType::F16);
      const TensorView* z = s.find(mod + ".qzeros");
      ASSERT_TRUE(z);
      for (int64_t i = 0; i < z->numel(); ++i)  // symmetric: every zero 8, stored minus one
        ASSERT_EQ(load_unaligned<uint32_t>(z->data + 4 * i), 0x77777777u) << mod;
      const TensorView* gi = s.find(mod + ".g_idx");
      ASSERT_TRUE(gi);
      for (int64_t i = 0; i < gi->numel(); ++i) ASSERT_EQ(load_unaligned<int32_t>(gi->data + 4 * i), i / 64) << mod;
    }
  }
  for (const std::string& t : {l0 + "linear_attn.in_proj_a.weight", l0 + "linear_attn.in_proj_b.weight",
                              std::string("model.language_model.embed_tokens.weight"), std::string("lm_head.weight"),
                              std::string("mtp.fc.weight"), std::string("mtp.layers.0.mlp.down_proj.weight")}) {
    ASSERT_TRUE(s.find(t)) << t;
    EXPECT_EQ(s.find(t)->dtype, DType::BF16) << t;
  }

  // Dequantized: mean ~0 and the bf16 preset's std 0.02 (each 128x128 block
  // or group scales it by U(0.8, 1.2), so a small matrix lands within 20 %).
  double sum = 0, sum2 = 0, n = 0;
  struct M {
    const char* name;
    int64_t rows, cols;
  };
  for (const M& m : {M{"layers.0.mlp.gate_proj", 128, 64}, M{"layers.0.mlp.down_proj", 64, 128},
                     M{"layers.1.linear_attn.in_proj_qkv", 128, 64}, M{"layers.3.self_attn.q_proj", 128, 64}}) {
    const WeightRef w = ck.matrix(m.name, m.rows, m.cols);
    std::vector<float> row(size_t(m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
      dequantize_row(w, r, row.data());
      for (float x : row) sum += x, sum2 += double(x) * x, n += 1;
    }
  }
  const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002) << q;
  EXPECT_GT(sd, 0.016) << q;
  EXPECT_LT(sd, 0.024) << q;
}

TEST_P(MakeCheckpointHfQuantFormat, InspectNamesItAndMtpDraftsGiveTheGreedyTokens) {
  const std::string q = GetParam();
  TempDir d;
  const auto dir = (d.path / "m").string();
  auto r = run_cli("make-checkpoint --preset test-tiny --quant " + q + " --seed 7 --out " + dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("preset test-tiny, " + q + ", seed 7"), std::string::npos) << r.out;

  const auto insp = run_cli("inspect " + dir);
  ASSERT_EQ(insp.code, 0) << insp.err;
  const char* summary = q == "fp8" ? "quantization: fp8 e4m3, weight blocks 128x128"
                                   : "quantization: gptq 4-bit, group 64, symmetric, desc_act false";
  EXPECT_NE(insp.out.find(summary), std::string::npos) << insp.out;
  EXPECT_NE(insp.out.find(q == "fp8" ? "fp8 b128x128" : "gptq q4 g64"), std::string::npos) << insp.out;

  const std::string base = "generate -m " + dir + " --prompt-ids 5,17,300,42,9,100,77 -n 16 --ignore-eos --json";
  const auto plain = run_cli(base), spec = run_cli(base + " --draft mtp --block-size 3");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(spec.code, 0) << spec.err;
  const auto tokens = nlohmann::json::parse(plain.out).at("tokens").get<std::vector<int32_t>>();
  EXPECT_EQ(tokens.size(), 16u);
  EXPECT_GT(std::set<int32_t>(tokens.begin(), tokens.end()).size(), 1u);  // the weights are not degenerate
  EXPECT_EQ(nlohmann::json::parse(spec.out).at("tokens").get<std::vector<int32_t>>(), tokens);
}

TEST_P(MakeCheckpointHfQuantFormat, SameSeedSameBytesAnyThreadsOrShards) {
  const std::string q = GetParam();
  TempDir a, b, c;
  make_preset("test-tiny", a.str(), q, 11, 1, uint64_t(1) << 30);
  make_preset("test-tiny", b.str(), q, 11, 3, uint64_t(1) << 15);
  make_preset("test-tiny", c.str(), q, 12, 2, uint64_t(1) << 30);
  const auto ta = test::tensor_bytes(a.str()), tb = test::tensor_bytes(b.str()), tc = test::tensor_bytes(c.str());
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  EXPECT_EQ(test::read_file((a.path / "config.json").string()), test::read_file((b.path / "config.json").string()));
}

INSTANTIATE_TEST_SUITE_P(Quant, MakeCheckpointHfQuantFormat, ::testing::Values("fp8", "gptq4"),
                         [](const auto& info) { return std::string(info.param); });

TEST(MakeCheckpointHfQuant, MoePresetLoadsWithExpertsQuantized) {
  for (const char* q : {"fp8", "gptq4"}) {
    TempDir d;
    make_preset("test-tiny-moe", d.str(), q, 1, 2);
    const auto ck = Qwen35Checkpoint::open(d.str());
    ck.validate();
    const TensorStore& s = ck.store();
    const std::string l = "model.language_model.layers.0.mlp.";
    EXPECT_TRUE(s.find(l + "experts.7.down_proj" + (std::string(q) == "fp8" ? ".weight_scale_inv" : ".qweight"))) << q;
    EXPECT_EQ(s.find(l + "gate.weight")->dtype, DType::BF16) << q;
    EXPECT_EQ(s.find(l + "shared_expert_gate.weight")->dtype, DType::BF16) << q;
    const auto r = run_cli("generate -m " + d.str() + " --prompt-ids 5,17,300 -n 4 --ignore-eos");
    EXPECT_EQ(r.code, 0) << q << ": " << r.err;
  }
}

TEST(MakeCheckpointHfQuant, BadQuantIsOneErrorLineNamingTheFlag) {
  TempDir d;
  for (const char* bad : {"gptq8", "fp4", "FP8"}) {
    const auto r = run_cli("make-checkpoint --preset test-tiny --quant " + std::string(bad) + " --out " +
                           (d.path / bad).string());
    test::expect_one_error_line(r, "--quant");
    EXPECT_NE(r.err.find("fp8 or gptq4"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(d.path / bad / "config.json"));
  }
  // Gemma 4 presets stay MLX-only.
  const auto g = run_cli("make-checkpoint --preset gemma4-31b --quant fp8 --out " + (d.path / "g").string());
  test::expect_one_error_line(g, "--quant");
}

}  // namespace
}  // namespace nextn
