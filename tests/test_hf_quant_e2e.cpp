// End to end, without committed quantized weights: the fp32 fixture
// qwen35-causal-tied is quantized at test time into each transformers format
// (trunk linears; embedding, norms and the MTP head left as they are, the MTP
// head in bf16 for some), and beside it the same model with those weights
// replaced by their dequantized values (computed here from the quantizer's own
// integers and scales) as a plain fp32 checkpoint. Loading the quantized copy
// through the loader must give the plain copy's logits bit for bit, hence its
// greedy tokens and teacher-forced MTP drafts; `--draft mtp --block-size 3`
// must equal plain greedy; a copy without mtp.* runs greedy and refuses
// `--draft mtp` in one line.
#include <gtest/gtest.h>

#include "model/mtp_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli_util.h"
#ifdef NEXTN_HAVE_CUDA
#include "test_cuda_util.h"
#endif
#include "io/checkpoint.h"
#include "model/runtime.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kSrc = std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied";

struct Out {  // tensors of the quantized copy; `deq` is the dequantized [out, in]
  std::vector<std::pair<std::string, std::pair<DType, std::vector<int64_t>>>> meta;
  std::deque<std::string> bytes;  // a deque: growing it never moves a string (small ones hold their bytes inline)
  std::vector<float> deq;
  template <typename T>
  void add(const std::string& name, DType dt, std::vector<int64_t> shape, const std::vector<T>& v) {
    meta.push_back({name, {dt, shape}});
    bytes.emplace_back(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
};

float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }
float f16_round(float x) { return f16_to_f32(f32_to_f16(x)); }

// Per (row o, group gr) asymmetric min-max parameters over the inputs of `cols_of`.
void minmax(const float* w, int64_t cols, int64_t o, const std::vector<int64_t>& idx, float& lo, float& hi) {
  lo = 0, hi = 0;
  for (int64_t i : idx) lo = std::min(lo, w[o * cols + i]), hi = std::max(hi, w[o * cols + i]);
}

// Quantizes module `mod` (w: fp32 [R, C]) into `fmt`; false when the shape does not fit the format.
bool quantize(const std::string& fmt, const std::string& mod, const float* w, int64_t R, int64_t C, Out& out,
              std::mt19937& rng) {
  out.deq.assign(size_t(R * C), 0.0f);
  if (fmt == "fp8") {  // transformers: absmax/448 per 128x128 block, weight_scale_inv fp32
    const int64_t B = 128, SR = (R + B - 1) / B, SC = (C + B - 1) / B;
    std::vector<float> inv(size_t(SR * SC));
    std::vector<uint8_t> q(size_t(R * C));
    for (int64_t br = 0; br < SR; ++br)
      for (int64_t bc = 0; bc < SC; ++bc) {
        float amax = 0;
        for (int64_t r = br * B; r < std::min(R, br * B + B); ++r)
          for (int64_t c = bc * B; c < std::min(C, bc * B + B); ++c) amax = std::max(amax, std::fabs(w[r * C + c]));
        inv[size_t(br * SC + bc)] = amax > 0 ? amax / 448.0f : 1.0f;
      }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const float s = inv[size_t((r / B) * SC + c / B)];
        q[size_t(r * C + c)] = f32_to_fp8_e4m3(std::clamp(w[r * C + c] / s, -448.0f, 448.0f));
        out.deq[size_t(r * C + c)] = fp8_e4m3_to_f32(q[size_t(r * C + c)]) * s;
      }
    out.add(mod + ".weight", DType::F8_E4M3, {R, C}, q);
    out.add(mod + ".weight_scale_inv", DType::F32, {SR, SC}, inv);
    return true;
  }
  if (fmt == "gptq4" || fmt == "gptq8" || fmt == "awq") {
    const bool awq = fmt == "awq";
    const int bits = fmt == "gptq8" ? 8 : 4, per = 32 / bits, maxq = (1 << bits) - 1;
    const int64_t g = 32;
    if (R % per || C % g || (awq && R % 8)) return false;
    const int64_t ng = C / g;
    std::vector<int64_t> gidx(static_cast<size_t>(C));
    for (int64_t i = 0; i < C; ++i) gidx[size_t(i)] = i / g;
    if (fmt == "gptq4") std::shuffle(gidx.begin(), gidx.end(), rng);  // desc_act: a non-trivial g_idx
    const bool sym = fmt == "gptq8";
    std::vector<uint16_t> scales(size_t(ng * R));
    std::vector<int> zero(size_t(ng * R)), q(size_t(R * C));
    for (int64_t gr = 0; gr < ng; ++gr) {
      std::vector<int64_t> idx;
      for (int64_t i = 0; i < C; ++i)
        if (gidx[size_t(i)] == gr) idx.push_back(i);
      for (int64_t o = 0; o < R; ++o) {
        float lo, hi;
        minmax(w, C, o, idx, lo, hi);
        float s = sym ? std::max(-lo, hi) / float(maxq / 2) : (hi - lo) / float(maxq);
        if (s == 0) s = 1;
        const float sh = f16_round(s);
        int z = sym ? (maxq + 1) / 2 : int(std::lround(-lo / sh));
        z = std::clamp(z, awq ? 0 : 1, maxq);  // gptq stores z - 1 in [0, maxq]
        scales[size_t(gr * R + o)] = f32_to_f16(sh);
        zero[size_t(gr * R + o)] = z;
        for (int64_t i : idx) {
          const int qv = std::clamp(int(std::lround(w[o * C + i] / sh)) + z, 0, maxq);
          q[size_t(o * C + i)] = qv;
          out.deq[size_t(o * C + i)] = sh * float(qv - z);
        }
      }
    }
    static const int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // AWQ: nibble j holds column kOrder[j]
    if (awq) {
      std::vector<uint32_t> qw(size_t(C * (R / 8))), qz(size_t(ng * (R / 8)));
      for (int64_t i = 0; i < C; ++i)
        for (int64_t o8 = 0; o8 < R / 8; ++o8)
          for (int j = 0; j < 8; ++j) qw[size_t(i * (R / 8) + o8)] |= uint32_t(q[size_t((o8 * 8 + kOrder[j]) * C + i)]) << (4 * j);
      for (int64_t gr = 0; gr < ng; ++gr)
        for (int64_t o8 = 0; o8 < R / 8; ++o8)
          for (int j = 0; j < 8; ++j) qz[size_t(gr * (R / 8) + o8)] |= uint32_t(zero[size_t(gr * R + o8 * 8 + kOrder[j])]) << (4 * j);
      out.add(mod + ".qweight", DType::I32, {C, R / 8}, qw);
      out.add(mod + ".qzeros", DType::I32, {ng, R / 8}, qz);
    } else {
      std::vector<uint32_t> qw(size_t((C / per) * R)), qz(size_t(ng * (R / per)));
      std::vector<int32_t> gi(gidx.begin(), gidx.end());
      for (int64_t i = 0; i < C; ++i)
        for (int64_t o = 0; o < R; ++o) qw[size_t((i / per) * R + o)] |= uint32_t(q[size_t(o * C + i)]) << ((i % per) * bits);
      for (int64_t gr = 0; gr < ng; ++gr)
        for (int64_t o = 0; o < R; ++o)
          qz[size_t(gr * (R / per) + o / per)] |= uint32_t(zero[size_t(gr * R + o)] - 1) << ((o % per) * bits);
      out.add(mod + ".qweight", DType::I32, {C / per, R}, qw);
      out.add(mod + ".qzeros", DType::I32, {ng, R / per}, qz);
      out.add(mod + ".g_idx", DType::I32, {C}, gi);
    }
    out.add(mod + ".scales", DType::F16, {ng, R}, scales);
    return true;
  }
  if (fmt == "ct-int4" || fmt == "ct-int8") {  // int4: group 32 asymmetric; int8: per channel symmetric
    const bool i4 = fmt == "ct-int4";
    const int bits = i4 ? 4 : 8, per = 32 / bits, off = 1 << (bits - 1);
    const int64_t g = i4 ? 32 : C, ng = C / g;
    if (C % g || C % per || (i4 && R % per)) return false;
    std::vector<uint16_t> sc(size_t(R * ng));
    std::vector<int> zp(size_t(R * ng));
    std::vector<uint32_t> packed(size_t(R * (C / per))), zpk(size_t((R / per) * ng));
    for (int64_t o = 0; o < R; ++o)
      for (int64_t gr = 0; gr < ng; ++gr) {
        std::vector<int64_t> idx;
        for (int64_t i = gr * g; i < gr * g + g; ++i) idx.push_back(i);
        float lo, hi;
        minmax(w, C, o, idx, lo, hi);
        float s = i4 ? (hi - lo) / 15.0f : std::max(-lo, hi) / 127.0f;
        if (s == 0) s = 1;
        const float sb = bf16_round(s);
        const int z = i4 ? std::clamp(int(std::lround(-8 - lo / sb)), -8, 7) : 0;
        sc[size_t(o * ng + gr)] = f32_to_bf16(sb);
        zp[size_t(o * ng + gr)] = z;
        for (int64_t i : idx) {
          const int qv = std::clamp(int(std::lround(w[o * C + i] / sb)) + z, -off, off - 1);
          packed[size_t(o * (C / per) + i / per)] |= uint32_t(qv + off) << ((i % per) * bits);
          out.deq[size_t(o * C + i)] = (float(qv) - float(z)) * sb;
        }
        if (i4) zpk[size_t((o / per) * ng + gr)] |= uint32_t(z + off) << ((o % per) * bits);
      }
    out.add(mod + ".weight_packed", DType::I32, {R, C / per}, packed);
    out.add(mod + ".weight_scale", DType::BF16, {R, ng}, sc);
    out.add(mod + ".weight_shape", DType::I64, {2}, std::vector<int64_t>{R, C});
    if (i4) out.add(mod + ".weight_zero_point", DType::I32, {R / per, ng}, zpk);
    return true;
  }
  if (fmt == "ct-fp8") {  // per-channel bf16 scales
    std::vector<uint16_t> sc(static_cast<size_t>(R));
    std::vector<uint8_t> q(size_t(R * C));
    for (int64_t o = 0; o < R; ++o) {
      float amax = 0;
      for (int64_t i = 0; i < C; ++i) amax = std::max(amax, std::fabs(w[o * C + i]));
      const float s = bf16_round(amax > 0 ? amax / 448.0f : 1.0f);
      sc[size_t(o)] = f32_to_bf16(s);
      for (int64_t i = 0; i < C; ++i) {
        q[size_t(o * C + i)] = f32_to_fp8_e4m3(std::clamp(w[o * C + i] / s, -448.0f, 448.0f));
        out.deq[size_t(o * C + i)] = fp8_e4m3_to_f32(q[size_t(o * C + i)]) * s;
      }
    }
    out.add(mod + ".weight", DType::F8_E4M3, {R, C}, q);
    out.add(mod + ".weight_scale", DType::BF16, {R, 1}, sc);
    return true;
  }
  return false;
}

json config_block(const std::string& fmt) {
  if (fmt == "fp8") return {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}},
                            {"modules_to_not_convert", {"lm_head", "mtp"}}};
  if (fmt == "gptq4") return {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}, {"sym", false}, {"desc_act", true}, {"checkpoint_format", "gptq"}};
  if (fmt == "gptq8") return {{"quant_method", "gptq"}, {"bits", 8}, {"group_size", 32}, {"sym", true}, {"desc_act", false}};
  if (fmt == "awq") return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 32}, {"version", "gemm"}, {"zero_point", true}};
  json w = fmt == "ct-int4"   ? json{{"num_bits", 4}, {"type", "int"}, {"symmetric", false}, {"strategy", "group"}, {"group_size", 32}}
           : fmt == "ct-int8" ? json{{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"}}
                              : json{{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "channel"}};
  return {{"quant_method", "compressed-tensors"}, {"format", fmt == "ct-fp8" ? "float-quantized" : "pack-quantized"},
          {"quantization_status", "compressed"}, {"ignore", {"lm_head", "re:.*mtp.*"}},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", w}}}}}};
}

// Writes DIR/q (quantized) and DIR/d (dequantized, plain) copies of the fixture.
void write_pair(const std::string& fmt, const fs::path& dir, bool mtp_bf16, bool drop_mtp) {
  const TensorStore src = TensorStore::open(kSrc);
  std::mt19937 rng(7);
  std::deque<Out> keep;  // owns every byte until written; elements never move
  std::vector<TensorToWrite> q, d;
  int quantized = 0;
  for (const auto& n : src.names()) {
    const TensorView& t = src.get(n);
    if (drop_mtp && n.starts_with("mtp.")) continue;
    std::vector<float> f(size_t(t.numel()));
    for (size_t i = 0; i < f.size(); ++i) f[i] = load_float(t.dtype, t.data, i);
    const bool linear = n.starts_with("model.layers.") && t.shape.size() == 2 && n.ends_with(".weight") &&
                        n.find("conv1d") == std::string::npos;
    Out o;
    const std::string mod = n.substr(0, n.size() - 7);
    if (linear && quantize(fmt, mod, f.data(), t.shape[0], t.shape[1], o, rng)) {
      ++quantized;
      keep.push_back(std::move(o));
      Out& k = keep.back();
      for (size_t i = 0; i < k.meta.size(); ++i)
        q.push_back({k.meta[i].first, k.meta[i].second.first, k.meta[i].second.second, k.bytes[i].data(), k.bytes[i].size()});
      k.add(n, DType::F32, t.shape, k.deq);
      d.push_back({n, DType::F32, t.shape, k.bytes.back().data(), k.bytes.back().size()});
      continue;
    }
    if (mtp_bf16 && n.starts_with("mtp.")) {  // the MTP head in bf16 beside a quantized trunk
      std::vector<uint16_t> b(f.size());
      for (size_t i = 0; i < f.size(); ++i) b[i] = f32_to_bf16(f[i]);
      Out k;
      k.add(n, DType::BF16, t.shape, b);
      keep.push_back(std::move(k));
      q.push_back({n, DType::BF16, t.shape, keep.back().bytes[0].data(), keep.back().bytes[0].size()});
      d.push_back(q.back());
      continue;
    }
    q.push_back({n, t.dtype, t.shape, t.data, t.nbytes});
    d.push_back(q.back());
  }
  ASSERT_GE(quantized, 20) << fmt;
  std::ifstream cf(kSrc + "/config.json");
  json cfg = json::parse(cf);
  if (drop_mtp) cfg.erase("mtp_num_hidden_layers");
  for (const char* sub : {"q", "d"}) {
    fs::create_directories(dir / sub);
    json c = cfg;
    if (std::string(sub) == "q") c["quantization_config"] = config_block(fmt);
    std::ofstream(dir / sub / "config.json") << c.dump(2);
    write_safetensors((dir / sub / "model.safetensors").string(), std::string(sub) == "q" ? q : d);
  }
}

struct Outputs {
  std::vector<float> logits;
  std::vector<int32_t> greedy, drafts;
};

Outputs run(const std::string& dir, BackendKind backend = BackendKind::Cpu, const RuntimeOptions& options = {}) {
  const auto ck = Qwen35Checkpoint::open(dir);
  ck.validate();
  const std::vector<int32_t> prompt{5, 17, 300, 42, 9, 1000, 77};
  auto rt = make_runtime(ck, backend, 64, options);
  Outputs r;
  const int V = ck.config().vocab_size;
  rt->target_forward(prompt);
  r.logits.resize(size_t(V) * prompt.size());
  for (size_t p = 0; p < prompt.size(); ++p) rt->head_logits(int(p), r.logits.data() + p * size_t(V));
  int32_t tok = 0;
  rt->head_argmax(int(prompt.size()) - 1, 1, &tok);
  r.greedy.push_back(tok);
  while (r.greedy.size() < 16) {
    rt->target_forward(std::span<const int32_t>(&r.greedy.back(), 1));
    rt->head_argmax(0, 1, &tok);
    r.greedy.push_back(tok);
  }
  if (ck.mtp_layers() > 0) {  // teacher-forced drafts over prompt + greedy
    std::vector<int32_t> seq(prompt);
    seq.insert(seq.end(), r.greedy.begin(), r.greedy.end());
    auto rt2 = make_runtime(ck, backend, 64, options);
    rt2->target_forward(seq);
    const std::vector<int32_t> next(seq.begin() + 1, seq.end());
    mtp_of(*rt2).mtp_forward(next, 0);
    r.drafts.resize(next.size());
    mtp_of(*rt2).mtp_argmax(int(r.drafts.size()), r.drafts.data());
  }
  return r;
}

class QuantE2E : public ::testing::TestWithParam<std::string> {};

// Every format write_pair makes; test names with '_' for '-'.
const auto kFormats = ::testing::Values("fp8", "gptq4", "gptq8", "awq", "ct-int4", "ct-int8", "ct-fp8");
std::string format_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

TEST_P(QuantE2E, QuantizedCheckpointRunsItsDequantizedModelExactly) {
  const std::string fmt = GetParam();
  const bool mtp_bf16 = fmt == "gptq4" || fmt == "ct-int4";
  const fs::path dir = fs::temp_directory_path() / ("nextn-hfq-e2e-" + std::to_string(::getpid()) + "-" + fmt);
  fs::remove_all(dir);
  write_pair(fmt, dir, mtp_bf16, false);
  {  // every matrix the loader hands over equals the plain copy's, value for value
    const auto qc = Qwen35Checkpoint::open((dir / "q").string());
    const auto dc = Qwen35Checkpoint::open((dir / "d").string());
    const TensorStore& ds = dc.store();
    for (const auto& n : ds.names()) {
      const TensorView& t = ds.get(n);
      if (t.shape.size() != 2 || !n.ends_with(".weight")) continue;
      const std::string mod = n.substr(0, n.size() - 7);
      const WeightRef a = checkpoint_matrix(qc.store(), qc.config().quant, "q", mod, t.shape[0], t.shape[1]);
      const WeightRef b = checkpoint_matrix(ds, dc.config().quant, "d", mod, t.shape[0], t.shape[1]);
      std::vector<float> ra(size_t(t.shape[1])), rb(size_t(t.shape[1]));
      int bad = 0;
      for (int64_t r = 0; r < t.shape[0] && bad == 0; ++r) {
        dequantize_row(a, r, ra.data());
        dequantize_row(b, r, rb.data());
        if (std::memcmp(ra.data(), rb.data(), ra.size() * 4) != 0) ++bad;
      }
      EXPECT_EQ(bad, 0) << mod;
    }
  }
  const Outputs q = run((dir / "q").string()), d = run((dir / "d").string());
  EXPECT_TRUE(q.logits == d.logits) << "logits differ";
  EXPECT_EQ(q.greedy, d.greedy);
  EXPECT_EQ(q.drafts, d.drafts);
  EXPECT_FALSE(q.drafts.empty());
  // Speculative decoding (K = 3) gives the plain greedy tokens.
  const std::string base = "generate -m " + (dir / "q").string() + " --prompt-ids 5,17,300,42,9,1000,77 -n 16 --ignore-eos --json";
  const auto plain = test::run_cli(base), spec = test::run_cli(base + " --draft mtp --block-size 3");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(spec.code, 0) << spec.err;
  EXPECT_EQ(json::parse(plain.out).at("tokens"), json::parse(spec.out).at("tokens"));
  const auto insp = test::run_cli("inspect " + (dir / "q").string());
  EXPECT_EQ(insp.code, 0) << insp.err;
  EXPECT_NE(insp.out.find("quantization: "), std::string::npos);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantE2E,
                         kFormats, format_test_name);

#ifdef NEXTN_HAVE_CUDA
// On the GPU: the fp32 mode runs each format as the dequantized copy, bit
// for bit, with the CPU's greedy tokens; the bf16 mode (native codecs where
// a module's shape takes them) gives speculative == greedy.
class QuantE2ECuda : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantE2ECuda, Fp32ModeRunsTheDequantizedModelAndBf16SpeculationIsGreedy) {
  NEXTN_REQUIRE_GPU();
  const std::string fmt = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("nextn-hfq-cuda-" + std::to_string(::getpid()) + "-" + fmt);
  fs::remove_all(dir);
  write_pair(fmt, dir, fmt == "gptq4" || fmt == "ct-int4", false);
  RuntimeOptions fp32;
  fp32.act = Activations::Fp32;
  const Outputs q = run((dir / "q").string(), BackendKind::Cuda, fp32);
  const Outputs d = run((dir / "d").string(), BackendKind::Cuda, fp32);
  const Outputs cpu = run((dir / "q").string());
  EXPECT_TRUE(q.logits == d.logits) << "logits differ";
  EXPECT_EQ(q.greedy, d.greedy);
  EXPECT_EQ(q.drafts, d.drafts);
  EXPECT_EQ(q.greedy, cpu.greedy) << "the GPU's fp32 mode against the CPU";
  EXPECT_EQ(q.drafts, cpu.drafts);
  const std::string base = "generate --backend cuda -m " + (dir / "q").string() +
                           " --prompt-ids 5,17,300,42,9,1000,77 -n 16 --ignore-eos --json";
  for (const char* act : {" --act fp32", ""}) {
    const auto plain = test::run_cli(base + act), spec = test::run_cli(base + act + " --draft mtp --block-size 3");
    ASSERT_EQ(plain.code, 0) << plain.err;
    ASSERT_EQ(spec.code, 0) << spec.err;
    EXPECT_EQ(json::parse(plain.out).at("tokens"), json::parse(spec.out).at("tokens")) << act;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantE2ECuda,
                         kFormats, format_test_name);
#endif  // NEXTN_HAVE_CUDA

TEST(QuantE2ENoMtp, RunsGreedyAndRefusesDraftMtpInOneLine) {
  const fs::path dir = fs::temp_directory_path() / ("nextn-hfq-e2e-nomtp-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write_pair("fp8", dir, false, true);
  const Outputs q = run((dir / "q").string()), d = run((dir / "d").string());
  EXPECT_TRUE(q.logits == d.logits);
  EXPECT_EQ(q.greedy, d.greedy);
  EXPECT_TRUE(q.drafts.empty());
  const std::string base = "generate -m " + (dir / "q").string() + " --prompt-ids 5,17,300 -n 8 --ignore-eos";
  EXPECT_EQ(test::run_cli(base).code, 0);
  const auto r = test::run_cli(base + " --draft mtp");
  EXPECT_EQ(r.code, 1);
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  EXPECT_TRUE(r.err_lines()[0].starts_with("error: ")) << r.err;
  EXPECT_NE(r.err.find("mtp"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace nextn
