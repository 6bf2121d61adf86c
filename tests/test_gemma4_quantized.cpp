// MLX affine-quantized Gemma 4 checkpoints on the CPU runtime: a q4 / q8
// target + assistant from the make-checkpoint generator (every matrix
// quantized) against the same pair dequantized to dense F32 (the oracle: the
// dequantized values are exact in fp32, so logits and tokens must be equal,
// not close); speculative output equals greedy for K = 2..8; `nextn quantize`
// on a bf16 pair gives a checkpoint that loads and decodes; broken quantized
// tensors give one error line naming the tensor.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/gemma4.h"
#include "bench/verify_arms.h"
#include "cli_util.h"
#include "core/error.h"
#include "fixture_util.h"
#include "gemma4_synthetic_util.h"
#include "io/checkpoint.h"
#include "io/gemma4_checkpoint.h"
#include "io/quant_config.h"
#include "io/safetensors.h"
#include "speculative/gemma4_drafter.h"
#include "engine/generate.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using test::run_cli;
using test::TempDir;

// `src` rewritten into `dst` as one model.safetensors: `edit` may change or
// drop (return false) each tensor; config.json copied, or replaced by `config`.
template <typename Edit>
void rewrite(const std::string& src, const std::string& dst, Edit edit, const std::string* config = nullptr) {
  fs::create_directories(dst);
  const TensorStore store = TensorStore::open(src);
  std::vector<TensorToWrite> out;
  std::deque<std::vector<uint8_t>> owned;
  for (const auto& n : store.names()) {
    const TensorView& t = store.get(n);
    TensorToWrite w{n, t.dtype, t.shape, t.data, t.nbytes};
    if (edit(store, w, owned)) out.push_back(w);
  }
  write_safetensors((fs::path(dst) / "model.safetensors").string(), out);
  test::write_file(fs::path(dst) / "config.json", config ? *config : test::read_file(fs::path(src) / "config.json"));
}

// The dense F32 copy of a quantized checkpoint: every quantized matrix
// dequantized (w = scale * q + bias, exact in fp32), the rest as stored, and
// config.json without its quantization blocks.
void write_dequantized_copy(const std::string& src, const std::string& dst) {
  auto cfg = nlohmann::ordered_json::parse(test::read_file(fs::path(src) / "config.json"));
  const QuantConfig q = parse_quant_config("config.json", nlohmann::json::parse(cfg.dump()));
  ASSERT_TRUE(q.present);
  cfg.erase("quantization");
  cfg.erase("quantization_config");
  const std::string dense_config = cfg.dump(2);
  rewrite(
      src, dst,
      [&](const TensorStore& store, TensorToWrite& w, std::deque<std::vector<uint8_t>>& owned) {
        auto module_of = [&](const char* suffix) {
          return w.name.ends_with(suffix) ? w.name.substr(0, w.name.size() - std::string(suffix).size()) : "";
        };
        if (!module_of(".scales").empty() || !module_of(".biases").empty()) return false;
        const std::string mod = module_of(".weight");
        const TensorView* scales = mod.empty() ? nullptr : store.find(mod + ".scales");
        if (!scales) return true;
        WeightRef ref;
        ref.name = w.name;
        ref.weight = &store.get(w.name);
        ref.scales = scales;
        ref.biases = store.find(mod + ".biases");
        ref.quant = *q.for_module(mod);
        ref.rows = ref.weight->shape[0];
        ref.cols = scales->shape[1] * ref.quant.group_size;
        auto& buf = owned.emplace_back(size_t(ref.rows * ref.cols) * 4);
        for (int64_t r = 0; r < ref.rows; ++r)
          dequantize_row(ref, r, reinterpret_cast<float*>(buf.data()) + r * ref.cols);
        w = {w.name, DType::F32, {ref.rows, ref.cols}, buf.data(), buf.size()};
        return true;
      },
      &dense_config);
}

// A quantized pair (dir/target, dir/assistant) and its dequantized copy (dir/dense-*).
struct QuantizedPair {
  TempDir tmp;
  std::string target, assistant, dense_target, dense_assistant;
  explicit QuantizedPair(const std::string& quant) {
    test::write_shrunk_gemma4_pair(test::quantizable_gemma4_shape(), tmp.str(), quant);
    target = (tmp.path / "target").string();
    assistant = (tmp.path / "assistant").string();
    dense_target = (tmp.path / "dense-target").string();
    dense_assistant = (tmp.path / "dense-assistant").string();
    write_dequantized_copy(target, dense_target);
    write_dequantized_copy(assistant, dense_assistant);
  }
};

RuntimeFactory cpu_factory(const Gemma4Checkpoint& ck) {
  return [&ck](int cap) { return make_cpu_gemma4_runtime(ck, cap, CpuRuntimeOptions{.threads = 2}); };
}

const std::vector<int32_t> kPrompt{2, 17, 300, 45, 9, 128, 77};

// Every matrix quantized; logits and greedy tokens equal the dequantized
// copy's exactly; speculative with the assistant (and with the dequantized
// assistant) equals greedy for K = 2..8.
void check_quantized_pair(const std::string& quant, int bits) {
  const QuantizedPair pair(quant);
  const auto ck = Gemma4Checkpoint::open(pair.target);
  const auto dense = Gemma4Checkpoint::open(pair.dense_target);
  const auto ack = Gemma4Checkpoint::open_assistant(pair.assistant);
  const Gemma4TextConfig& c = ck.config();
  ASSERT_TRUE(c.quant.present);
  EXPECT_EQ(c.quant.defaults.bits, bits);
  const WeightRef embed = ck.matrix("embed_tokens", c.vocab_size, c.hidden_size);
  EXPECT_TRUE(embed.quantized());
  EXPECT_EQ(embed.quant.group_size, 64);
  EXPECT_TRUE(ck.matrix("layers.6.mlp.down_proj", c.hidden_size, c.intermediate_size).quantized());
  EXPECT_TRUE(ack.matrix("pre_projection", ack.config().hidden_size, 2 * c.hidden_size, true).quantized());
  EXPECT_TRUE(ack.matrix("masked_embedding.centroids", ack.assistant_config().num_centroids,
                         ack.config().hidden_size, true)
                  .quantized());
  EXPECT_FALSE(dense.matrix("embed_tokens", c.vocab_size, c.hidden_size).quantized());
  EXPECT_EQ(ck.embed_scale(), dense.embed_scale());  // sqrt(64) = 8, exact in every dtype

  // Teacher-forced logits: bit for bit the dequantized model's.
  {
    auto q = make_cpu_gemma4_runtime(ck, 64, CpuRuntimeOptions{.threads = 2});
    auto d = make_cpu_gemma4_runtime(dense, 64, CpuRuntimeOptions{.threads = 2});
    q->target_forward(kPrompt);
    d->target_forward(kPrompt);
    std::vector<float> a(size_t(c.vocab_size)), b(size_t(c.vocab_size));
    for (int row = 0; row < int(kPrompt.size()); ++row) {
      q->head_logits(row, a.data());
      d->head_logits(row, b.data());
      ASSERT_EQ(a, b) << quant << " row " << row;
    }
  }

  GenerateOptions g;
  g.max_new_tokens = 40;  // past the sliding window and the rings' wrap
  g.ignore_eos = true;
  const std::vector<int32_t> greedy = generate_fresh(cpu_factory(ck), kPrompt, g).tokens;
  ASSERT_EQ(greedy.size(), 40u);
  EXPECT_EQ(generate_fresh(cpu_factory(dense), kPrompt, g).tokens, greedy) << quant;
  for (int K = 2; K <= 8; ++K) {
    GenerateOptions s = g;
    s.block_size = K;
    ArmChoice choice;  // odd K: the walk arm at the engine step's head (bench/verify_arms.h)
    choice.arm = K % 2 ? VerifyArm::Walk : VerifyArm::Batched;
    ArmHeadStage head(choice);
    GenerateResult r = generate_with_assistant(cpu_factory(ck), pair.assistant, kPrompt, s, 2, &head);
    head.label(r.stats);
    EXPECT_EQ(r.tokens, greedy) << quant << " K=" << K;
    EXPECT_EQ(r.stats.draft, "assistant");
    EXPECT_EQ(r.stats.counters.verify_chosen, verify_arm_name(choice.arm)) << quant << " K=" << K;
    EXPECT_EQ(counter_violations(r.stats.counters), std::vector<std::string>{}) << quant << " K=" << K;
  }
  // The dequantized assistant drafts exactly what the quantized one does.
  GenerateOptions s = g;
  s.block_size = 4;
  const GenerateResult rq = generate_with_assistant(cpu_factory(ck), pair.assistant, kPrompt, s, 2);
  const GenerateResult rd = generate_with_assistant(cpu_factory(dense), pair.dense_assistant, kPrompt, s, 2);
  EXPECT_EQ(rq.tokens, rd.tokens);
  EXPECT_EQ(rq.stats.counters.accepted, rd.stats.counters.accepted) << quant;
  EXPECT_EQ(rq.stats.counters.drafted, rd.stats.counters.drafted) << quant;
}

TEST(Gemma4Quantized, Q4PairEqualsItsDequantizedCopyAndSpeculatesExactly) { check_quantized_pair("q4", 4); }

TEST(Gemma4Quantized, Q8PairEqualsItsDequantizedCopyAndSpeculatesExactly) { check_quantized_pair("q8", 8); }

TEST(Gemma4Quantized, SyntheticBytesDependOnPresetQuantAndSeedOnly) {
  const TempDir tmp;
  const auto p = test::shrunk_gemma4_preset(test::quantizable_gemma4_shape(), false);
  MakeCheckpointOptions o;
  o.quant = "q4";
  o.seed = 3;
  make_gemma4_checkpoint(p, o, (tmp.path / "a").string());
  o.shard_bytes = 64 << 10;  // several shards, other thread count: the same bytes
  o.threads = 1;
  make_gemma4_checkpoint(p, o, (tmp.path / "b").string());
  EXPECT_EQ(test::tensor_bytes((tmp.path / "a").string()), test::tensor_bytes((tmp.path / "b").string()));
  o.seed = 4;
  make_gemma4_checkpoint(p, o, (tmp.path / "c").string());
  EXPECT_NE(test::tensor_bytes((tmp.path / "a").string()), test::tensor_bytes((tmp.path / "c").string()));
  // Norms, layer_scalar and the assistant's token_ordering stay dense.
  const TensorStore s = TensorStore::open((tmp.path / "a").string());
  EXPECT_EQ(s.get("model.language_model.norm.weight").dtype, DType::BF16);
  EXPECT_EQ(s.get("model.language_model.layers.0.layer_scalar").dtype, DType::BF16);
  EXPECT_EQ(s.get("model.language_model.layers.0.self_attn.q_proj.weight").dtype, DType::U32);
}

// `nextn quantize` on a bf16 pair: both halves quantized under their stored
// names (norms, token_ordering as stored); the result decodes, and
// speculative output with the quantized assistant equals greedy.
TEST(Gemma4Quantized, QuantizeCommandWritesALoadableGemmaPair) {
  const TempDir tmp;
  test::write_shrunk_gemma4_pair(test::quantizable_gemma4_shape(), tmp.str());
  const std::string t = (tmp.path / "target").string(), a = (tmp.path / "assistant").string();
  const std::string tq = (tmp.path / "tq").string(), aq = (tmp.path / "aq").string();
  const auto rt = run_cli("quantize -m " + t + " -o " + tq + " --bits 4 --group-size 32");
  ASSERT_EQ(rt.code, 0) << rt.err;
  EXPECT_NE(rt.out.find("quantized 48 matrices"), std::string::npos) << rt.out;  // embed + 5 x 7 (sliding) + 2 x 6 (full: K = V)
  const auto ra = run_cli("quantize -m " + a + " -o " + aq + " --bits 8");
  ASSERT_EQ(ra.code, 0) << ra.err;

  const auto ck = Gemma4Checkpoint::open(tq);
  const Gemma4TextConfig& c = ck.config();
  const WeightRef e = ck.matrix("embed_tokens", c.vocab_size, c.hidden_size);
  ASSERT_TRUE(e.quantized());
  EXPECT_EQ(e.quant.bits, 4);
  EXPECT_EQ(e.quant.group_size, 32);
  EXPECT_EQ(e.scales->dtype, DType::BF16);  // bf16 model: bf16 scales, as MLX
  EXPECT_EQ(ck.store().get(ck.stored("norm.weight")).dtype, DType::BF16);
  const auto ack = Gemma4Checkpoint::open_assistant(aq);
  EXPECT_EQ(ack.matrix("post_projection", c.hidden_size, ack.config().hidden_size, true).quant.bits, 8);
  EXPECT_EQ(ack.token_ordering(), Gemma4Checkpoint::open_assistant(a).token_ordering());

  GenerateOptions g;
  g.max_new_tokens = 24;
  g.ignore_eos = true;
  const std::vector<int32_t> greedy = generate_fresh(cpu_factory(ck), kPrompt, g).tokens;
  ASSERT_EQ(greedy.size(), 24u);
  for (int K : {2, 5, 8}) {
    GenerateOptions s = g;
    s.block_size = K;
    EXPECT_EQ(generate_with_assistant(cpu_factory(ck), aq, kPrompt, s, 2).tokens, greedy) << "K=" << K;
  }
  // Already quantized: refused, naming the directory.
  const auto again = run_cli("quantize -m " + tq + " -o " + (tmp.path / "tqq").string());
  EXPECT_EQ(again.code, 1);
  EXPECT_NE(again.err.find("already quantized"), std::string::npos) << again.err;
}

// One error line naming the tensor, from the CLI, for a broken quantized target.
void expect_one_error_line(const std::string& dir, const std::string& tensor, const std::string& what) {
  const auto r = run_cli("generate -m " + dir + " --prompt-ids 1,2,3 -n 2");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(r.err.starts_with("error: ")) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // one line
  EXPECT_NE(r.err.find(tensor), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
}

TEST(Gemma4Quantized, BrokenQuantizedTensorsGiveOneErrorLineNamingTheTensor) {
  const TempDir tmp;
  test::write_shrunk_gemma4_pair(test::quantizable_gemma4_shape(), tmp.str(), "q4");
  const std::string src = (tmp.path / "target").string();
  const std::string mod = "model.language_model.layers.2.mlp.up_proj";

  const std::string no_scales = (tmp.path / "no-scales").string();
  rewrite(src, no_scales, [&](const TensorStore&, TensorToWrite& w, auto&) { return w.name != mod + ".scales"; });
  expect_one_error_line(no_scales, mod + ".weight", "no '" + mod + ".scales'");

  const std::string no_biases = (tmp.path / "no-biases").string();
  rewrite(src, no_biases, [&](const TensorStore&, TensorToWrite& w, auto&) { return w.name != mod + ".biases"; });
  expect_one_error_line(no_biases, mod + ".biases", "missing tensor");

  const std::string packed_shape = (tmp.path / "packed-shape").string();
  rewrite(src, packed_shape, [&](const TensorStore&, TensorToWrite& w, auto&) {
    if (w.name == mod + ".weight") w.shape = {w.shape[0] / 2, w.shape[1] * 2};  // the same bytes
    return true;
  });
  expect_one_error_line(packed_shape, mod + ".weight", "4-bit packing");

  const std::string scales_shape = (tmp.path / "scales-shape").string();
  rewrite(src, scales_shape, [&](const TensorStore&, TensorToWrite& w, auto&) {
    if (w.name == mod + ".scales") w.shape = {w.shape[1], w.shape[0]};
    return true;
  });
  expect_one_error_line(scales_shape, mod + ".scales", "group size 64");

  // Scales stored but config.json without its quantization block.
  auto cfg = nlohmann::ordered_json::parse(test::read_file(fs::path(src) / "config.json"));
  cfg.erase("quantization");
  cfg.erase("quantization_config");
  const std::string no_block = (tmp.path / "no-block").string();
  const std::string text = cfg.dump(2);
  rewrite(src, no_block, [](const TensorStore&, TensorToWrite&, auto&) { return true; }, &text);
  expect_one_error_line(no_block, ".scales", "no 'quantization'");
}

// mlx-lm's layout (language_model.model.*, language_model.lm_head) opens too.
TEST(Gemma4Quantized, MlxLayoutTargetDecodesAsTheHfLayoutOne) {
  const TempDir tmp;
  test::write_shrunk_gemma4_pair(test::quantizable_gemma4_shape(), tmp.str(), "q4");
  const std::string src = (tmp.path / "target").string(), mlx = (tmp.path / "mlx").string();
  const std::string hf = "model.language_model.";
  rewrite(src, mlx, [&](const TensorStore&, TensorToWrite& w, auto&) {
    if (w.name.starts_with(hf)) w.name = "language_model.model." + w.name.substr(hf.size());
    return true;
  });
  const auto a = Gemma4Checkpoint::open(src);
  const auto b = Gemma4Checkpoint::open(mlx);
  EXPECT_EQ(b.stored("norm"), "language_model.model.norm");
  GenerateOptions g;
  g.max_new_tokens = 16;
  g.ignore_eos = true;
  EXPECT_EQ(generate_fresh(cpu_factory(b), kPrompt, g).tokens, generate_fresh(cpu_factory(a), kPrompt, g).tokens);
}

}  // namespace
}  // namespace nextn
