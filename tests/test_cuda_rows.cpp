// The rows per forward a CUDA sequence is built for (make_cuda_runtime's
// max_rows) and the prefill workspace's lifetime, on a synthetic q4
// checkpoint whose every matrix takes the streamed kernel (preset
// test-stream):
//  - a sequence built for K rows gives the same bits as one built for 64:
//    logits after a long prompt (prefill GEMMs, then the tail in K-row
//    chunks) and after a short one, greedy and MTP-speculative tokens;
//  - a call over the built rows throws Error and leaves the sequence usable;
//  - the prefill workspace exists only between a long prompt and the next
//    forward, and a second prompt after reset() reallocates it to the same bits;
//  - device_memory() shows the row-count workspaces at the built size;
//  - the hidden rows grow with the longest forward, not the capacity;
//  - the attention partials grow with the positions, not the capacity, and
//    their size changes no bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/qwen35.h"
#include "bench/verify_arms.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/synthetic.h"
#include "engine/generate.h"
#include "model/bench_interfaces.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

const std::string& rows_checkpoint() {
  static const std::string dir = test::make_stream_q4_checkpoint("nextn-rows-test-stream-q4", 31);
  return dir;
}

std::vector<int32_t> prompt_of(int n, int vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[size_t(i)] = int32_t((int64_t(i) * 7919 + 13) % vocab);
  return p;
}

std::map<std::string, uint64_t> uses_of(const ModelRuntime& rt) {
  std::map<std::string, uint64_t> m;
  for (const auto& u : probe_of(rt).device_memory()) m[u.what] = u.bytes;
  return m;
}

bool has_prefill_workspace(const ModelRuntime& rt) {
  for (const auto& u : probe_of(rt).device_memory())
    if (u.what.starts_with("prefill")) return true;
  return false;
}

// Last-row logits after `prompt`, then those of 6 greedy single-token steps.
std::vector<std::vector<float>> logits_run(ModelRuntime& rt, const std::vector<int32_t>& prompt) {
  const int V = rt.vocab();
  std::vector<std::vector<float>> out;
  rt.target_forward(prompt);
  int32_t t = 0;
  int row = int(prompt.size()) - 1;
  for (int i = 0; i <= 6; ++i) {
    out.emplace_back(size_t(V));
    rt.head_logits(row, out.back().data());
    rt.head_argmax(row, 1, &t);
    rt.target_forward({&t, 1});
    row = 0;
  }
  return out;
}

TEST(CudaRows, BuiltForKRowsGivesTheBitsOf64) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(rows_checkpoint());
  const int V = ck.config().vocab_size;
  // 150 tokens: 128 through the prefill GEMMs, the last 22 through the graphs
  // (one chunk at 64 rows; chunks of K otherwise). 40: graphs only.
  for (int len : {150, 40}) {
    const auto prompt = prompt_of(len, V);
    auto wide = make_cuda_runtime(ck, 200, 64);
    const auto want = logits_run(*wide, prompt);
    for (int K : {1, 4, 7}) {
      auto narrow = make_cuda_runtime(ck, 200, K);
      EXPECT_TRUE(logits_run(*narrow, prompt) == want) << "prompt " << len << ", built for " << K << " rows";
    }
  }
  const auto prompt = prompt_of(150, V);
  GenerateOptions g;
  g.max_new_tokens = 24;
  g.ignore_eos = true;
  const auto greedy = generate_fresh([&](int cap) { return make_cuda_runtime(ck, cap, 64); }, prompt, g).tokens;
  ASSERT_EQ(greedy.size(), 24u);
  EXPECT_EQ(generate_fresh([&](int cap) { return make_cuda_runtime(ck, cap, 1); }, prompt, g).tokens, greedy);
  for (int K : {2, 4, 8}) {
    const RuntimeFactory built_for_k = [&](int cap) { return make_cuda_runtime(ck, cap, K); };
    GenerateOptions m = g;
    m.block_size = K;
    m.draft = DraftKind::Mtp;
    EXPECT_EQ(generate_fresh(built_for_k, prompt, m).tokens, greedy) << "K=" << K << " product";
    for (VerifyArm arm : {VerifyArm::Batched, VerifyArm::Walk, VerifyArm::Fused}) {
      EXPECT_EQ(generate_fresh_verify_arm(built_for_k, prompt, m, arm).tokens, greedy)
          << "K=" << K << " " << verify_arm_name(arm);
    }
  }
}

TEST(CudaRows, CallsOverTheBuiltRowsThrow) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(rows_checkpoint());
  const int V = ck.config().vocab_size;
  for (int bad : {0, 65}) {
    try {
      (void)make_cuda_runtime(ck, 64, bad);
      ADD_FAILURE() << bad << " rows accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rows per forward"), std::string::npos) << e.what();
    }
  }
  auto rt = make_cuda_runtime(ck, 100, 4);
  auto ref = make_cuda_runtime(ck, 100, 64);
  const auto prompt = prompt_of(10, V);  // longer than 4: three chunks
  rt->target_forward(prompt);
  ref->target_forward(prompt);
  std::vector<int32_t> out(16), want(16);
  auto expect_refused = [&](const char* what, const std::function<void()>& f) {
    try {
      f();
      ADD_FAILURE() << what << " over the built rows did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("built for forwards of at most 4 rows"), std::string::npos)
          << what << ": " << e.what();
    }
  };
  expect_refused("head_argmax", [&] { rt->head_argmax(0, 5, out.data()); });
  expect_refused("head_argmax_padded width", [&] { verify_arms_of(*rt).head_argmax_padded(0, 3, 5, out.data()); });
  expect_refused("head_argmax_fused", [&] { verify_arms_of(*rt).head_argmax_fused(0, 6, out.data()); });
  const std::vector<int32_t> drafts(5, 1);
  expect_refused("head_walk", [&] { (void)verify_arms_of(*rt).head_walk(drafts, out.data()); });
  mtp_of(*rt).mtp_forward(std::span<const int32_t>(prompt).subspan(1, 9), 0);
  mtp_of(*ref).mtp_forward(std::span<const int32_t>(prompt).subspan(1, 9), 0);
  expect_refused("mtp_argmax", [&] { mtp_of(*rt).mtp_argmax(5, out.data()); });
  expect_refused("mtp_draft", [&] { mtp_of(*rt).mtp_draft(5, out.data()); });
  // Still usable, and still equal to the 64-row sequence.
  rt->head_argmax(6, 4, out.data());
  ref->head_argmax(6, 4, want.data());
  EXPECT_EQ(out, want);
  mtp_of(*rt).mtp_draft(4, out.data());
  mtp_of(*ref).mtp_draft(4, want.data());
  EXPECT_EQ(out, want);
}

TEST(CudaRows, PrefillWorkspaceLivesFromPromptToNextForward) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(rows_checkpoint());
  const int V = ck.config().vocab_size;
  const auto prompt = prompt_of(150, V);
  auto rt = make_cuda_runtime(ck, 200, 4);
  EXPECT_FALSE(has_prefill_workspace(*rt));
  rt->target_forward(prompt_of(40, V));  // no prefill below 65 tokens
  EXPECT_FALSE(has_prefill_workspace(*rt));
  rt->reset();
  std::vector<std::vector<float>> runs[2];
  for (auto& run : runs) {
    rt->target_forward(prompt);
    EXPECT_TRUE(has_prefill_workspace(*rt));
    run.emplace_back(size_t(V));
    rt->head_logits(int(prompt.size()) - 1, run.back().data());
    int32_t t = 0;
    rt->head_argmax(int(prompt.size()) - 1, 1, &t);
    for (int i = 0; i < 4; ++i) {
      rt->target_forward({&t, 1});
      EXPECT_FALSE(has_prefill_workspace(*rt)) << "after decode step " << i;
      run.emplace_back(size_t(V));
      rt->head_logits(0, run.back().data());
      rt->head_argmax(0, 1, &t);
    }
    rt->reset();
    EXPECT_FALSE(has_prefill_workspace(*rt));
  }
  EXPECT_TRUE(runs[0] == runs[1]) << "a second prompt, on a reallocated prefill workspace";
  // A prompt whose forward ends while the workspace is held, then reset()
  // before any decode step: released too.
  rt->target_forward(prompt);
  rt->reset();
  EXPECT_FALSE(has_prefill_workspace(*rt));
}

// The hidden rows (and MTP hidden rows) are not sized by the capacity: 128
// rows, grown in whole passes to the longest forward + 64 when one comes,
// after graphs were captured on the old rows (which the growth drops). The
// grown sequence answers as a fresh one, greedy and MTP-speculative.
TEST(CudaRows, HiddenRowsGrowWithTheLongestForward) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(rows_checkpoint());
  const int V = ck.config().vocab_size;
  const uint64_t row = uint64_t(ck.config().hidden_size) * 2;  // bf16
  const auto fresh = [&](int cap) { return make_cuda_runtime(ck, cap, 64); };
  auto rt = fresh(1000);
  EXPECT_EQ(uses_of(*rt).at("hidden rows"), 128 * row) << "a capacity of 1000 positions";
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.ignore_eos = true;
  const auto short_prompt = prompt_of(10, V), long_prompt = prompt_of(300, V);
  EXPECT_EQ(generate(*rt, short_prompt, o).tokens, generate_fresh(fresh, short_prompt, o).tokens);
  EXPECT_EQ(uses_of(*rt).at("hidden rows"), 128 * row);
  rt->reset();
  EXPECT_EQ(generate(*rt, long_prompt, o).tokens, generate_fresh(fresh, long_prompt, o).tokens);
  EXPECT_EQ(uses_of(*rt).at("hidden rows"), 384 * row) << "300 + 64 rows, in whole passes";
  EXPECT_EQ(uses_of(*rt).at("MTP hidden rows"), 384 * row);
  rt->reset();
  o.draft = DraftKind::Mtp;
  GenerateOptions plain = o;
  plain.draft = DraftKind::None;
  EXPECT_EQ(generate(*rt, short_prompt, o).tokens, generate_fresh(fresh, short_prompt, plain).tokens);
}

// The attention partials (a split counter per (row, head), padded to 32,
// then fp32 [64 rows][heads][splits of 256 keys][hd + 2]) start at 4
// splits, whatever the capacity, and double as the positions grow, after graphs were captured on the old buffer (which the growth
// drops), up to the capacity's splits. Their stride changes no bit: a
// sequence whose partials grew on a long prompt answers a short one as a
// fresh sequence does, greedy and MTP-speculative.
TEST(CudaRows, AttentionPartialsGrowWithThePositions) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(rows_checkpoint());
  const auto& c = ck.config();
  const uint64_t heads = uint64_t(c.num_attention_heads);
  const uint64_t counters = (64 * heads + 31) / 32 * 32 * 4;
  const uint64_t split = 64 * heads * uint64_t(c.head_dim + 2) * 4;
  const auto partials = [&](int splits) { return counters + uint64_t(splits) * split; };
  const auto fresh = [&](int cap) { return make_cuda_runtime(ck, cap, 64); };
  auto rt = fresh(3000);
  EXPECT_EQ(uses_of(*rt).at("attention partials"), partials(4)) << "a capacity of 3000 positions";
  EXPECT_EQ(uses_of(*fresh(300)).at("attention partials"), partials(2)) << "a capacity of 300: its own 2 splits";
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.ignore_eos = true;
  const auto short_prompt = prompt_of(10, c.vocab_size), long_prompt = prompt_of(1500, c.vocab_size);
  const auto short_alone = generate_fresh(fresh, short_prompt, o).tokens;
  EXPECT_EQ(generate(*rt, short_prompt, o).tokens, short_alone);  // graphs captured on 4 splits
  EXPECT_EQ(uses_of(*rt).at("attention partials"), partials(4));
  rt->reset();
  EXPECT_EQ(generate(*rt, long_prompt, o).tokens, generate_fresh(fresh, long_prompt, o).tokens);
  EXPECT_EQ(uses_of(*rt).at("attention partials"), partials(8)) << "1512 positions: 6 splits, doubled from 4";
  rt->reset();
  EXPECT_EQ(generate(*rt, short_prompt, o).tokens, short_alone) << "on 8 splits";
  if (ck.mtp_layers() > 0) {
    o.draft = DraftKind::Mtp;
    rt->reset();
    EXPECT_EQ(generate(*rt, short_prompt, o).tokens, short_alone) << "MTP on 8 splits";
  }
  auto full = fresh(3000);
  full->target_forward(prompt_of(2999, c.vocab_size));
  EXPECT_EQ(uses_of(*full).at("attention partials"), partials(12)) << "at most the capacity's 12 splits";
}

TEST(CudaRows, DeviceMemoryShowsTheBuiltRows) {
  NEXTN_REQUIRE_GPU();
  const auto ck = Qwen35Checkpoint::open(rows_checkpoint());
  const auto& c = ck.config();
  auto wide = make_cuda_runtime(ck, 300, 64);
  auto narrow = make_cuda_runtime(ck, 300, 4);
  const auto w = uses_of(*wide), n = uses_of(*narrow);
  EXPECT_EQ(w.at("logits"), uint64_t(64) * uint64_t(c.vocab_size) * 4);
  EXPECT_EQ(n.at("logits"), uint64_t(4) * uint64_t(c.vocab_size) * 4);
  for (const char* what : {"GDN projections", "GDN conv outputs", "argmax pairs"})
    EXPECT_EQ(n.at(what) * 16, w.at(what)) << what;
  for (const char* what : {"activations", "attention partials", "MTP inputs", "head inputs"})
    if (w.count(what)) {
      EXPECT_LT(n.at(what), w.at(what)) << what;
    }
  EXPECT_LE(n.at("split-K partials"), w.at("split-K partials"));  // 16 bytes each where no matrix splits
  // Not row-count workspaces: the same at both sizes.
  for (const char* what : {"GDN recurrent state", "GDN conv state", "hidden rows"})
    EXPECT_EQ(n.at(what), w.at(what)) << what;
  for (const auto& [what, bytes] : w) {
    EXPECT_FALSE(what.starts_with("prefill")) << what << " before any prompt";
    EXPECT_NE(what, "the KV cache") << "KV blocks before any forward";
  }
  // KV blocks as the sequence grows: 3 blocks of 64 positions for 130, each
  // every full-attention layer's and the MTP layer's keys and values.
  std::vector<int32_t> prompt(130);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(i % 97 + 5);
  narrow->target_forward(prompt);
  int kv_layers = ck.mtp_layers() > 0 ? 1 : 0;
  for (bool full : c.full_attention) kv_layers += full ? 1 : 0;
  EXPECT_EQ(uses_of(*narrow).at("the KV cache"),
            uint64_t(3) * uint64_t(kv_layers) * 2 * 64 * uint64_t(c.num_key_value_heads) * uint64_t(c.head_dim) * 2);
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
