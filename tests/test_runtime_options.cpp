// RuntimeOptions (core/options.h): the flag parsers, and cpu_threads from the
// struct to the CPU pool through every factory the CLI uses. The pool falls
// back to NEXTN_THREADS only when cpu_threads is 0, so with a bad
// NEXTN_THREADS a runtime builds exactly where the struct's value arrived.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cli_util.h"
#include "core/error.h"
#include "core/options.h"
#include "io/checkpoint.h"
#include "model/batch_runtime.h"
#include "model/bench_interfaces.h"
#include "model/runtime.h"
#include "model/target_model.h"

namespace nextn {
namespace {

const std::string kQwen = std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied";
const std::string kGemma = std::string(NEXTN_FIXTURES) + "/gemma4/gemma4-tokenizer-bf16/target";

// NEXTN_THREADS=two for the test's lifetime: default_thread_count() throws.
class BadThreadsEnv {
 public:
  BadThreadsEnv() {
    if (const char* v = std::getenv("NEXTN_THREADS")) saved_ = v, had_ = true;
    setenv("NEXTN_THREADS", "two", 1);
  }
  ~BadThreadsEnv() {
    if (had_) setenv("NEXTN_THREADS", saved_.c_str(), 1);
    else unsetenv("NEXTN_THREADS");
  }

 private:
  std::string saved_;
  bool had_ = false;
};

using test::expect_error_naming;

TEST(RuntimeOptions, ParsersTakeTheirValuesAndNameTheirFlags) {
  EXPECT_EQ(parse_activations("fp32"), Activations::Fp32);
  EXPECT_EQ(parse_activations("bf16"), Activations::Bf16);
  EXPECT_EQ(parse_pdl_policy("on"), PdlPolicy::On);
  EXPECT_EQ(parse_pdl_policy("off"), PdlPolicy::Off);
  EXPECT_EQ(parse_pdl_policy("multi-row-off"), PdlPolicy::MultiRowOff);
  EXPECT_EQ(parse_walk_variant("while"), WalkVariant::While);
  EXPECT_EQ(parse_walk_variant("flag"), WalkVariant::Flag);
  EXPECT_FALSE(parse_prefill_path("chunked"));
  EXPECT_TRUE(parse_prefill_path("gemm"));
  EXPECT_FALSE(parse_graphs("off"));
  EXPECT_EQ(parse_fault("runtime-walk-as-batched"), Fault::RuntimeWalkAsBatched);
  expect_error_naming([] { (void)parse_activations("FP32"); }, "--act");
  expect_error_naming([] { (void)parse_pdl_policy(""); }, "--pdl");
  expect_error_naming([] { (void)parse_pdl_policy("default"); }, "--pdl");
  expect_error_naming([] { (void)parse_walk_variant("split"); }, "--walk");
  expect_error_naming([] { (void)parse_prefill_path("split"); }, "--prefill");
  expect_error_naming([] { (void)parse_graphs("1"); }, "--graphs");
  expect_error_naming([] { (void)parse_fault("walk"); }, "--fault");
  const RuntimeOptions d;  // what generate and serve run with, flags aside
  EXPECT_TRUE(d.cuda_graphs);
  EXPECT_TRUE(d.prefill_gemm);
  EXPECT_FALSE(d.profile);
  EXPECT_EQ(d.pdl, PdlPolicy::Off);
  EXPECT_EQ(d.fault, Fault::None);
}

TEST(RuntimeOptions, ThreadsReachTheCpuPoolThroughEveryFactory) {
  const auto ck = Qwen35Checkpoint::open(kQwen);
  const BadThreadsEnv env;
  const RuntimeOptions two{.cpu_threads = 2};
  // Control: without the struct's count each factory asks the environment.
  EXPECT_THROW((void)make_runtime(ck, BackendKind::Cpu, 16), Error);
  EXPECT_THROW((void)make_sequence_group(ck, BackendKind::Cpu), Error);

  EXPECT_NO_THROW((void)make_runtime(ck, BackendKind::Cpu, 16, two));
  EXPECT_NO_THROW((void)make_sequence_group(ck, BackendKind::Cpu, two)->add_sequence(16));
  EXPECT_NO_THROW((void)make_serial_sequence_group(ck, BackendKind::Cpu, two)->add_sequence(16));
  for (const std::string& dir : {kQwen, kGemma}) {
    const TargetModel m = open_target_model(dir, BackendKind::Cpu, two);
    EXPECT_NO_THROW((void)m.factory(16)) << dir;
    const TargetModel unset = open_target_model(dir, BackendKind::Cpu);
    EXPECT_THROW((void)unset.factory(16), Error) << dir;
  }
}

TEST(RuntimeOptions, TheRuntimeFaultReachesTheCpuRuntime) {
  const auto ck = Qwen35Checkpoint::open(kQwen);
  const std::vector<int32_t> block = {1, 2, 3, 4, 5};
  std::vector<int32_t> out(5);
  for (Fault f : {Fault::None, Fault::RuntimeWalkAsBatched}) {
    auto rt = make_runtime(ck, BackendKind::Cpu, 16, {.fault = f});
    rt->target_forward(block);
    (void)verify_arms_of(*rt).head_walk(std::span(block).subspan(1), out.data());
    EXPECT_EQ(rt->head_work().last_path, f == Fault::None ? HeadPath::Walk : HeadPath::Batched);
  }
}

}  // namespace
}  // namespace nextn
