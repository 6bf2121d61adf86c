// nextn make-checkpoint's MoE presets (src/io/synthetic.h, docs/moe.md): the
// qwen3.5-35b-a3b config and size (nothing written), and test-tiny-moe in both
// layouts (q4: mlx switch_mlp with 8-bit gates; bf16: per-expert HF names),
// the MTP layer's experts included, loaded by the CPU runtime: greedy decodes,
// speculative (MTP drafts, and oracle drafts that verify rounds accept) ==
// greedy, bytes reproducible from the seed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "cli_util.h"
#include "fixture_util.h"
#include "synthetic_checkpoint_util.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/moe_experts.h"
#include "io/synthetic.h"
#include "engine/generate.h"
#include "model/runtime.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using test::make_preset;
using test::read_file;
using test::run_cli;
using test::TempDir;
using test::tensor_bytes;

const std::vector<int32_t> kPrompt{1, 7, 42, 99, 3, 250, 17, 8};

TEST(MakeCheckpointMoe, Qwen35_35bA3bConfigAndSize) {
  const auto p = synthetic_preset("qwen3.5-35b-a3b");
  ASSERT_TRUE(p);
  for (const char* q : {"q4", "bf16"}) {
    const Qwen35Config c = parse_qwen35_config(synthetic_config_json(*p, q), "config.json");
    EXPECT_EQ(c.model_type, "qwen3_5_moe");
    EXPECT_TRUE(c.moe);
    EXPECT_EQ(c.hidden_size, 2048);
    EXPECT_EQ(c.num_hidden_layers, 40);
    EXPECT_EQ(c.num_attention_heads, 16);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.linear_num_key_heads, 16);
    EXPECT_EQ(c.linear_key_head_dim, 128);
    EXPECT_EQ(c.linear_num_value_heads, 32);
    EXPECT_EQ(c.linear_value_head_dim, 128);
    EXPECT_EQ(c.linear_conv_kernel_dim, 4);
    EXPECT_EQ(c.num_experts, 256);
    EXPECT_EQ(c.num_experts_per_tok, 8);
    EXPECT_EQ(c.moe_intermediate_size, 512);
    EXPECT_EQ(c.shared_expert_intermediate_size, 512);
    EXPECT_EQ(c.vocab_size, 248320);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.mtp_num_hidden_layers, 1);
    ASSERT_EQ(c.full_attention.size(), 40u);
    for (int i = 0; i < 40; ++i) EXPECT_EQ(c.full_attention[i], (i + 1) % 4 == 0) << i;
    EXPECT_EQ(c.quant.present, std::string(q) == "q4");
    if (c.quant.present) {
      // Experts and projections at 4 bits, the router and shared_expert_gate at 8 (as mlx-lm).
      EXPECT_EQ(c.quant.for_module("language_model.model.layers.0.mlp.switch_mlp.gate_proj")->bits, 4);
      for (const char* l : {"language_model.model.layers.0.", "language_model.model.layers.39.", "mtp.layers.0."})
        for (const char* m : {"mlp.gate", "mlp.shared_expert_gate"}) {
          const auto qp = c.quant.for_module(std::string(l) + m);
          ASSERT_TRUE(qp) << l << m;
          EXPECT_EQ(qp->bits, 8) << l << m;
          EXPECT_EQ(qp->group_size, 64) << l << m;
        }
    }
  }
  // About 35.5B parameters (MTP layer included): 2 bytes each in bf16; q4
  // stores 0.5 bytes + bf16 scale and bias per 64 (0.5625), a little more for the 8-bit gates.
  const double params = double(synthetic_checkpoint_bytes(*p, "bf16")) / 2;
  EXPECT_GT(params, 35.0e9);
  EXPECT_LT(params, 36.0e9);
  const double q4 = double(synthetic_checkpoint_bytes(*p, "q4"));
  EXPECT_GT(q4, params * 0.5625);
  EXPECT_LT(q4, params * 0.57);
}

TEST(MakeCheckpointMoe, TinyLoadsInBothLayoutsAndSpeculativeEqualsGreedy) {
  for (const char* q : {"q4", "bf16"}) {
    SCOPED_TRACE(q);
    const bool q4 = std::string(q) == "q4";
    TempDir d;
    make_preset("test-tiny-moe", d.str(), q, 3, 2, uint64_t(1) << 16);  // small shards: several files + index
    const auto ck = Qwen35Checkpoint::open(d.str());
    ck.validate();
    const Qwen35Config& c = ck.config();
    ASSERT_TRUE(c.moe);
    EXPECT_EQ(c.num_experts, 8);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_EQ(ck.layout(), q4 ? Layout::Mlx : Layout::ConditionalGeneration);
    ASSERT_EQ(ck.mtp_layers(), 1);
    const ExpertLayout want = q4 ? ExpertLayout::SwitchMlp : ExpertLayout::PerExpert;
    for (const char* l : {"layers.0", "layers.3", "mtp.layers.0"}) {
      EXPECT_EQ(expert_layout(ck, l), want) << l;
      validate_moe_mlp(ck, l);
      EXPECT_EQ(ck.matrix(std::string(l) + ".mlp.gate", 8, 64, MatrixForm::Checked).quant.bits, q4 ? 8 : 0) << l;
      EXPECT_EQ(ck.matrix(std::string(l) + ".mlp.shared_expert_gate", 1, 64, MatrixForm::Checked).quant.bits, q4 ? 8 : 0) << l;
    }
    // Dequantized experts: mean ~0, std ~0.02, and the experts differ.
    std::set<float> firsts;
    for (int e = 0; e < 8; ++e) {
      const ExpertMatrices m = expert_matrices(ck, "mtp.layers.0", want, e);
      EXPECT_EQ(m.down.rows, 64);
      EXPECT_EQ(m.down.cols, 64);
      EXPECT_EQ(m.gate.quant.bits, q4 ? 4 : 0);
      double s = 0, s2 = 0;
      std::vector<float> row(64);
      for (int r = 0; r < 64; ++r) {
        dequantize_row(m.gate, r, row.data());
        if (r == 0) firsts.insert(row[0]);
        for (float x : row) s += x, s2 += double(x) * x;
      }
      const double n = 64.0 * 64, mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
      EXPECT_NEAR(mean, 0.0, 0.004) << e;
      EXPECT_NEAR(sd, 0.02, 0.004) << e;
    }
    EXPECT_GT(firsts.size(), 4u);

    auto rt = make_runtime(ck, BackendKind::Cpu, 96);
    const auto greedy = greedy_generate(*rt, kPrompt, 24, /*ignore_eos=*/true);
    ASSERT_EQ(greedy.tokens.size(), 24u);
    EXPECT_GT(std::set<int32_t>(greedy.tokens.begin(), greedy.tokens.end()).size(), 1u);
    for (int k : {2, 4}) {
      auto srt = make_runtime(ck, BackendKind::Cpu, 96);
      GenerateOptions o;
      o.max_new_tokens = 24;
      o.ignore_eos = true;
      o.draft = DraftKind::Mtp;
      o.block_size = k;
      const auto spec = generate(*srt, kPrompt, o);
      EXPECT_EQ(spec.tokens, greedy.tokens) << "K " << k;
      EXPECT_EQ(spec.stats.draft, "mtp");
      // Random MTP weights rarely draft the target's token; the oracle drafts it
      // with probability 0.7, so verify rounds accept several rows (each routed
      // to its own experts) and roll back the rest.
      auto ort = make_runtime(ck, BackendKind::Cpu, 96);
      o.draft = DraftKind::Oracle;
      o.oracle.accept_rate = 0.7;
      const auto oracle = generate(*ort, kPrompt, o, &greedy.tokens);
      EXPECT_EQ(oracle.tokens, greedy.tokens) << "K " << k;
      EXPECT_GT(oracle.stats.counters.accepted, 4) << "K " << k;
    }
  }
}

TEST(MakeCheckpointMoe, SameSeedSameBytesAnyThreadsOrShards) {
  for (const char* q : {"q4", "bf16"}) {
    TempDir a, b, c;
    make_preset("test-tiny-moe", a.str(), q, 11, 1);
    make_preset("test-tiny-moe", b.str(), q, 11, 3, uint64_t(1) << 15);
    make_preset("test-tiny-moe", c.str(), q, 12, 2);
    const auto ta = tensor_bytes(a.str());
    EXPECT_EQ(ta, tensor_bytes(b.str())) << q;
    EXPECT_NE(ta, tensor_bytes(c.str())) << q;
    EXPECT_EQ(read_file((a.path / "config.json").string()), read_file((b.path / "config.json").string())) << q;
    TempDir d;  // one shard: the file itself is identical too
    make_preset("test-tiny-moe", d.str(), q, 11, 2);
    EXPECT_EQ(read_file((a.path / "model-00001-of-00001.safetensors").string()),
              read_file((d.path / "model-00001-of-00001.safetensors").string()))
        << q;
  }
}

TEST(MakeCheckpointMoe, Cli) {
  auto r = run_cli("make-checkpoint --help");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("qwen3.5-35b-a3b"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("test-tiny-moe"), std::string::npos) << r.out;
  TempDir d;
  const auto out = (d.path / "m").string();
  r = run_cli("make-checkpoint --preset test-tiny-moe --seed 4 --out " + out);  // q4 by default
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("preset test-tiny-moe, q4, seed 4"), std::string::npos) << r.out;
  r = run_cli("generate -m " + out + " --prompt-ids 1,7,42,99 -n 8 --ignore-eos --draft mtp");
  EXPECT_EQ(r.code, 0) << r.err;
  // bench trunk times the dense MLP's matrices only: a MoE preset is refused by name.
  r = run_cli("bench trunk --presets qwen3.5-35b-a3b");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("'qwen3.5-35b-a3b' is not"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nextn
