// The CUDA runtime's LM-head counters and reset() on the transformers
// fixtures (tests/fixtures), skipped without a GPU:
//  - every head entry point's counter deltas (read back from the device,
//    where the kernels write them) match the identities of
//    src/model/runtime.h and model/bench_interfaces.h: batched, padded, fused, the while walk and the flag
//    walk, and the planted runtime fault (RuntimeOptions::fault);
//  - speculative == greedy with the walk arm in both variants, K in
//    {2,3,4,8,16,32}, each walk checked: rows projected == rows taken ==
//    accepted + 1, bytes == that many head reads, no logits;
//  - reset() gives what a fresh runtime gives: same tokens, same counters,
//    same logits bit for bit, with graphs and without.
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda/qwen35.h"
#include "bench/verify_arms.h"
#include "core/dtype.h"
#include "fixture_util.h"
#include "engine/generate.h"
#include "io/checkpoint.h"
#include "model/bench_interfaces.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

struct Mode {
  bool fp32 = false;
  const char* walk = "while";
  bool fault = false;
  bool graphs = true;
};

std::unique_ptr<ModelRuntime> make_rt(const Qwen35Checkpoint& ck, int max_tokens, const Mode& m) {
  RuntimeOptions o;
  o.act = m.fp32 ? Activations::Fp32 : Activations::Bf16;
  o.cuda_graphs = m.graphs;
  o.walk = parse_walk_variant(m.walk);
  if (m.fault) o.fault = Fault::RuntimeWalkAsBatched;
  return make_cuda_runtime(ck, max_tokens, kMaxForwardRows, o);
}

// Bytes one projection through the head reads, from the checkpoint: dense
// (bf16, or fp32 in the fp32 mode), or quantized in the streamed layout (bf16
// mode, 128-multiple columns, scales and biases exact in bf16) or row-major
// with fp32 scales and biases.
int64_t expected_head_bytes(const Qwen35Checkpoint& ck, bool fp32) {
  const WeightRef h = ck.lm_head();
  const int64_t V = h.rows, H = h.cols;
  if (!h.quantized()) return V * H * (fp32 ? 4 : 2);
  const int bits = h.quant.bits, g = h.quant.group_size;
  bool exact = true;
  for (int64_t i = 0; i < V * (H / g); ++i)
    for (const TensorView* t : {h.scales, h.biases}) {
      const float v = load_float(t->dtype, t->data, size_t(i));
      exact = exact && bf16_to_f32(f32_to_bf16(v)) == v;
    }
  if (!fp32 && exact && H % 128 == 0 && (g == 32 || g == 64 || g == 128))
    return (V + 127) / 128 * (H / 128) * (128 * 128 * bits / 8 + 128 * (128 / g) * 4);
  return V * (H * bits / 8 + (H / g) * 8);
}

HeadWork diff(const HeadWork& a, const HeadWork& b) {
  HeadWork d;
  d.rows_projected = a.rows_projected - b.rows_projected;
  d.head_bytes_read = a.head_bytes_read - b.head_bytes_read;
  d.logits_bytes_written = a.logits_bytes_written - b.logits_bytes_written;
  d.walk_rows = a.walk_rows - b.walk_rows;
  d.head_calls = a.head_calls - b.head_calls;
  d.last_path = a.last_path;
  return d;
}

void expect_work(const HeadWork& d, int64_t rows, int64_t bytes, int64_t logits, int64_t walk_rows, HeadPath path,
                 const std::string& what) {
  EXPECT_EQ(d.rows_projected, rows) << what;
  EXPECT_EQ(d.head_bytes_read, bytes) << what;
  EXPECT_EQ(d.logits_bytes_written, logits) << what;
  EXPECT_EQ(d.walk_rows, walk_rows) << what;
  EXPECT_EQ(d.head_calls, 1) << what;
  EXPECT_EQ(d.last_path, path) << what << ": path " << head_path_name(d.last_path);
}

// Forwards everything to a runtime and checks the counters' deltas around
// every head call against the identity of the path that must have run.
class HeadProbe final : public ModelRuntime, public VerifyHeadArms {
 public:
  HeadProbe(ModelRuntime& rt, int64_t head_bytes, HeadPath walk_path, bool fault)
      : rt_(rt), arms_(verify_arms_of(rt)), B_(head_bytes), walk_path_(walk_path), fault_(fault) {}
  const Qwen35Config& config() const override { return rt_.config(); }
  const char* backend_name() const override { return rt_.backend_name(); }
  int target_length() const override { return rt_.target_length(); }
  void target_forward(std::span<const int32_t> t) override { rt_.target_forward(t); }
  void target_rollback(int keep) override { rt_.target_rollback(keep); }
  void head_argmax(int first, int count, int32_t* out) override {
    const HeadWork before = rt_.head_work();
    rt_.head_argmax(first, count, out);
    if (count == 0) return;
    expect_work(diff(rt_.head_work(), before), count, B_, int64_t(count) * vocab() * 4, 0, HeadPath::Batched,
                "head_argmax");
  }
  void head_argmax_padded(int first, int count, int width, int32_t* out) override {
    const HeadWork before = rt_.head_work();
    arms_.head_argmax_padded(first, count, width, out);
    if (count == 0) return;
    expect_work(diff(rt_.head_work(), before), width, B_, int64_t(width) * vocab() * 4, 0,
                width > count ? HeadPath::Padded : HeadPath::Batched, "head_argmax_padded");
  }
  void head_argmax_fused(int first, int count, int32_t* out) override {
    const HeadWork before = rt_.head_work();
    arms_.head_argmax_fused(first, count, out);
    if (count > 0) expect_work(diff(rt_.head_work(), before), count, B_, 0, 0, HeadPath::Fused, "fused");
  }
  int head_walk(std::span<const int32_t> drafts, int32_t* out) override {
    const HeadWork before = rt_.head_work();
    const int steps = arms_.head_walk(drafts, out);
    const HeadWork d = diff(rt_.head_work(), before);
    const int W = int(drafts.size()) + 1;  // the verify forward's rows
    if (fault_)
      expect_work(d, W, B_, int64_t(W) * vocab() * 4, 0, HeadPath::Batched, "walk under the fault");
    else
      expect_work(d, steps, steps * B_, 0, steps, walk_path_, "walk of " + std::to_string(steps) + " rows");
    // Early exit: the walk stops at the first mismatch (or after the last row).
    int want = 1;
    while (want < int(drafts.size()) + 1 && out[want - 1] == drafts[size_t(want - 1)]) ++want;
    EXPECT_EQ(steps, want);
    ++walks;
    return steps;
  }
  void head_logits(int row, float* out) override { rt_.head_logits(row, out); }
  HeadWork head_work() const override { return rt_.head_work(); }
  void reset() override { rt_.reset(); }
  MtpHead* mtp() override { return rt_.mtp(); }  // the runtime's own head, its device draft chain

  int walks = 0;

 private:
  ModelRuntime& rt_;
  VerifyHeadArms& arms_;
  int64_t B_;
  HeadPath walk_path_;
  bool fault_;
};

class CudaHead : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam().empty()) GTEST_SKIP() << "no fixtures";
    NEXTN_REQUIRE_GPU();
  }
};

// Direct calls of every entry point on the rows of the prompt forward; each
// twice (capture, then replay: the counters must also count in replays).
TEST_P(CudaHead, EveryArmCountsWhatRan) {
  const auto ref = test::load_reference(GetParam());
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const int W = std::min<int>(8, int(ref.prompt.size()));
  ASSERT_GE(W, 4);
  for (bool fp32 : {false, true}) {
    for (const char* walk : {"while", "flag"}) {
      for (bool fault : {false, true}) {
        SCOPED_TRACE(std::string(fp32 ? "fp32 " : "bf16 ") + walk + (fault ? " fault" : ""));
        const Mode m{fp32, walk, fault, true};
        auto rt = make_rt(ck, int(ref.prompt.size()) + 8, m);
        HeadProbe probe(*rt, expected_head_bytes(ck, fp32),
                        std::string(walk) == "while" ? HeadPath::Walk : HeadPath::WalkFlag, fault);
        probe.target_forward(std::span<const int32_t>(ref.prompt.data(), size_t(W)));
        std::vector<int32_t> truth(static_cast<size_t>(W)), out(64);
        for (int rep = 0; rep < 2; ++rep) {
          probe.head_argmax(0, W, truth.data());
          probe.head_argmax_padded(0, W - 2, W, out.data());
          probe.head_argmax_padded(1, W - 1, 16, out.data());
          EXPECT_EQ(out[0], truth[1]);
          probe.head_argmax_fused(0, W, out.data());
          EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + W), truth);
          for (int mismatch : {0, 2, W - 2, -1}) {
            std::vector<int32_t> drafts(truth.begin(), truth.end() - 1);
            if (mismatch >= 0) drafts[size_t(mismatch)] = (drafts[size_t(mismatch)] + 1) % probe.vocab();
            const int steps = probe.head_walk(drafts, out.data());
            EXPECT_EQ(steps, mismatch >= 0 ? mismatch + 1 : W);
            for (int j = 0; j < steps; ++j) EXPECT_EQ(out[size_t(j)], truth[size_t(j)]) << j;
          }
        }
        EXPECT_EQ(probe.walks, 8);
      }
    }
  }
}

GenerateOptions walk_options(int K, int n, bool mtp) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.ignore_eos = true;
  o.block_size = K;
  o.draft = mtp ? DraftKind::Mtp : DraftKind::Oracle;
  o.oracle.accept_rate = 0.7;
  o.oracle.seed = uint64_t(K * 131 + n);
  return o;
}

// generate() with the walk arm at the engine step's head (bench/verify_arms.h).
GenerateResult generate_walk(ModelRuntime& rt, std::span<const int32_t> prompt, const GenerateOptions& o,
                             const std::vector<int32_t>* truth) {
  ArmChoice walk;
  walk.arm = VerifyArm::Walk;
  return generate_verify_arm(rt, prompt, o, walk, truth);
}

// Speculative == greedy with the walk, both variants (and under the runtime
// fault, which must keep the tokens right), every walk's counters checked.
// One runtime per variant, reset() between runs.
TEST_P(CudaHead, WalkEqualsGreedyInBothVariants) {
  const auto ref = test::load_reference(GetParam());
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const bool mtp = ck.mtp_layers() > 0;
  const int cap = runtime_capacity(int(ref.prompt.size()), 33, 32);
  std::vector<int32_t> greedy;
  {
    auto rt = make_rt(ck, cap, Mode{});
    greedy = greedy_generate(*rt, ref.prompt, 33, /*ignore_eos=*/true).tokens;
  }
  ASSERT_EQ(greedy.size(), 33u);
  const Mode modes[] = {{false, "while", false, true}, {false, "flag", false, true}, {false, "while", true, true}};
  for (const Mode& m : modes) {
    auto rt = make_rt(ck, cap, m);
    HeadProbe probe(*rt, expected_head_bytes(ck, false), std::string(m.walk) == "while" ? HeadPath::Walk : HeadPath::WalkFlag,
                    m.fault);
    int runs = 0;
    for (int K : {2, 3, 4, 8, 16, 32}) {
      for (int n : {K - 1, K + 1, 24}) {
        probe.reset();
        const std::vector<int32_t> want(greedy.begin(), greedy.begin() + n);
        const auto r = generate_walk(probe, ref.prompt, walk_options(K, n, mtp), &want);
        EXPECT_EQ(r.tokens, want) << m.walk << (m.fault ? " fault" : "") << " K=" << K << " n=" << n;
        EXPECT_EQ(r.stats.counters.verify_chosen, "walk");
        ++runs;
      }
    }
    EXPECT_GT(probe.walks, runs);
    std::printf("[cuda head] %s %s%s: %d runs equal greedy, %d walks' counters checked\n",
                test::fixture_name(GetParam()).c_str(), m.walk, m.fault ? " (runtime fault)" : "", runs, probe.walks);
  }
}

// A reset runtime is a fresh one: after two runs and reset(), the same
// tokens and the same counters as a fresh runtime's run, and the same logits
// bit for bit; counters and lengths zero right after reset(). With graphs
// (captured before the reset, replayed after) and without.
TEST_P(CudaHead, ResetEqualsFresh) {
  const auto ref = test::load_reference(GetParam());
  const auto ck = Qwen35Checkpoint::open(GetParam());
  const bool mtp = ck.mtp_layers() > 0;
  const int cap = runtime_capacity(int(ref.prompt.size()), 33, 32);
  std::vector<int32_t> greedy;
  {
    auto rt = make_rt(ck, cap, Mode{});
    greedy = greedy_generate(*rt, ref.prompt, 24, true).tokens;
  }
  for (bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    const Mode m{false, "while", false, graphs};
    auto fresh = make_rt(ck, cap, m);
    const auto o = walk_options(4, 24, mtp);
    const auto want = generate_walk(*fresh, ref.prompt, o, &greedy);
    const HeadWork want_work = fresh->head_work();
    EXPECT_EQ(want.tokens, greedy);

    auto used = make_rt(ck, cap, m);
    (void)generate_walk(*used, ref.prompt, walk_options(8, 20, mtp), &greedy);
    used->reset();
    (void)greedy_generate(*used, ref.prompt, 24, true);
    used->reset();
    const HeadWork zero = used->head_work();
    EXPECT_EQ(zero.rows_projected + zero.head_bytes_read + zero.logits_bytes_written + zero.walk_rows + zero.head_calls,
              0);
    EXPECT_EQ(zero.last_path, HeadPath::None);
    EXPECT_EQ(used->target_length(), 0);
    if (mtp) {
      EXPECT_EQ(mtp_of(*used).mtp_length(), 0);
    }
    const auto got = generate_walk(*used, ref.prompt, o, &greedy);
    EXPECT_EQ(got.tokens, want.tokens);
    const HeadWork w = used->head_work();
    EXPECT_EQ(w.rows_projected, want_work.rows_projected);
    EXPECT_EQ(w.head_bytes_read, want_work.head_bytes_read);
    EXPECT_EQ(w.logits_bytes_written, want_work.logits_bytes_written);
    EXPECT_EQ(w.walk_rows, want_work.walk_rows);
    EXPECT_EQ(w.head_calls, want_work.head_calls);

    // Logits after the same prompt, bit for bit (both reset once more).
    std::vector<float> a(size_t(ref.vocab)), b(size_t(ref.vocab));
    for (auto* rt : {fresh.get(), used.get()}) {
      rt->reset();
      rt->target_forward(ref.prompt);
      rt->head_logits(int(ref.prompt.size()) - 1, rt == fresh.get() ? a.data() : b.data());
    }
    EXPECT_EQ(a, b);
    if (mtp) {
      std::vector<int32_t> da(4), db(4);
      for (auto* rt : {fresh.get(), used.get()}) {
        const int32_t next = greedy[0];
        std::vector<int32_t> nt(ref.prompt.begin() + 1, ref.prompt.end());
        nt.push_back(next);
        mtp_of(*rt).mtp_forward(nt, 0);
        mtp_of(*rt).mtp_draft(4, rt == fresh.get() ? da.data() : db.data());
      }
      EXPECT_EQ(da, db);
    }
  }
}

std::vector<std::string> fixture_params() {
  auto d = test::dense_fixture_dirs();
  if (d.empty()) d.push_back("");
  return d;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaHead, testing::ValuesIn(fixture_params()),
                         [](const testing::TestParamInfo<std::string>& i) { return test::fixture_param_name(i.param); });

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
