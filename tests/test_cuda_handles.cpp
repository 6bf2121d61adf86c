// Ownership of CUDA objects (backend/cuda/device_handles.h): every wrapper is
// move-only (checked at compile time, in every CUDA build), a move hands the
// object over, and code that throws halfway (a runtime whose checkpoint
// fails late in loading, the copy-bandwidth probe running out of memory)
// leaves no object behind, counted by cuda::live_count().
#ifdef NEXTN_HAVE_CUDA
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <type_traits>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/device_stats.h"
#include "backend/cuda/qwen35.h"
#include "cli_util.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "test_cuda_util.h"

namespace nextn {
namespace {

template <typename T>
constexpr bool move_only = !std::is_copy_constructible_v<T> && !std::is_copy_assignable_v<T> &&
                           std::is_nothrow_move_constructible_v<T> && std::is_nothrow_move_assignable_v<T>;
static_assert(move_only<cuda::DeviceMemory>);
static_assert(move_only<cuda::DeviceBuffer>);
static_assert(move_only<cuda::PinnedBuffer<int>>);
static_assert(move_only<cuda::Stream>);
static_assert(move_only<cuda::Event>);
static_assert(move_only<cuda::Graph>);
static_assert(move_only<cuda::GraphExec>);

TEST(CudaHandles, MovesHandOverAndDestructorsRelease) {
  NEXTN_REQUIRE_GPU();
  const int64_t base = cuda::live_count();
  {
    cuda::Stream s = cuda::make_stream();
    cuda::Event e = cuda::make_event();
    cuda::PinnedBuffer<int> pinned = cuda::make_pinned<int>(16);
    cuda::DeviceBuffer buf = cuda::make_device_buffer(1024);
    cuda::DeviceMemory mem;
    void* block = mem.alloc(4096, "test");
    EXPECT_EQ(cuda::live_count(), base + 5);
    cuda::Stream s2 = std::move(s);
    cuda::DeviceMemory mem2 = std::move(mem);
    cuda::PinnedBuffer<int> pinned2 = std::move(pinned);
    EXPECT_EQ(s.get(), nullptr);
    EXPECT_NE(s2.get(), nullptr);
    EXPECT_EQ(mem.total(), 0u);
    EXPECT_EQ(mem2.total(), 4096u);
    EXPECT_EQ(pinned.get(), nullptr);
    EXPECT_EQ(cuda::live_count(), base + 5);  // moved, not duplicated
    mem2.release(block);
    EXPECT_EQ(cuda::live_count(), base + 4);
    CUDA_OK(cudaEventRecord(e, s2));
    CUDA_OK(cudaStreamSynchronize(s2));
  }
  EXPECT_EQ(cuda::live_count(), base);
}

// A copy of a fixture whose "mtp.norm.weight" is renamed (same length, so no
// offset moves): the CUDA runtime finds it missing after it has made its
// streams and uploaded most weights.
TEST(CudaHandles, RuntimeThatFailsLateInLoadingReleasesEverything) {
  NEXTN_REQUIRE_GPU();
  const std::string src = std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied";
  test::TempDir d;
  for (const char* f : {"config.json", "generation_config.json"})
    std::filesystem::copy_file(src + "/" + f, d.path / f);
  std::ifstream in(src + "/model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find("\"mtp.norm.weight\"");
  ASSERT_NE(at, std::string::npos);
  bytes[at + std::string("\"mtp.norm.weigh").size()] = 'X';
  std::ofstream(d.path / "model.safetensors", std::ios::binary) << bytes;
  const auto ck = Qwen35Checkpoint::open(d.str());

  const int64_t base = cuda::live_count();
  {
    auto ok = make_cuda_runtime(Qwen35Checkpoint::open(src), 64);
    EXPECT_GT(cuda::live_count(), base + 20);  // streams, events, pinned buffers, device blocks
  }
  EXPECT_EQ(cuda::live_count(), base) << "a destroyed runtime left objects behind";
  try {
    (void)make_cuda_runtime(ck, 64);
    ADD_FAILURE() << "the runtime loaded a checkpoint without mtp.norm.weight";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mtp.norm.weight"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda::live_count(), base) << "a constructor that threw left objects behind";
}

TEST(CudaHandles, CopyBandwidthLeaksNothingWhenItThrows) {
  NEXTN_REQUIRE_GPU();
  size_t free_b = 0, total_b = 0;
  CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  const int64_t base = cuda::live_count();
  // Two buffers of 60% of the free memory: the first fits, the second cannot.
  EXPECT_THROW((void)cuda_stats::copy_bandwidth_gbs(free_b / 10 * 6, 1), Error);
  EXPECT_EQ(cuda::live_count(), base);
  size_t free_after = 0;
  CUDA_OK(cudaMemGetInfo(&free_after, &total_b));
  EXPECT_GE(free_after + (size_t(64) << 20), free_b) << "device memory not returned";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_GT(cuda_stats::copy_bandwidth_gbs(size_t(64) << 20, 2), 0.0);  // and it still works
  EXPECT_EQ(cuda::live_count(), base);
}

}  // namespace
}  // namespace nextn
#endif  // NEXTN_HAVE_CUDA
