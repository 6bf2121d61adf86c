// Small helpers shared by the subcommands.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "speculative/drafter.h"
#include "speculative/generation.h"

namespace nextn::cli {

// "1,2,3" -> {1,2,3}; `flag` names the option in errors. Parsed by hand on
// purpose: CLI11 2.1.2's delimiter() drops empty items ("1,,2" and "1," pass
// as {1,2} and {1}) and merges a repeated flag into one list, where a typo
// must be an error. Taking the list as one string keeps CLI11's refusal of a
// repeated option (MultiOptionPolicy::Throw).
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);
// CLI11 2.1.2 reads an empty value as 0 for a number option, and "-1" as
// 2^64 - 1 for an unsigned one; these validators make both an error that
// names the flag. `number()` for any numeric option, `non_negative()` for
// unsigned ones (seeds).
const CLI::Validator& number();
const CLI::Validator& non_negative();
// -m value, or the default model when empty.
std::string model_dir_or_default(const std::string& dir);

// The runtime flags (core/options.h) as given. add_runtime_options: what
// every command that builds a runtime takes (--threads N in 1..1024, 0 when
// unset: NEXTN_THREADS or all cores; --act bf16|fp32; --tensor-parallel N);
// add_runtime_bench_options: the benchmarks' own (--graphs, --pdl,
// --prefill). runtime_options parses them, Error naming the flag.
struct RuntimeArgs {
  int threads = 0, tensor_parallel = 1;
  std::string act = "bf16", fp8_matmul = "w8a16", graphs = "on", pdl = "off", prefill = "gemm";
};
void add_runtime_options(CLI::App* cmd, RuntimeArgs* args);
void add_runtime_bench_options(CLI::App* cmd, RuntimeArgs* args);
RuntimeOptions runtime_options(const RuntimeArgs& args);

// The oracle drafter's flags (--accept-rate, --accept-rates, --accept-pattern,
// --seed) on `cmd`, and the spec they give for the drafter `draft`
// (oracle_spec_from_flags: refused by name for another drafter).
struct OracleArgs {
  double accept_rate = -1;
  std::string position_rates, pattern;
  uint64_t seed = 1;
  CLI::Option *rate_opt = nullptr, *rates_opt = nullptr, *pattern_opt = nullptr, *seed_opt = nullptr;
};
void add_oracle_options(CLI::App* cmd, OracleArgs* args);

// --block-size as given: "auto" (chosen per step, at most kAutoMaxBlockSize)
// or a width K (check_block_size). Error naming the flag otherwise.
struct BlockSizeFlag {
  BlockPolicy policy = BlockPolicy::Fixed;
  int size = 0;  // Fixed: K; Auto: 0 (the widest default)
};
BlockSizeFlag parse_block_size_flag(const std::string& text);
OracleSpec oracle_spec(const std::string& draft, const OracleArgs& args);

}  // namespace nextn::cli
