// nextn bench trunk (src/bench/trunk.h): the matrices it times are the ones a
// decode token streams, and its options fail by name before any device work.
#include <gtest/gtest.h>

#include <cstdint>

#include "bench/trunk.h"
#include "cli_util.h"
#include "fixture_util.h"
#include "io/safetensors.h"
#include "io/synthetic.h"

namespace nextn {
namespace {

// Every 2-D trunk matrix a bf16 checkpoint of the preset holds (the layers'
// projections and the head; not the MTP head, the embedding or conv1d),
// element for element, equals what trunk_matrices says a token reads.
TEST(BenchTrunk, MatricesCoverEveryTrunkWeightOfTheCheckpoint) {
  for (const char* name : {"test-tiny", "test-stream"}) {
    const SyntheticPreset p = *synthetic_preset(name);
    test::TempDir dir;
    MakeCheckpointOptions o;
    o.quant = "bf16";
    make_checkpoint(p, o, dir.str());
    const TensorStore store = TensorStore::open(dir.str());
    int64_t in_checkpoint = 0;
    for (const std::string& t : store.names()) {
      const auto& shape = store.get(t).shape;
      const bool layer = t.find(".layers.") != std::string::npos && t.rfind("mtp.", 0) != 0;
      const bool head = t == "lm_head.weight" || (p.tie && t.find("embed_tokens") != std::string::npos);
      if (shape.size() == 2 && (layer || head)) in_checkpoint += shape[0] * shape[1];
    }
    int64_t read = 0;
    for (const bench::TrunkMatrix& m : bench::trunk_matrices(p)) read += int64_t(m.rows) * m.cols * m.per_token;
    EXPECT_EQ(read, in_checkpoint) << name;
  }
}

TEST(BenchTrunk, Qwen35_27bShapes) {
  const auto m = bench::trunk_matrices(*synthetic_preset("qwen3.5-27b"));
  ASSERT_EQ(m.size(), 7u);
  auto find = [&](const std::string& n) {
    for (const auto& x : m)
      if (x.name == n) return x;
    ADD_FAILURE() << n;
    return bench::TrunkMatrix{};
  };
  EXPECT_EQ(find("mlp.gate_up").rows, 34816);
  EXPECT_EQ(find("mlp.gate_up").per_token, 64);
  EXPECT_EQ(find("mlp.down").cols, 17408);
  EXPECT_EQ(find("gdn.in").rows, 16480);  // qkv 10240 + z 6144 + b 48 + a 48
  EXPECT_EQ(find("gdn.in").per_token, 48);
  EXPECT_EQ(find("attn.qkv").rows, 14336);  // q with its gate 12288 + k 1024 + v 1024
  EXPECT_EQ(find("attn.qkv").per_token, 16);
  EXPECT_TRUE(find("head").argmax);
}

TEST(BenchTrunk, BadOptionsAreOneErrorNamingTheFlag) {
  test::expect_one_error_line(test::run_cli("bench trunk --presets qwen3.5-9b"), "qwen3.5-9b");
  test::expect_one_error_line(test::run_cli("bench trunk --presets test-tiny"), "test-tiny");
  test::expect_one_error_line(test::run_cli("bench trunk --rows 1,65"), "--rows");
  test::expect_one_error_line(test::run_cli("bench trunk --rows 0"), "--rows");
  test::expect_one_error_line(test::run_cli("bench trunk --quant q3"), "q3");
  test::expect_one_error_line(test::run_cli("bench trunk --repeats 0"), "--repeats");
}

}  // namespace
}  // namespace nextn
