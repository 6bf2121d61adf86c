// MLX affine quantizer (bit-exact against mlx.core.quantize), error bounds,
// `nextn quantize` output layout, and the inspect/quantize CLI.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "cli_util.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/quantize.h"

namespace nextn::synth {
// Defined in test_checkpoint.cpp: H 64, intermediate 96, vocab 128, 2 layers
// (0 linear, 1 full), MTP head; norms random (HF: stored as w).
void write_synth_model(const std::string& dir, Layout layout, bool tied, bool mtp, DType dtype, bool visual);
}  // namespace nextn::synth

namespace nextn {
namespace {

namespace fs = std::filesystem;
using test::run_cli;
using test::TempDir;

// ---- the quantizer against MLX ----

// The golden input: exact rationals, and rows of zeros, a constant, tiny
// values and an offset range.
std::vector<float> golden_input(bool bf16) {
  const int R = 8, C = 128;
  std::vector<float> w(R * C);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const int k = (r * 131 + c * 71 + (c * c) % 13) % 257 - 128;
      float v;
      if (r == 4) {
        v = 0.0f;
      } else if (r == 5) {
        v = 0.37f;
      } else if (r == 6) {
        v = float(k) * 1e-9f;
      } else if (r == 7) {
        v = float(k) / 256.0f + 3.0f;
      } else {
        v = float(k) / 256.0f * float(1 + r) * float(r % 2 ? -1 : 1);
      }
      w[size_t(r * C + c)] = bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
    }
  return w;
}

uint64_t fnv1a(const void* p, size_t n, uint64_t h) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

struct Golden {
  bool bf16;
  int bits, group;
  uint64_t hash;  // FNV-1a of packed words, then scales, then biases (f32 LE, or bf16 LE for bf16)
  uint32_t scale0, bias0;
};

// From mlx 0.32.4 (pip mlx[cpu], Linux): mx.quantize(mx.array(w)[.astype(bf16)], group_size, bits).
constexpr Golden kGolden[] = {
    {false, 4, 32, 0x831d8057ab866c06ull, 0x3d800000u, 0xbf000000u},
    {false, 4, 64, 0x8e1ae3b1ec9325afull, 0x3d800000u, 0xbf000000u},
    {false, 4, 128, 0x0e8aa851949def4bull, 0x3d800000u, 0xbf000000u},
    {false, 8, 32, 0x5649441399accef8ull, 0x3b7a232du, 0xbf000000u},
    {false, 8, 64, 0xb4ea66d08cc1a042ull, 0x3b7c0fc1u, 0xbf000000u},
    {false, 8, 128, 0x4bf60337e3593471ull, 0x3b7e03f8u, 0xbf000000u},
    {true, 4, 32, 0xc9739a4ec5f0b424ull, 0x3d800000u, 0xbf000000u},
    {true, 4, 64, 0x780e66e095c1aab2ull, 0x3d800000u, 0xbf000000u},
    {true, 4, 128, 0x40db59facd059252ull, 0x3d800000u, 0xbf000000u},
    {true, 8, 32, 0xcc98b8f7a7374ac5ull, 0x3b7a0000u, 0xbf000000u},
    {true, 8, 64, 0xf99bb6b180bce058ull, 0x3b7c0000u, 0xbf000000u},
    {true, 8, 128, 0x946dc5682f2e9331ull, 0x3b7e0000u, 0xbf000000u},
};

TEST(Quantize, BitExactAgainstMlx) {
  const int R = 8, C = 128;
  for (const Golden& g : kGolden) {
    const auto w = golden_input(g.bf16);
    std::vector<uint32_t> packed(size_t(R * C * g.bits / 32));
    std::vector<float> s(size_t(R * C / g.group)), b(s.size());
    quantize_affine(w.data(), R, C, g.bits, g.group, packed.data(), s.data(), b.data());
    uint64_t h = fnv1a(packed.data(), packed.size() * 4, 0xcbf29ce484222325ull);
    bool negative = false;
    for (const auto* v : {&s, &b})
      for (float x : *v) {
        negative |= x < 0 && v == &s;
        if (g.bf16) {
          const uint16_t bits16 = f32_to_bf16(x);
          h = fnv1a(&bits16, 2, h);
        } else {
          h = fnv1a(&x, 4, h);
        }
      }
    const float s0 = g.bf16 ? bf16_to_f32(f32_to_bf16(s[0])) : s[0];
    uint32_t s0_bits, b0_bits;
    std::memcpy(&s0_bits, &s0, 4);
    std::memcpy(&b0_bits, &b[0], 4);
    EXPECT_EQ(h, g.hash) << "bf16 " << g.bf16 << " bits " << g.bits << " group " << g.group;
    EXPECT_EQ(s0_bits, g.scale0);
    EXPECT_EQ(b0_bits, g.bias0);
    EXPECT_TRUE(negative) << "the golden input has groups whose max magnitude is positive";
  }
}

TEST(Quantize, DequantizeErrorBounds) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  const int64_t R = 16, C = 384;
  std::vector<float> w(size_t(R * C));
  for (auto& x : w) x = nd(rng);
  for (int64_t c = 0; c < C; c += 97) w[size_t(c)] = 1.5f;  // a few outliers
  for (int bits : {4, 8})
    for (int group : {32, 64, 128}) {
      std::vector<uint32_t> packed(size_t(R * C * bits / 32));
      std::vector<float> s(size_t(R * C / group)), b(s.size());
      quantize_affine(w.data(), R, C, bits, group, packed.data(), s.data(), b.data());
      TensorView wv{"w", DType::U32, {R, C * bits / 32}, reinterpret_cast<const uint8_t*>(packed.data()),
                    packed.size() * 4, nullptr};
      TensorView sv{"s", DType::F32, {R, C / group}, reinterpret_cast<const uint8_t*>(s.data()), s.size() * 4, nullptr};
      TensorView bv{"b", DType::F32, {R, C / group}, reinterpret_cast<const uint8_t*>(b.data()), b.size() * 4, nullptr};
      WeightRef ref{"w", &wv, &sv, &bv, WeightCodec::Dense, {bits, group}, R, C};
      std::vector<float> row(static_cast<size_t>(C));
      double worst = 0;
      for (int64_t r = 0; r < R; ++r) {
        dequantize_row(ref, r, row.data());
        for (int64_t gi = 0; gi < C / group; ++gi) {
          const float scale = s[size_t(r * (C / group) + gi)];
          float lo = INFINITY, hi = -INFINITY;
          for (int64_t c = gi * group; c < (gi + 1) * group; ++c) {
            lo = std::min(lo, w[size_t(r * C + c)]);
            hi = std::max(hi, w[size_t(r * C + c)]);
          }
          // The larger-magnitude edge is exactly representable.
          const float edge = std::fabs(lo) > std::fabs(hi) ? lo : hi;
          bool edge_exact = false;
          const float bias = b[size_t(r * (C / group) + gi)];
          const float far = bias + scale * float((1 << bits) - 1);  // q = 2^bits - 1
          for (int64_t c = gi * group; c < (gi + 1) * group; ++c) {
            const double err = std::fabs(double(row[size_t(c)]) - w[size_t(r * C + c)]);
            // Half a step, except at the far end: MLX rounds the scale so the
            // near edge is exact, which can push the far edge past 2^bits - 1
            // (clamped): at most one step there.
            if (row[size_t(c)] == far) {
              EXPECT_LE(err, std::fabs(scale) * (1 + 1e-5) + 1e-7) << bits << "/" << group;
            } else {
              EXPECT_LE(err, std::fabs(scale) * 0.5 * (1 + 1e-5) + 1e-7) << bits << "/" << group;
            }
            worst = std::max(worst, err / std::fabs(scale));
            edge_exact |= w[size_t(r * C + c)] == edge && row[size_t(c)] == edge;
          }
          EXPECT_TRUE(edge_exact);
        }
      }
      EXPECT_LE(worst, 1.0 + 1e-5);
    }
}

TEST(Quantize, RejectsBadParams) {
  std::vector<float> w(64, 1.0f);
  std::vector<uint32_t> p(64);
  std::vector<float> s(4), b(4);
  EXPECT_THROW(quantize_affine(w.data(), 1, 64, 3, 32, p.data(), s.data(), b.data()), Error);
  EXPECT_THROW(quantize_affine(w.data(), 1, 64, 4, 48, p.data(), s.data(), b.data()), Error);
  EXPECT_THROW(quantize_affine(w.data(), 1, 48, 4, 32, p.data(), s.data(), b.data()), Error);
}

// ---- nextn quantize: output layout ----

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

// Dequantized q matches a: within one step |scale| (MLX's bound: half a step
// except at the clamped far end), plus the rounding of bf16/f16-stored scales
// and biases (2^-8 relative, times q <= 2^bits - 1).
void expect_matrix_close(const Qwen35Checkpoint& a, const Qwen35Checkpoint& q, const std::string& logical, int64_t rows,
                         int64_t cols) {
  const WeightRef wa = logical == "lm_head" ? a.lm_head() : a.matrix(logical, rows, cols);
  const WeightRef wq = logical == "lm_head" ? q.lm_head() : q.matrix(logical, rows, cols);
  std::vector<float> ra(static_cast<size_t>(cols)), rq(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(wa, r, ra.data());
    dequantize_row(wq, r, rq.data());
    if (!wq.quantized()) {
      ASSERT_EQ(ra, rq) << logical;
      continue;
    }
    const int64_t gs = wq.quant.group_size, groups = cols / gs;
    const double qmax = double((1 << wq.quant.bits) - 1);
    for (int64_t g = 0; g < groups; ++g) {
      const double s = std::fabs(load_float(wq.scales->dtype, wq.scales->data, size_t(r * groups + g)));
      const double b = std::fabs(load_float(wq.biases->dtype, wq.biases->data, size_t(r * groups + g)));
      const double lowp = wq.scales->dtype == DType::F32 ? 0.0 : (s * qmax + b) * (1.0 / 256);
      const double tol = s * (1 + 1e-5) + lowp + 1e-7;
      for (int64_t c = g * gs; c < (g + 1) * gs; ++c)
        ASSERT_LE(std::fabs(double(ra[size_t(c)]) - rq[size_t(c)]), tol) << logical << " [" << r << ", " << c << "]";
    }
  }
}

TEST(QuantizeCheckpoint, MlxLayoutFromConditionalGeneration) {
  TempDir in, out;
  synth::write_synth_model(in.str(), Layout::ConditionalGeneration, false, true, DType::BF16, true);
  const fs::path od = out.path / "q";
  QuantizeReport rep = quantize_checkpoint(in.str(), od.string(), {4, 64});
  EXPECT_EQ(rep.dropped, 2);  // model.visual.*
  EXPECT_GT(rep.quantized, 0);

  const auto st = TensorStore::open(od.string());
  auto has = [&](const std::string& n) { return st.find(n) != nullptr; };
  for (const auto& n : st.names()) {
    EXPECT_TRUE(n.starts_with("language_model.model.") || n.starts_with("language_model.lm_head.") ||
                n.starts_with("mtp."))
        << n;
  }
  // A quantized Linear: U32 [rows, cols/8], bf16 scales/biases [rows, cols/64].
  const TensorView& up = st.get("language_model.model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(up.dtype, DType::U32);
  EXPECT_EQ(up.shape, (std::vector<int64_t>{96, 8}));
  EXPECT_EQ(st.get("language_model.model.layers.0.mlp.up_proj.scales").dtype, DType::BF16);
  EXPECT_EQ(st.get("language_model.model.layers.0.mlp.up_proj.scales").shape, (std::vector<int64_t>{96, 1}));
  EXPECT_EQ(st.get("language_model.model.layers.0.mlp.up_proj.biases").shape, (std::vector<int64_t>{96, 1}));
  // Input size 96 is not a multiple of 64: dense, as stored.
  EXPECT_EQ(st.get("language_model.model.layers.0.mlp.down_proj.weight").dtype, DType::BF16);
  EXPECT_FALSE(has("language_model.model.layers.0.mlp.down_proj.scales"));
  // The embedding and the untied head are quantized too.
  EXPECT_TRUE(has("language_model.model.embed_tokens.scales"));
  EXPECT_TRUE(has("language_model.lm_head.scales"));
  EXPECT_EQ(st.get("language_model.lm_head.weight").shape, (std::vector<int64_t>{128, 8}));
  // conv1d [C, K, 1]; A_log, dt_bias, linear_attn.norm as stored; norms F32.
  EXPECT_EQ(st.get("language_model.model.layers.0.linear_attn.conv1d.weight").shape,
            (std::vector<int64_t>{128, 4, 1}));
  EXPECT_EQ(st.get("language_model.model.layers.0.linear_attn.A_log").dtype, DType::BF16);
  EXPECT_EQ(st.get("language_model.model.layers.0.linear_attn.dt_bias").dtype, DType::BF16);
  EXPECT_EQ(st.get("language_model.model.layers.0.linear_attn.norm.weight").dtype, DType::BF16);
  EXPECT_EQ(st.get("language_model.model.layers.0.input_layernorm.weight").dtype, DType::F32);
  EXPECT_EQ(st.get("mtp.norm.weight").dtype, DType::F32);
  // MTP at the top level, its 2-D weights quantized the same way.
  EXPECT_EQ(st.get("mtp.fc.weight").shape, (std::vector<int64_t>{64, 16}));
  EXPECT_TRUE(has("mtp.layers.0.self_attn.q_proj.scales"));
  EXPECT_FALSE(has("model.visual.patch_embed.proj.weight"));

  // Norms shifted: stored = 1 + input.
  const auto src = TensorStore::open(in.str());
  for (const char* n : {"layers.0.input_layernorm.weight", "layers.1.self_attn.q_norm.weight", "norm.weight"}) {
    const TensorView& a = src.get(std::string("model.language_model.") + n);
    const TensorView& b = st.get(std::string("language_model.model.") + n);
    for (int64_t i = 0; i < a.numel(); ++i)
      EXPECT_EQ(load_float(b.dtype, b.data, size_t(i)), 1.0f + load_float(a.dtype, a.data, size_t(i))) << n;
  }
  for (const char* n : {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                        "mtp.layers.0.input_layernorm.weight", "mtp.layers.0.post_attention_layernorm.weight",
                        "mtp.layers.0.self_attn.q_norm.weight", "mtp.layers.0.self_attn.k_norm.weight", "mtp.norm.weight"}) {
    const TensorView& a = src.get(n);
    const TensorView& b = st.get(n);
    EXPECT_EQ(load_float(b.dtype, b.data, 1), 1.0f + load_float(a.dtype, a.data, 1)) << n;
  }
  const TensorView& gn_in = src.get("model.language_model.layers.0.linear_attn.norm.weight");
  const TensorView& gn_out = st.get("language_model.model.layers.0.linear_attn.norm.weight");
  EXPECT_EQ(std::memcmp(gn_in.data, gn_out.data, gn_in.nbytes), 0);  // never shifted

  // config.json: the input's (qwen3_5 + text_config kept), plus both quantization keys.
  const auto cfg = read_json(od / "config.json");
  const nlohmann::json q = {{"group_size", 64}, {"bits", 4}, {"mode", "affine"}};
  EXPECT_EQ(cfg["quantization"], q);
  EXPECT_EQ(cfg["quantization_config"], q);
  EXPECT_EQ(cfg["model_type"], "qwen3_5");
  EXPECT_EQ(cfg["text_config"]["hidden_size"], 64);
  EXPECT_TRUE(fs::exists(od / "generation_config.json"));
  EXPECT_EQ(read_json(od / "generation_config.json")["eos_token_id"], nlohmann::json({5, 6}));

  // Read back through the checkpoint: same model, within quantization error.
  const auto a = Qwen35Checkpoint::open(in.str());
  const auto b = Qwen35Checkpoint::open(od.string());
  EXPECT_EQ(b.layout(), Layout::Mlx);
  EXPECT_TRUE(b.norms_shifted());
  EXPECT_EQ(b.mtp_layers(), 1);
  EXPECT_NO_THROW(b.validate());
  EXPECT_EQ(b.norm("layers.0.input_layernorm", 64, true), a.norm("layers.0.input_layernorm", 64, true));
  EXPECT_EQ(b.norm("mtp.layers.0.self_attn.k_norm", 32, true), a.norm("mtp.layers.0.self_attn.k_norm", 32, true));
  EXPECT_EQ(b.norm("layers.0.linear_attn.norm", 16, false), a.norm("layers.0.linear_attn.norm", 16, false));
  EXPECT_EQ(b.conv1d("layers.0.linear_attn.conv1d", 128, 4), a.conv1d("layers.0.linear_attn.conv1d", 128, 4));
  expect_matrix_close(a, b, "layers.0.mlp.up_proj", 96, 64);
  expect_matrix_close(a, b, "layers.1.self_attn.q_proj", 128, 64);
  expect_matrix_close(a, b, "mtp.fc", 64, 128);
  expect_matrix_close(a, b, "embed_tokens", 128, 64);
  expect_matrix_close(a, b, "lm_head", 128, 64);
}

TEST(QuantizeCheckpoint, TiedF32Group32Bits8) {
  TempDir in, out;
  synth::write_synth_model(in.str(), Layout::CausalLM, true, true, DType::F32, false);
  const fs::path od = out.path / "q";
  quantize_checkpoint(in.str(), od.string(), {8, 32});
  const auto st = TensorStore::open(od.string());
  EXPECT_EQ(st.find("language_model.lm_head.weight"), nullptr);  // tied stays tied
  EXPECT_EQ(st.get("language_model.model.embed_tokens.weight").shape, (std::vector<int64_t>{128, 16}));
  EXPECT_EQ(st.get("language_model.model.embed_tokens.scales").dtype, DType::F32);  // f32 model: f32 scales
  EXPECT_EQ(st.get("language_model.model.embed_tokens.scales").shape, (std::vector<int64_t>{128, 2}));
  EXPECT_EQ(st.get("language_model.model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{64, 24}));
  const auto cfg = read_json(od / "config.json");
  EXPECT_EQ(cfg["quantization"]["bits"], 8);
  EXPECT_EQ(cfg["quantization"]["group_size"], 32);
  EXPECT_EQ(cfg["model_type"], "qwen3_5_text");
  const auto a = Qwen35Checkpoint::open(in.str());
  const auto b = Qwen35Checkpoint::open(od.string());
  EXPECT_EQ(b.lm_head().name, "language_model.model.embed_tokens.weight");
  EXPECT_NO_THROW(b.validate());
  expect_matrix_close(a, b, "layers.0.mlp.down_proj", 64, 96);
  expect_matrix_close(a, b, "lm_head", 128, 64);
}

TEST(QuantizeCheckpoint, Errors) {
  TempDir in, out;
  synth::write_synth_model(in.str(), Layout::CausalLM, false, false, DType::BF16, false);
  EXPECT_THROW(quantize_checkpoint(in.str(), in.str(), {4, 64}), Error);  // output == input
  EXPECT_THROW(quantize_checkpoint(in.str(), (out.path / "x").string(), {3, 64}), Error);
  EXPECT_THROW(quantize_checkpoint(in.str(), (out.path / "x").string(), {4, 48}), Error);
  const fs::path od = out.path / "q";
  quantize_checkpoint(in.str(), od.string(), {4, 64});
  try {  // the output already holds a checkpoint
    quantize_checkpoint(in.str(), od.string(), {4, 64});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  try {  // already quantized input
    quantize_checkpoint(od.string(), (out.path / "qq").string(), {4, 64});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized"), std::string::npos) << e.what();
  }
}

// ---- transformers fixtures through quantize ----

TEST(QuantizeCheckpoint, Fixtures) {
  for (const char* name : {"qwen35-causal-tied", "qwen35-cond-untied", "qwen35-causal-sharded"}) {
    const std::string dir = std::string(NEXTN_FIXTURES) + "/" + name;
    ASSERT_TRUE(fs::exists(dir)) << dir << " is committed; a missing fixture is a failure";
    TempDir out;
    const fs::path od = out.path / "q";
    quantize_checkpoint(dir, od.string(), {4, 32});
    const auto a = Qwen35Checkpoint::open(dir);
    const auto b = Qwen35Checkpoint::open(od.string());
    EXPECT_EQ(b.layout(), Layout::Mlx);
    EXPECT_TRUE(b.norms_shifted());
    EXPECT_EQ(b.mtp_layers(), a.mtp_layers());
    EXPECT_NO_THROW(b.validate()) << name;
    const auto& c = a.config();
    EXPECT_EQ(b.norm("norm", c.hidden_size, true), a.norm("norm", c.hidden_size, true));
    expect_matrix_close(a, b, "layers.0.mlp.down_proj", c.hidden_size, c.intermediate_size);
    expect_matrix_close(a, b, "lm_head", c.vocab_size, c.hidden_size);
  }
}

// ---- CLI ----

void expect_one_error(const test::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.code, 1) << r.err;
  const auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(needle), std::string::npos) << lines[0];
}

TEST(QuantizeCli, BadFlags) {
  TempDir in, out;
  synth::write_synth_model(in.str(), Layout::CausalLM, false, false, DType::BF16, false);
  const std::string o = (out.path / "q").string();
  expect_one_error(run_cli("quantize -m " + in.str() + " -o " + o + " --bits 3"), "--bits 3");
  expect_one_error(run_cli("quantize -m " + in.str() + " -o " + o + " --bits 4 --group-size 48"), "--group-size 48");
  expect_one_error(run_cli("quantize -o " + o), "-m");
  expect_one_error(run_cli("quantize -m " + in.str()), "-o");
  expect_one_error(run_cli("quantize -m " + in.str() + " -o " + o + " --bits four"), "bits");
  expect_one_error(run_cli("quantize -m " + in.str() + "/nope -o " + o), "nope");
  EXPECT_FALSE(fs::exists(o + "/model.safetensors"));
}

TEST(QuantizeCli, QuantizesAndInspects) {
  TempDir in, out;
  synth::write_synth_model(in.str(), Layout::ConditionalGeneration, false, true, DType::BF16, true);
  const std::string o = (out.path / "q").string();
  auto r = run_cli("quantize -m " + in.str() + " -o " + o + " --bits 4 --group-size 64");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("wrote " + o + "/model.safetensors"), std::string::npos) << r.out;

  r = run_cli("inspect " + o);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("layout: mlx"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("quantization: affine 4-bit, group 64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("norms: stored as the real gamma"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("language_model.model.layers.0.mlp.up_proj.weight"), std::string::npos);
  EXPECT_NE(r.out.find("q4 g64"), std::string::npos);

  r = run_cli("inspect --json " + o);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["quantization"]["bits"], 4);
  EXPECT_EQ(j["norms_shifted"], true);
  EXPECT_EQ(j["valid"], true);
  bool seen = false;
  for (const auto& t : j["tensors"])
    if (t["name"] == "mtp.fc.weight") {
      seen = true;
      EXPECT_EQ(t["dtype"], "U32");
      EXPECT_EQ(t["quant"]["group_size"], 64);
    }
  EXPECT_TRUE(seen);

  // A single .safetensors file: tensors and layout, no config needed.
  r = run_cli("inspect " + o + "/model.safetensors");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("layout: mlx"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mtp.fc.scales"), std::string::npos);
}

TEST(InspectCli, FixtureDir) {
  const std::string dir = std::string(NEXTN_FIXTURES) + "/qwen35-cond-untied";
  ASSERT_TRUE(fs::exists(dir)) << dir << " is committed; a missing fixture is a failure";
  auto r = run_cli("inspect " + dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("layout: conditional-generation"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model_type: qwen3_5"), std::string::npos);
  EXPECT_NE(r.out.find("lm_head: lm_head.weight"), std::string::npos);
  EXPECT_NE(r.out.find("model.language_model.embed_tokens.weight"), std::string::npos);
  // The whole line: a bare "valid: " would also match a negative verdict.
  EXPECT_NE(r.out.find("\nvalid: every tensor the model reads is present with the expected shape\n"), std::string::npos)
      << r.out;
  r = run_cli("inspect --json " + dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["model_type"], "qwen3_5");
  EXPECT_EQ(j["mtp_layers"], 1);
  EXPECT_EQ(j["norms_shifted"], false);
  EXPECT_GT(j["tensors"].size(), 20u);
}

TEST(InspectCli, Errors) {
  expect_one_error(run_cli("inspect /nonexistent/model"), "/nonexistent/model");
  TempDir d;
  synth::write_synth_model(d.str(), Layout::CausalLM, false, false, DType::BF16, false);
  std::ofstream(d.path / "config.json") << R"({"model_type": "llama"})";
  expect_one_error(run_cli("inspect " + d.str()), "model_type");
}

}  // namespace
}  // namespace nextn
