#include "cli_common.h"

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>

#include "commands.h"
#include "core/error.h"

namespace nextn::cli {

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t start = 0;
  if (text.empty()) fail("{}: empty list", flag);
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < 0 || v > INT32_MAX)
      fail("{}: '{}' is not a non-negative integer id", flag, item);
    ids.push_back(int32_t(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

const CLI::Validator& number() {
  static const CLI::Validator v(
      [](std::string& s) { return s.empty() ? std::string("expected a number, got an empty value") : std::string(); },
      "NUMBER");
  return v;
}

const CLI::Validator& non_negative() {
  static const CLI::Validator v(
      [](std::string& s) {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size())
          return "expected a non-negative integer below 2^64, got '" + s + "'";
        return std::string();
      },
      "UINT");
  return v;
}

std::string model_dir_or_default(const std::string& dir) { return dir.empty() ? default_model_dir() : dir; }

void add_runtime_options(CLI::App* cmd, RuntimeArgs* a) {
  cmd->add_option("--threads", a->threads,
                  "CPU backend threads (default: NEXTN_THREADS, else all cores; results do not depend on it)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--act", a->act,
                  "CUDA activations: bf16 (default) or fp32 (the parity mode: fp32 weights and activations, slow); "
                  "the CPU backend computes in fp32 either way");
  cmd->add_option("--fp8-matmul", a->fp8_matmul,
                  "CUDA, FP8 checkpoints: w8a16 (default: the weights decoded exactly, bf16 activations) or w8a8 "
                  "(activations quantized to e4m3 per token and 64 columns, FP8 tensor cores; docs/formats.md)");
  cmd->add_option("--tensor-parallel", a->tensor_parallel,
                  "Split the model over N ranks (threads sharing --threads), Qwen3.5 on --backend cpu; the output "
                  "is deterministic and, on the fixtures, transformers' greedy tokens (docs/tensor-parallel.md; default 1)")
      ->check(number());
}

void add_runtime_bench_options(CLI::App* cmd, RuntimeArgs* a) {
  cmd->add_option("--graphs", a->graphs, "CUDA: on (default) or off (the same kernels launched without graphs)");
  cmd->add_option("--pdl", a->pdl,
                  "CUDA programmatic dependent launch: off (default, the measured choice), on, or "
                  "multi-row-off (only forwards of more than one row without it)");
  cmd->add_option("--prefill", a->prefill,
                  "CUDA prompts over 64 tokens: gemm (default: the prefill GEMMs) or chunked (the 64-row graphs)");
}

RuntimeOptions runtime_options(const RuntimeArgs& a) {
  RuntimeOptions o;
  o.cpu_threads = a.threads;
  o.act = parse_activations(a.act);
  o.fp8_matmul = parse_fp8_matmul(a.fp8_matmul);
  o.tensor_parallel = a.tensor_parallel;
  o.cuda_graphs = parse_graphs(a.graphs);
  o.pdl = parse_pdl_policy(a.pdl);
  o.prefill_gemm = parse_prefill_path(a.prefill);
  return o;
}

void add_oracle_options(CLI::App* cmd, OracleArgs* a) {
  a->rate_opt = cmd->add_option("--accept-rate", a->accept_rate, "Oracle: probability each draft is the true token");
  a->rates_opt = cmd->add_option("--accept-rates", a->position_rates,
                                 "Oracle: per draft position, the probability a draft after true ones is true "
                                 "(e.g. 0.9,0.8,0.7; the last repeats)");
  a->pattern_opt = cmd->add_option("--accept-pattern", a->pattern, "Oracle: 1 = true draft, 0 = wrong, cyclic");
  a->seed_opt = cmd->add_option("--seed", a->seed, "Oracle: RNG seed for --accept-rate(s) (default 1)")->check(non_negative());
}

OracleSpec oracle_spec(const std::string& draft, const OracleArgs& a) {
  OracleFlags f;
  if (a.rate_opt->count() > 0) f.accept_rate = &a.accept_rate;
  if (a.rates_opt->count() > 0) f.position_rates = &a.position_rates;
  if (a.pattern_opt->count() > 0) f.pattern = &a.pattern;
  if (a.seed_opt->count() > 0) f.seed = &a.seed;
  return oracle_spec_from_flags(draft, f);
}

BlockSizeFlag parse_block_size_flag(const std::string& text) {
  BlockSizeFlag f;
  if (text == "auto") {
    f.policy = BlockPolicy::Auto;
    return f;
  }
  int k = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), k);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    fail("--block-size '{}': expected a width K or auto", text);
  check_block_size(k);
  f.size = k;
  return f;
}

}  // namespace nextn::cli
