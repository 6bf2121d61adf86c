// nextn make-checkpoint: a random-weight Qwen3.5 or Gemma 4 checkpoint at a
// real model's shapes (src/io/synthetic.h, src/io/synthetic_gemma4.h), for
// whole-model benchmarks without a download; with --size-only, the bytes it
// would hold, in total and per tensor-parallel rank, without writing it
// (models too large for any disk here, such as qwen3.5-397b-a17b, are sized
// this way).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "io/synthetic.h"
#include "io/synthetic_gemma4.h"

namespace nextn::cli {

namespace {

double gib(uint64_t bytes) { return double(bytes) / double(uint64_t(1) << 30); }

// --size-only's output: one line, or one JSON object.
void print_size(const std::string& preset, const std::string& quant, int degree, const SyntheticCheckpointSize& s,
                bool json) {
  uint64_t largest = 0;
  for (uint64_t b : s.per_rank) largest = std::max(largest, b);
  if (json) {
    const nlohmann::ordered_json j = {{"preset", preset},       {"quant", quant},      {"tensors", s.tensors},
                                      {"total_bytes", s.total}, {"tensor_parallel", degree},
                                      {"rank_bytes", s.per_rank}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::string ranks;
  for (uint64_t b : s.per_rank) ranks += (ranks.empty() ? "" : " ") + std::to_string(b);
  std::printf("preset %s, %s: %d tensors, %llu bytes (%.2f GiB); tensor parallel %d: rank bytes %s (largest %.2f GiB)\n",
              preset.c_str(), quant.c_str(), s.tensors, static_cast<unsigned long long>(s.total), gib(s.total), degree,
              ranks.c_str(), gib(largest));
}

}  // namespace

void register_make_checkpoint(CLI::App& app) {
  struct Opts {
    std::string preset, quant = "q4", out;
    uint64_t seed = 0;
    double shard_gb = 4.0;
    int threads = 0, tensor_parallel = 1;
    bool size_only = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("make-checkpoint",
                                 "Write a random-weight Qwen3.5 (with the MTP head) or Gemma 4 checkpoint at real shapes, "
                                 "or print its size (--size-only)");
  cmd->add_option("--preset", o->preset,
                  "qwen3.5-0.8b, qwen3.5-4b, qwen3.5-27b, qwen3.5-35b-a3b, qwen3.5-122b-a10b, qwen3.5-397b-a17b "
                  "(MoE: the last three), small-19m, gemma4-31b, gemma4-31b-assistant, gemma4-26b-a4b (MoE), "
                  "gemma4-26b-a4b-assistant (test-tiny, test-stream, test-tiny-moe: tests only)");
  auto* quant = cmd->add_option("--quant", o->quant,
                                "q4 (MLX affine 4-bit g64, mlx-community layout), bf16 (HF layout), fp8 (HF layout, "
                                "e4m3 + 128x128 weight_scale_inv, as Qwen's FP8 releases) or gptq4 (HF layout, GPTQ "
                                "4-bit sym g128); Gemma 4: bf16 (its default), q4 or q8 (MLX affine g64, HF names)");
  cmd->add_option("-o,--out", o->out, "Output directory (created; must not hold safetensors)");
  cmd->add_option("--seed", o->seed, "RNG seed (default 0); the bytes depend on preset, quant and seed only")
      ->check(non_negative());
  cmd->add_option("--shard-gb", o->shard_gb, "Shard size in GiB, at most 1024 (default 4)")->check(number());
  cmd->add_option("--threads", o->threads, "Generator threads (default: all cores; does not change the bytes)")
      ->check(number());
  cmd->add_flag("--size-only", o->size_only,
                "Write nothing: print the tensor bytes the checkpoint would hold, in total and per tensor-parallel "
                "rank, from the generator's own tensor list");
  auto* tp = cmd->add_option("--tensor-parallel", o->tensor_parallel,
                             "With --size-only: the bytes each of N ranks holds as `--tensor-parallel N` splits the "
                             "model (Qwen3.5 presets; replicated tensors count on every rank; default 1)")
                 ->check(number());
  auto* json = cmd->add_flag("--json", o->json, "With --size-only: print one JSON object");
  cmd->callback([o, quant, tp, json] {
    if (o->preset.empty()) fail("make-checkpoint: --preset is required");
    if (!o->size_only) {
      if (tp->count() > 0) fail("make-checkpoint: --tensor-parallel needs --size-only (a checkpoint is written whole)");
      if (json->count() > 0) fail("make-checkpoint: --json needs --size-only");
      if (o->out.empty()) fail("make-checkpoint: --out is required");
    } else if (!o->out.empty()) {
      fail("make-checkpoint: --size-only writes nothing; drop --out");
    }
    const auto p = synthetic_preset(o->preset);
    const auto gemma = gemma4_synthetic_preset(o->preset);
    if (gemma && quant->count() == 0) o->quant = "bf16";
    if (!p && !gemma) {
      std::string known;
      for (const auto& n : synthetic_preset_names()) known += (known.empty() ? "" : ", ") + n;
      for (const auto& n : gemma4_synthetic_preset_names()) known += ", " + n;
      fail("make-checkpoint: unknown --preset '{}' (expected one of: {})", o->preset, known);
    }
    if (o->size_only) {
      if (gemma && o->tensor_parallel != 1)
        fail("make-checkpoint: --tensor-parallel {}: Gemma 4 is not split (docs/tensor-parallel.md); only 1",
             o->tensor_parallel);
      const SyntheticCheckpointSize s = gemma ? gemma4_synthetic_checkpoint_size(*gemma, o->quant)
                                              : synthetic_checkpoint_size(*p, o->quant, o->tensor_parallel);
      print_size(o->preset, o->quant, o->tensor_parallel, s, o->json);
      return;
    }
    // Bounded before the conversion to bytes (a float-to-integer overflow is undefined).
    constexpr double kMaxShardGb = 1024;
    const double shard_bytes = o->shard_gb * double(uint64_t(1) << 30);
    if (!(o->shard_gb > 0 && o->shard_gb <= kMaxShardGb && shard_bytes >= 1))
      fail("make-checkpoint: --shard-gb {}: expected a size in GiB in (0, {}]", o->shard_gb, kMaxShardGb);
    constexpr int kMaxThreads = 4096;
    if (o->threads < 0 || o->threads > kMaxThreads)
      fail("make-checkpoint: --threads {}: expected 0 (all cores) to {}", o->threads, kMaxThreads);
    MakeCheckpointOptions mo;
    mo.quant = o->quant;
    mo.seed = o->seed;
    mo.shard_bytes = uint64_t(shard_bytes);
    mo.threads = o->threads;
    const auto r = gemma ? make_gemma4_checkpoint(*gemma, mo, o->out) : make_checkpoint(*p, mo, o->out);
    std::printf("wrote %s: preset %s, %s, seed %llu: %d tensors, %.3f GiB in %zu shard%s, %.1f s\n", o->out.c_str(),
                o->preset.c_str(), o->quant.c_str(), static_cast<unsigned long long>(o->seed), r.tensors,
                gib(r.bytes), r.files.size(), r.files.size() == 1 ? "" : "s", r.seconds);
  });
}

}  // namespace nextn::cli
