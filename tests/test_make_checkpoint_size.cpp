// `make-checkpoint --size-only` (io/synthetic_size.cpp): the total is the
// bytes make_checkpoint writes (every quant, Qwen3.5 and Gemma 4 MoE), and
// each tensor-parallel rank's bytes are its part of the tensors actually
// written, worked out here from the stored tensors and the cut the CPU rank
// loader makes (backend/cpu/qwen35_shard.cpp); the CLI's line, JSON and
// refusals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli_util.h"
#include "gemma4_synthetic_util.h"
#include "io/checkpoint.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/synthetic.h"
#include "io/synthetic_gemma4.h"
#include "io/synthetic_specs.h"
#include "io/tensor_parallel_plan.h"
#include "synthetic_checkpoint_util.h"

namespace nextn {
namespace {

using test::TempDir;

// Every tensor-parallel cut of 2 falls on a 64-column group's edge (o_proj
// and out_proj: 64 columns a rank, the experts 64, the shared expert 128), so
// a rank's part of a q4 tensor is an exact share of its bytes. Not a preset.
const SyntheticPreset kAlignedMoe{"tp2-aligned", 64, 4, 0, 2, 1, 64, 2, 16, 2, 64, 4, 512, false, 4, 2, 128, 256};

struct Written {
  int tensors = 0;
  uint64_t bytes = 0;
};

Written written(const std::string& dir) {
  const TensorStore store = TensorStore::open(dir);
  Written w;
  for (const std::string& n : store.names()) {
    ++w.tensors;
    w.bytes += store.get(n).nbytes;
  }
  return w;
}

// The bytes rank s holds of the checkpoint in `dir`: every stored tensor
// whole, but those the loader cuts, which count their share of the axis it
// cuts (the rank's heads, channels or columns out of all). Exact for dense
// tensors, and for quantized ones when every cut is on a group edge.
uint64_t written_rank_bytes(const std::string& dir, const Qwen35Config& c, const TensorParallelShard& s) {
  const int64_t hd = c.head_dim, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const int64_t kv = s.kv_heads.size(), vh = s.gdn_value_heads.size();
  struct Share {
    int64_t held, whole;
  };
  auto share = [&](const std::string& name) -> std::optional<Share> {
    auto has = [&](const char* m) { return name.find(m) != std::string::npos; };
    if (has("self_attn.q_proj.")) return Share{s.q_heads.size() * 2 * hd, int64_t(c.num_attention_heads) * 2 * hd};
    if (has("self_attn.k_proj.") || has("self_attn.v_proj.")) return Share{kv * hd, int64_t(c.num_key_value_heads) * hd};
    if (has("self_attn.o_proj.")) return Share{s.q_heads.size() * hd, int64_t(c.num_attention_heads) * hd};
    if (has("linear_attn.in_proj_qkv.") || has("linear_attn.conv1d."))
      return Share{2 * s.gdn_key_heads.size() * dk + vh * dv, c.conv_dim()};
    if (has("linear_attn.in_proj_z.") || has("linear_attn.out_proj.")) return Share{vh * dv, c.value_dim()};
    if (has("linear_attn.in_proj_a.") || has("linear_attn.in_proj_b.") || has("linear_attn.A_log") ||
        has("linear_attn.dt_bias"))
      return Share{vh, c.linear_num_value_heads};
    if (has(".experts.") || has(".switch_mlp.")) return Share{s.expert_mlp.size(), c.moe_intermediate_size};
    if (has(".shared_expert.")) return Share{s.shared_expert_mlp.size(), c.shared_expert_intermediate_size};
    if (has("mlp.gate_proj.") || has("mlp.up_proj.") || has("mlp.down_proj.")) return Share{s.mlp.size(), c.intermediate_size};
    if (has("lm_head.")) return Share{s.vocab.size(), c.vocab_size};
    return std::nullopt;  // replicated: embeddings, norms, routers, shared_expert_gate, mtp.fc
  };
  const TensorStore store = TensorStore::open(dir);
  uint64_t n = 0;
  for (const std::string& name : store.names()) {
    const uint64_t bytes = store.get(name).nbytes;
    const auto sh = share(name);
    if (!sh) {
      n += bytes;
      continue;
    }
    EXPECT_EQ(bytes * uint64_t(sh->held) % uint64_t(sh->whole), 0u) << name;
    n += bytes * uint64_t(sh->held) / uint64_t(sh->whole);
  }
  return n;
}

TEST(MakeCheckpointSize, TotalIsWhatIsWrittenInEveryQuant) {
  for (const char* q : {"q4", "bf16", "fp8", "gptq4"}) {
    SCOPED_TRACE(q);
    const TempDir d;
    test::make_preset("test-tiny-moe", d.str(), q, 5);
    const Written w = written(d.str());
    const SyntheticCheckpointSize s = synthetic_checkpoint_size(*synthetic_preset("test-tiny-moe"), q);
    EXPECT_EQ(s.tensors, w.tensors);
    EXPECT_EQ(s.total, w.bytes);
    EXPECT_EQ(s.per_rank, std::vector<uint64_t>{w.bytes});  // one rank holds it all
  }
}

TEST(MakeCheckpointSize, Gemma4MoeTotalIsWhatIsWritten) {
  for (int width : {64, 48})  // 48: the experts' down_proj stays dense in q4 / q8
    for (const char* q : {"bf16", "q4", "q8"}) {
      SCOPED_TRACE(std::string(q) + " expert width " + std::to_string(width));
      const Gemma4SyntheticPreset p = test::shrunk_gemma4_preset(test::moe_gemma4_shape(width), false);
      const TempDir d;
      MakeCheckpointOptions o;
      o.quant = q;
      make_gemma4_checkpoint(p, o, d.str());
      const Written w = written(d.str());
      const SyntheticCheckpointSize s = gemma4_synthetic_checkpoint_size(p, q);
      EXPECT_EQ(s.tensors, w.tensors);
      EXPECT_EQ(s.total, w.bytes);
      EXPECT_EQ(s.per_rank, std::vector<uint64_t>{w.bytes});
    }
}

// Each rank's bytes at tensor parallel 2 equal its part of the tensors
// written: the dense test preset, test-tiny-moe in bf16 (its q4 cuts fall
// inside groups) and a MoE shape whose cuts are all on group edges in q4
// and bf16. At 1, the whole.
TEST(MakeCheckpointSize, RankBytesAreTheRanksPartOfTheWrittenTensors) {
  struct Case {
    SyntheticPreset preset;
    const char* quant;
  };
  const std::vector<Case> cases = {{*synthetic_preset("test-tiny"), "bf16"},
                                   {*synthetic_preset("test-tiny-moe"), "bf16"},
                                   {kAlignedMoe, "bf16"},
                                   {kAlignedMoe, "q4"}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.preset.name + " " + k.quant);
    const TempDir d;
    MakeCheckpointOptions o;
    o.quant = k.quant;
    make_checkpoint(k.preset, o, d.str());
    const Qwen35Config c = Qwen35Checkpoint::open(d.str()).config();
    const SyntheticCheckpointSize one = synthetic_checkpoint_size(k.preset, k.quant, 1);
    EXPECT_EQ(one.per_rank, std::vector<uint64_t>{written(d.str()).bytes});
    const SyntheticCheckpointSize two = synthetic_checkpoint_size(k.preset, k.quant, 2);
    ASSERT_EQ(two.per_rank.size(), 2u);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(two.per_rank[size_t(r)], written_rank_bytes(d.str(), c, tensor_parallel_shard(c, 2, r))) << "rank " << r;
      EXPECT_LT(two.per_rank[size_t(r)], one.total) << "rank " << r;
    }
  }
}

// A cut inside a quantization group counts the group on both sides: a q4
// [8, 64] matrix split by columns over 2 ranks of 32 (one group of 64 per
// row) gives each rank half the packed words but every scale and bias.
TEST(MakeCheckpointSize, ACutInsideAGroupCountsTheGroupOnBothSides) {
  const Qwen35Config c =
      parse_qwen35_config(synthetic_config_json(*synthetic_preset("test-tiny-moe"), "q4"), "config.json");
  ASSERT_EQ(c.num_attention_heads, 2);
  std::vector<Spec> v;
  push_matrix_specs(v, "m", 8, 64, 0.02f, 4, 0, MatrixSplit{TensorParallelSplit::QueryHeads, 32, true});
  ASSERT_EQ(v.size(), 3u);  // words [8, 8] u32, scales and biases [8, 1] bf16
  EXPECT_EQ(rank_tensor_bytes(v, c, tensor_parallel_shard(c, 1, 0)), 8u * 8 * 4 + 2 * 8 * 2);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(rank_tensor_bytes(v, c, tensor_parallel_shard(c, 2, r)), 8u * 4 * 4 + 2 * 8 * 2);
  // Split by rows instead, nothing is shared.
  v.clear();
  push_matrix_specs(v, "m", 64, 64, 0.02f, 4, 0, MatrixSplit{TensorParallelSplit::QueryHeads, 32, false});
  for (int r = 0; r < 2; ++r) EXPECT_EQ(rank_tensor_bytes(v, c, tensor_parallel_shard(c, 2, r)), 32u * 8 * 4 + 2 * 32 * 2);
}

TEST(MakeCheckpointSize, CliPrintsTheSizesWithoutWriting) {
  const auto p = synthetic_preset("qwen3.5-397b-a17b");
  const SyntheticCheckpointSize s = synthetic_checkpoint_size(*p, "q4", 4);
  auto r = test::run_cli("make-checkpoint --preset qwen3.5-397b-a17b --quant q4 --size-only --tensor-parallel 4 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["preset"], "qwen3.5-397b-a17b");
  EXPECT_EQ(j["quant"], "q4");
  EXPECT_EQ(j["tensors"], s.tensors);
  EXPECT_EQ(j["total_bytes"], s.total);
  EXPECT_EQ(j["tensor_parallel"], 4);
  EXPECT_EQ(j["rank_bytes"].get<std::vector<uint64_t>>(), s.per_rank);
  r = test::run_cli("make-checkpoint --preset qwen3.5-397b-a17b --quant q4 --size-only --tensor-parallel 4");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string ranks = std::to_string(s.per_rank[0]) + " " + std::to_string(s.per_rank[1]) + " " +
                            std::to_string(s.per_rank[2]) + " " + std::to_string(s.per_rank[3]);
  EXPECT_NE(r.out.find(std::to_string(s.total) + " bytes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor parallel 4: rank bytes " + ranks + " ("), std::string::npos) << r.out;
  // A Gemma 4 preset: its default quant (bf16), one rank.
  const auto g = gemma4_synthetic_checkpoint_size(*gemma4_synthetic_preset("gemma4-26b-a4b"), "bf16");
  r = test::run_cli("make-checkpoint --preset gemma4-26b-a4b --size-only");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("preset gemma4-26b-a4b, bf16: " + std::to_string(g.tensors) + " tensors, " +
                       std::to_string(g.total) + " bytes"),
            std::string::npos)
      << r.out;
}

TEST(MakeCheckpointSize, BadFlagsAreOneErrorLine) {
  const TempDir d;
  const std::string out = " -o " + (d.path / "x").string();
  using test::expect_one_error_line;
  expect_one_error_line(test::run_cli("make-checkpoint --preset test-tiny-moe --size-only" + out), "drop --out");
  expect_one_error_line(test::run_cli("make-checkpoint --preset test-tiny-moe --tensor-parallel 2" + out),
                        "--tensor-parallel needs --size-only");
  expect_one_error_line(test::run_cli("make-checkpoint --preset test-tiny-moe --json" + out), "--json needs --size-only");
  expect_one_error_line(test::run_cli("make-checkpoint --preset qwen3.5-397b-a17b --size-only --tensor-parallel 3"),
                        "--tensor-parallel 3: the model's 32 attention query heads");
  expect_one_error_line(test::run_cli("make-checkpoint --preset qwen3.5-397b-a17b --size-only --tensor-parallel 0"),
                        "--tensor-parallel 0");
  expect_one_error_line(test::run_cli("make-checkpoint --preset gemma4-26b-a4b --size-only --tensor-parallel 2"),
                        "Gemma 4 is not split");
  expect_one_error_line(test::run_cli("make-checkpoint --preset qwen3.5-122b-a10b --size-only --quant q3"),
                        "--quant 'q3'");
  expect_one_error_line(test::run_cli("make-checkpoint --preset qwen3.5-999b --size-only"), "unknown --preset");
  EXPECT_FALSE(std::filesystem::exists(d.path / "x"));
}

}  // namespace
}  // namespace nextn
