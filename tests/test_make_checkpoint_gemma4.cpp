// nextn make-checkpoint's Gemma 4 presets (src/io/synthetic_gemma4.h): the
// 31B target and assistant configs parse to the real shapes (no weights are
// generated at that size here), and a tiny variant of the same generator
// round-trips: the target and assistant open, fit each other, decode, and
// speculative output with the assistant equals greedy; same seed, same bytes.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "backend/cpu/gemma4.h"
#include "backend/cpu/gemma4_assistant.h"
#include "bench/verify_arms.h"
#include "cli_util.h"
#include "fixture_util.h"
#include "gemma4_synthetic_util.h"
#include "io/gemma4_checkpoint.h"
#include "io/gemma4_config.h"
#include "io/safetensors.h"
#include "io/synthetic_gemma4.h"
#include "speculative/gemma4_drafter.h"
#include "engine/generate.h"

namespace nextn {
namespace {

using test::run_cli;
using test::TempDir;

TEST(MakeCheckpointGemma4, The31bPresetsParseToTheRealShapes) {
  const auto t = gemma4_synthetic_preset("gemma4-31b");
  const auto a = gemma4_synthetic_preset("gemma4-31b-assistant");
  ASSERT_TRUE(t && a);
  const Gemma4TextConfig c = parse_gemma4_config(gemma4_synthetic_config_json(*t), "config.json");
  EXPECT_EQ(c.model_type, "gemma4");
  EXPECT_EQ(c.hidden_size, 5376);
  EXPECT_EQ(c.num_hidden_layers, 60);
  EXPECT_EQ(c.intermediate_size, 21504);
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_FLOAT_EQ(c.final_logit_softcapping, 30.0f);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  int full = 0;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const Gemma4LayerSpec& s = c.layers[size_t(i)];
    EXPECT_EQ(s.sliding, (i + 1) % 6 != 0) << i;
    if (s.sliding) {
      EXPECT_EQ(s.head_dim, 256);
      EXPECT_EQ(s.kv_heads, 16);
      EXPECT_FALSE(s.k_eq_v);
      EXPECT_EQ(s.rope_pairs, 128);
    } else {
      ++full;
      EXPECT_EQ(s.head_dim, 512);
      EXPECT_EQ(s.kv_heads, 4);
      EXPECT_TRUE(s.k_eq_v);
      EXPECT_EQ(s.rope_pairs, 64);  // proportional: 25% of 256 pairs
    }
  }
  EXPECT_EQ(full, 10);
  const Gemma4AssistantConfig ac = parse_gemma4_assistant_config(gemma4_synthetic_config_json(*a), "config.json");
  EXPECT_EQ(ac.backbone_hidden_size, 5376);
  EXPECT_EQ(ac.text.hidden_size, 1024);
  EXPECT_EQ(ac.text.num_hidden_layers, 4);
  EXPECT_TRUE(ac.use_ordered_embeddings);
  EXPECT_EQ(ac.num_centroids, 2048);
  EXPECT_EQ(ac.centroid_intermediate_top_k, 32);
  for (const Gemma4LayerSpec& s : ac.text.layers) {  // the K/V it reads: the target's last layer of its type
    const Gemma4LayerSpec& ts = c.layers[size_t(c.last_layer_of(s.sliding))];
    EXPECT_EQ(s.head_dim, ts.head_dim);
    EXPECT_EQ(s.kv_heads, ts.kv_heads);
  }
  EXPECT_FALSE(gemma4_synthetic_preset("gemma4-27b"));
}


TEST(MakeCheckpointGemma4, TinyVariantRoundTripsAndDecodes) {
  const TempDir tmp;
  const std::string tdir = (tmp.path / "target").string(), adir = (tmp.path / "assistant").string();
  const test::Gemma4Shape shape;  // 7 layers: full at 5 and 6
  test::write_shrunk_gemma4_pair(shape, tmp.path.string());

  const auto ck = Gemma4Checkpoint::open(tdir);
  const Gemma4TextConfig& c = ck.config();
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 7);
  EXPECT_TRUE(c.layers[4].sliding);
  EXPECT_TRUE(c.layers[5].sliding == false && c.layers[6].sliding == false);
  EXPECT_TRUE(c.layers[6].k_eq_v);
  EXPECT_EQ(c.layers[6].head_dim, 32);
  const auto ack = Gemma4Checkpoint::open_assistant(adir);
  EXPECT_TRUE(ack.is_assistant());
  EXPECT_EQ(ack.token_ordering().size(), 512u);  // a permutation (checked by the loader)

  const std::vector<int32_t> prompt{2, 17, 300, 45, 9, 128, 77};
  const int n = 40;  // past the sliding window and the rings' wrap
  const RuntimeFactory factory = [&ck](int cap) {
    return make_cpu_gemma4_runtime(ck, cap, CpuRuntimeOptions{.threads = 2});
  };
  GenerateOptions g;
  g.max_new_tokens = n;
  g.ignore_eos = true;
  const std::vector<int32_t> greedy = generate_fresh(factory, prompt, g).tokens;
  ASSERT_EQ(greedy.size(), size_t(n));
  for (int K : {2, 3, 5}) {
    GenerateOptions s = g;
    s.block_size = K;
    ArmChoice choice;  // K = 3: the walk arm at the engine step's head (bench/verify_arms.h)
    choice.arm = K == 3 ? VerifyArm::Walk : VerifyArm::Batched;
    ArmHeadStage head(choice);
    GenerateResult res = generate_with_assistant(factory, adir, prompt, s, 2, &head);
    head.label(res.stats);
    EXPECT_EQ(res.tokens, greedy) << "K=" << K;
    EXPECT_EQ(res.stats.draft, "assistant");
    EXPECT_EQ(res.stats.counters.verify_chosen, verify_arm_name(choice.arm)) << "K=" << K;
    EXPECT_EQ(counter_violations(res.stats.counters), std::vector<std::string>{}) << "K=" << K;
  }

  // Same preset and seed: the same bytes, whatever the shard size.
  const std::string again = (tmp.path / "again").string();
  MakeCheckpointOptions o;
  o.quant = "bf16";
  o.seed = 3;
  o.shard_bytes = 64 << 10;  // several shards
  const MakeCheckpointReport r = make_gemma4_checkpoint(test::shrunk_gemma4_preset(shape, false), o, again);
  EXPECT_GT(r.files.size(), 1u);
  EXPECT_EQ(test::tensor_bytes(again), test::tensor_bytes(tdir));
}

TEST(MakeCheckpointGemma4, CliRefusesAnUnknownQuantOrPreset) {
  const TempDir tmp;
  const auto r = run_cli("make-checkpoint --preset gemma4-31b --quant q3 -o " + (tmp.path / "x").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("expected bf16, q4 or q8"), std::string::npos) << r.err;
  EXPECT_NE(run_cli("make-checkpoint --preset gemma4-3b -o " + (tmp.path / "y").string()).err.find("gemma4-31b"),
            std::string::npos);
}

}  // namespace
}  // namespace nextn
