// The runtime contract (runtime_contract.h) on the CPU runtime, and the CUDA
// runtime's size checks, which are plain host arithmetic and run here too.
#include <gtest/gtest.h>

#include <climits>

#include "backend/cpu/qwen35.h"
#include "backend/cuda/workspace_dims.h"
#include "fixture_util.h"
#include "io/checkpoint.h"
#include "model/runtime.h"
#include "runtime_contract.h"

namespace nextn {
namespace {

TEST(RuntimeContract, Cpu) {
  const auto dirs = test::fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  for (const std::string& dir : dirs) {
    SCOPED_TRACE(dir);
    const auto ckpt = Qwen35Checkpoint::open(dir);
    const auto ref = test::load_reference(dir);
    test::check_runtime_contract([&](int n) { return make_cpu_runtime(ckpt, n); }, ref.prompt,
                                 ckpt.mtp_layers() > 0);
  }
}

// A config whose fields each pass the config's own checks but whose sums do not fit.
Qwen35Config big_config() {
  Qwen35Config c;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.head_dim = 256;
  c.num_attention_heads = 1 << 21;  // 2 * Hq * hd = 2^30: fits
  c.num_key_value_heads = 1 << 21;  // plus 2 * Hkv * hd = 2^30: the sum is 2^31
  c.linear_num_key_heads = 2;
  c.linear_key_head_dim = 64;
  c.linear_num_value_heads = 4;
  c.linear_value_head_dim = 64;
  return c;
}

TEST(CudaWorkspaceDims, SumsAreCheckedIn64Bits) {
  Qwen35Config small = big_config();
  small.num_attention_heads = small.num_key_value_heads = 4;
  const auto d = cuda::workspace_dims(small, 100);
  EXPECT_EQ(d.proj_ld, 4 * 256 * 2 + 2 * 4 * 256);
  EXPECT_EQ(d.act_ld, 4 * 256);
  EXPECT_EQ(d.gdn_ld, 2 * 2 * 64 + 4 * 64 + 4 * 64 + 2 * 4);
  EXPECT_EQ(d.hidden_rows, 64 + 64);  // not by the capacity: a longer forward grows them
  EXPECT_EQ(cuda::workspace_dims(small, 1).hidden_rows, 64 + 64);
  // The attention partials start at 1024 positions (4 splits), or the capacity's when less: they grow.
  EXPECT_EQ(d.partial_positions, 100);
  EXPECT_EQ(cuda::workspace_dims(small, 30000).partial_positions, 1024);
  // Their growth: doubled splits of 256 keys until the positions fit, at most the capacity.
  EXPECT_EQ(cuda::grown_partial_positions(1024, 1000, 30000), 1024);
  EXPECT_EQ(cuda::grown_partial_positions(1024, 1025, 30000), 2048);
  EXPECT_EQ(cuda::grown_partial_positions(1024, 1512, 3000), 2048);
  EXPECT_EQ(cuda::grown_partial_positions(2048, 2999, 3000), 3000);
  EXPECT_EQ(cuda::grown_partial_positions(1024, 30000, 30000), 30000);
  EXPECT_EQ(cuda::grown_partial_positions(1024, 8193, 30000), 16384);
  EXPECT_EQ(cuda::grown_partial_positions(100, 300, 300), 300);  // a capacity below one split's doubling
  EXPECT_EQ(cuda::grown_partial_positions(1, 257, 100000), 512);

  test::expect_error([&] { (void)cuda::workspace_dims(big_config(), 100); }, "projection row width",
                     "q/k/v row width");
  test::expect_error([&] { (void)cuda::workspace_dims(big_config(), 100); }, "= 2147483648 does not fit in 32 bits",
                     "q/k/v row width value");
  Qwen35Config gdn = small;
  gdn.linear_num_value_heads = 1 << 22;
  gdn.linear_value_head_dim = 256;  // value_dim = 2^30: conv_dim + value_dim > 2^31
  gdn.linear_num_key_heads = 1;
  test::expect_error([&] { (void)cuda::workspace_dims(gdn, 100); }, "GDN projection row width", "GDN row width");
  EXPECT_EQ(cuda::workspace_dims(small, INT_MAX - 10).hidden_rows, 64 + 64);  // they grow with the forwards instead
  test::expect_error([&] { (void)cuda::workspace_dims(small, 0); }, "max_tokens 0 must be positive", "capacity 0");
}

// The rows per forward a runtime is built for: [1, 64], checked by
// make_runtime for every backend and by the CUDA sequence itself.
TEST(CudaWorkspaceDims, RowsPerForwardAreChecked) {
  EXPECT_NO_THROW(cuda::check_max_rows(1));
  EXPECT_NO_THROW(cuda::check_max_rows(kMaxForwardRows));
  test::expect_error([] { cuda::check_max_rows(0); }, "rows per forward 0 outside [1, 64]", "0 rows");
  test::expect_error([] { cuda::check_max_rows(65); }, "rows per forward 65 outside [1, 64]", "65 rows");
  const auto dirs = test::fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  const auto ckpt = Qwen35Checkpoint::open(dirs.front());
  test::expect_error([&] { (void)make_runtime(ckpt, BackendKind::Cpu, 8, {.cpu_threads = 1}, 0); },
                     "runtime rows per forward 0: expected 1 to 64", "make_runtime 0 rows");
  EXPECT_NO_THROW((void)make_runtime(ckpt, BackendKind::Cpu, 8, {.cpu_threads = 1}, 4));
}

}  // namespace
}  // namespace nextn
