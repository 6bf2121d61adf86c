// nextn make-checkpoint (src/io/synthetic.h): the real presets' configs, the
// layouts the loader reads (q4 mlx, bf16 HF) with the MTP head, finite and
// varying outputs through every layer, and byte-for-byte reproducibility from
// preset + quant + seed (independent of threads and shard size), also when
// generated in memory for bench decode --preset.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "bench/decode_roofline.h"
#include "cli_util.h"
#include "fixture_util.h"
#include "synthetic_checkpoint_util.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/synthetic.h"
#include "model/runtime.h"
#include "engine/generate.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using test::make_preset;
using test::read_file;
using test::run_cli;
using test::TempDir;
using test::tensor_bytes;

TEST(MakeCheckpoint, RealPresetConfigs) {
  struct Want {
    const char* name;
    int H, L, I, Hq, Hkv, Hv;
    bool tie;
  };
  for (const Want& w : {Want{"qwen3.5-0.8b", 1024, 24, 3584, 8, 2, 16, true},
                        Want{"qwen3.5-4b", 2560, 32, 9216, 16, 4, 32, true},
                        Want{"qwen3.5-27b", 5120, 64, 17408, 24, 4, 48, false}}) {
    const auto p = synthetic_preset(w.name);
    ASSERT_TRUE(p) << w.name;
    for (const char* q : {"q4", "bf16"}) {
      const Qwen35Config c = parse_qwen35_config(synthetic_config_json(*p, q), "config.json");
      EXPECT_EQ(c.model_type, "qwen3_5");
      EXPECT_EQ(c.hidden_size, w.H);
      EXPECT_EQ(c.num_hidden_layers, w.L);
      EXPECT_EQ(c.intermediate_size, w.I);
      EXPECT_EQ(c.num_attention_heads, w.Hq);
      EXPECT_EQ(c.num_key_value_heads, w.Hkv);
      EXPECT_EQ(c.head_dim, 256);
      EXPECT_EQ(c.linear_num_key_heads, 16);
      EXPECT_EQ(c.linear_num_value_heads, w.Hv);
      EXPECT_EQ(c.vocab_size, 248320);
      EXPECT_EQ(c.tie_word_embeddings, w.tie);
      EXPECT_EQ(c.mtp_num_hidden_layers, 1);
      EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
      EXPECT_EQ(c.full_attention[3], true);
      EXPECT_EQ(c.full_attention[4], false);
      EXPECT_EQ(c.quant.present, std::string(q) == "q4");
      if (c.quant.present) {
        EXPECT_EQ(c.quant.defaults.bits, 4);
        EXPECT_EQ(c.quant.defaults.group_size, 64);
      }
    }
  }
  EXPECT_FALSE(synthetic_preset("qwen3.5-9b"));
}

TEST(MakeCheckpoint, LoadsBothLayoutsWithMtpAndDecodesFinite) {
  for (const char* q : {"q4", "bf16"}) {
    TempDir d;
    make_preset("test-tiny", d.str(), q, 3, 2, uint64_t(1) << 16);  // small shards: several files + index
    EXPECT_TRUE(fs::exists(d.path / "model.safetensors.index.json"));
    const auto ck = Qwen35Checkpoint::open(d.str());
    ck.validate();
    EXPECT_EQ(ck.layout(), std::string(q) == "q4" ? Layout::Mlx : Layout::ConditionalGeneration);
    EXPECT_EQ(ck.mtp_layers(), 1);
    EXPECT_EQ(ck.lm_head().quantized(), std::string(q) == "q4");
    EXPECT_EQ(ck.norms_shifted(), std::string(q) == "q4");
    // Real gamma near 1 in both layouts.
    for (float g : ck.norm("layers.0.input_layernorm", 64, true)) {
      EXPECT_GT(g, 0.85f);
      EXPECT_LT(g, 1.15f);
    }
    // Dequantized projections: mean ~0, std ~0.02.
    const WeightRef w = ck.matrix("layers.0.mlp.gate_proj", 128, 64);
    double s = 0, s2 = 0;
    std::vector<float> row(64);
    for (int r = 0; r < 128; ++r) {
      dequantize_row(w, r, row.data());
      for (float x : row) s += x, s2 += double(x) * x;
    }
    const double n = 128.0 * 64, mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.003) << q;
    EXPECT_NEAR(sd, 0.02, 0.004) << q;

    // Outputs finite through all layers, argmax varies, MTP drafts in range.
    auto rt = make_runtime(ck, BackendKind::Cpu, 64);
    std::vector<int32_t> prompt{1, 7, 42, 99, 3, 250, 17, 8};
    rt->target_forward(prompt);
    std::vector<float> logits(512);
    rt->head_logits(int(prompt.size()) - 1, logits.data());
    for (float x : logits) ASSERT_TRUE(std::isfinite(x)) << q;
    auto rt2 = make_runtime(ck, BackendKind::Cpu, 64);
    const auto g = greedy_generate(*rt2, prompt, 16, /*ignore_eos=*/true);
    std::set<int32_t> distinct(g.tokens.begin(), g.tokens.end());
    EXPECT_GT(distinct.size(), 1u) << q;

    const auto b = bench::decode_bytes(ck);
    EXPECT_GT(b.trunk, 0u);
    EXPECT_GT(b.head, 0u);
    EXPECT_GT(b.mtp, 0u);
    EXPECT_EQ(b.trunk + b.head + b.mtp + (ck.config().tie_word_embeddings ? 0 : b.embed_row * 512), b.stored_total);
  }
}

TEST(MakeCheckpoint, SameSeedSameBytesAnyThreadsOrShards) {
  TempDir a, b, c;
  make_preset("test-tiny", a.str(), "q4", 11, 1, uint64_t(1) << 30);
  make_preset("test-tiny", b.str(), "q4", 11, 3, uint64_t(1) << 15);
  make_preset("test-tiny", c.str(), "q4", 12, 2, uint64_t(1) << 30);
  const auto ta = tensor_bytes(a.str()), tb = tensor_bytes(b.str()), tc = tensor_bytes(c.str());
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  EXPECT_EQ(read_file((a.path / "config.json").string()), read_file((b.path / "config.json").string()));
  // One shard: the file itself is identical too.
  TempDir d;
  make_preset("test-tiny", d.str(), "q4", 11, 2, uint64_t(1) << 30);
  EXPECT_EQ(read_file((a.path / "model-00001-of-00001.safetensors").string()),
            read_file((d.path / "model-00001-of-00001.safetensors").string()));
}

// bench decode --preset's checkpoint, generated in memory: the tensors
// (names, dtypes, shapes, bytes) and config of the one make-checkpoint
// writes, and the same greedy tokens.
TEST(MakeCheckpoint, InMemoryEqualsTheWrittenCheckpoint) {
  for (const char* quant : {"q4", "bf16"}) {
    SCOPED_TRACE(quant);
    TempDir d;
    make_preset("test-tiny-moe", d.str(), quant, 7, 2, uint64_t(1) << 30);
    MakeCheckpointOptions o;
    o.quant = quant;
    o.seed = 7;
    o.threads = 3;
    const Qwen35Checkpoint mem = synthetic_checkpoint_in_memory(*synthetic_preset("test-tiny-moe"), o);
    const Qwen35Checkpoint disk = Qwen35Checkpoint::open(d.str());
    EXPECT_NE(mem.dir().find("test-tiny-moe"), std::string::npos) << mem.dir();
    ASSERT_EQ(mem.store().names(), disk.store().names());
    for (const std::string& n : disk.store().names()) {
      const TensorView &a = mem.store().get(n), &b = disk.store().get(n);
      EXPECT_EQ(a.dtype, b.dtype) << n;
      EXPECT_EQ(a.shape, b.shape) << n;
      ASSERT_EQ(a.nbytes, b.nbytes) << n;
      EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << n;
    }
    EXPECT_EQ(mem.config().num_experts, disk.config().num_experts);
    EXPECT_EQ(mem.mtp_layers(), disk.mtp_layers());
    EXPECT_EQ(mem.layout(), disk.layout());
    const std::vector<int32_t> prompt{1, 5, 9, 2};
    auto greedy = [&](const Qwen35Checkpoint& ck) {
      auto rt = make_runtime(ck, BackendKind::Cpu, 32, RuntimeOptions{.cpu_threads = 2});
      return greedy_generate(*rt, prompt, 8, /*ignore_eos=*/true).tokens;
    };
    EXPECT_EQ(greedy(mem), greedy(disk));
  }
}

TEST(MakeCheckpoint, Cli) {
  TempDir d;
  const auto out = (d.path / "m").string();
  auto r = run_cli("make-checkpoint --preset test-tiny --quant bf16 --seed 5 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("preset test-tiny, bf16, seed 5"), std::string::npos) << r.out;
  r = run_cli("make-checkpoint --preset test-tiny --quant bf16 --out " + out);  // already holds safetensors
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("already holds"), std::string::npos) << r.err;
  r = run_cli("make-checkpoint --preset qwen3.5-9b --out " + out + "x");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("unknown --preset"), std::string::npos) << r.err;
  r = run_cli("make-checkpoint --preset test-tiny --quant q8 --out " + out + "y");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("expected q4, bf16, fp8 or gptq4"), std::string::npos) << r.err;
  r = run_cli("bench decode --backend cpu -m " + out + " --prompt-len 4 -n 3 --repeats 1 --prefill-len 8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("bytes per decode token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prefill 8 tokens/s"), std::string::npos) << r.out;
  // --preset: generated in memory, named in the report; its flags checked.
  r = run_cli("bench decode --backend cpu --preset test-tiny --quant bf16 --seed 5 --prompt-len 4 -n 3 --repeats 1 "
              "--threads 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"model\":\"preset test-tiny (bf16, seed 5, in memory)\""), std::string::npos) << r.out;
  test::expect_one_error_line(run_cli("bench decode --preset qwen3.5-9b"), "unknown preset 'qwen3.5-9b'");
  test::expect_one_error_line(run_cli("bench decode --preset gemma4-31b"), "unknown preset 'gemma4-31b'");
  test::expect_one_error_line(run_cli("bench decode --preset test-tiny -m " + out), "not both");
  test::expect_one_error_line(run_cli("bench decode -m " + out + " --seed 3"), "--preset only");
  test::expect_one_error_line(run_cli("bench decode --preset test-tiny --quant q8"), "q8");
}

}  // namespace
}  // namespace nextn
