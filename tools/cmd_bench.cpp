// nextn bench decode | verify: measurements through the production path.
// `verify` prints every arm's counters before any timing and refuses (exit 2,
// no table) when an arm's counters do not match its identity or the arms
// disagree on tokens (src/bench/verify_bench.h).
#include <fmt/ranges.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/decode_bench.h"
#include "bench/decode_breakdown.h"
#include "bench/decode_roofline.h"
#include "bench/machine.h"
#include "bench/projection.h"
#include "bench/chain.h"
#include "bench/trunk.h"
#include "bench/verify_bench.h"
#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/synthetic.h"
#include "model/runtime.h"
#include "model/target_model.h"

namespace nextn::cli {
namespace {

struct DecodeArgs {
  std::string model, backend = "cpu", draft = "none", preset, quant = "q4";
  uint64_t seed = 0;
  CLI::Option *quant_opt = nullptr, *seed_opt = nullptr;
  RuntimeArgs runtime;
  int max_rows = 0;  // 0: the rows the decode uses
  CLI::Option *block_opt = nullptr, *draft_vocab_opt = nullptr;
  bench::DecodeBenchOptions o;
  bool json = false, breakdown = false;
};

// -m DIR, or --preset NAME generated in host memory (no file: io/synthetic.h).
Qwen35Checkpoint open_decode_checkpoint(const DecodeArgs& a) {
  if (a.preset.empty()) {
    if (a.quant_opt->count() > 0 || a.seed_opt->count() > 0) fail("--quant and --seed apply to --preset only");
    return Qwen35Checkpoint::open(model_dir_or_default(a.model));
  }
  if (!a.model.empty()) fail("--preset {}: give -m or --preset, not both", a.preset);
  const auto p = synthetic_preset(a.preset);
  if (!p)
    fail("--preset: unknown preset '{}' (bench decode generates Qwen3.5 presets: {})", a.preset,
         fmt::join(synthetic_preset_names(), ", "));
  MakeCheckpointOptions o;
  o.quant = a.quant;
  o.seed = a.seed;
  return synthetic_checkpoint_in_memory(*p, o);
}

void run_decode(const DecodeArgs& a) {
  const BackendKind kind = parse_backend(a.backend);
  const RuntimeOptions runtime = runtime_options(a.runtime);
  if (a.o.prompt_len < 1) fail("--prompt-len {} must be at least 1", a.o.prompt_len);
  if (a.o.max_new_tokens < 2) fail("-n {}: a decode benchmark needs at least 2 tokens", a.o.max_new_tokens);
  if (a.o.repeats < 1) fail("--repeats {} must be at least 1", a.o.repeats);
  bench::DecodeBenchOptions o = a.o;
  o.draft = parse_draft_kind(a.draft);
  if (o.draft == DraftKind::Oracle) fail("--draft oracle: bench decode measures none or mtp (see bench verify)");
  if (a.block_opt->count() > 0) {
    if (o.draft == DraftKind::None) fail("--block-size applies to --draft mtp only");
    check_block_size(o.block_size);
  }
  o.draft_vocab = draft_vocab_from_flag(o.draft, a.draft_vocab_opt->count() > 0, a.o.draft_vocab);
  const auto ckpt = open_decode_checkpoint(a);
  const std::string& dir = ckpt.dir();
  // Clamped as the runtime clamps it, so the report says what the drafts covered.
  if (o.draft_vocab > 0) o.draft_vocab = effective_draft_vocab(o.draft_vocab, ckpt.config().vocab_size);
  if (o.draft == DraftKind::Mtp && ckpt.mtp_layers() == 0)
    fail("{}: --draft mtp: the checkpoint has no MTP head (0 MTP layers)", dir);
  if (o.draft == DraftKind::Mtp && a.block_opt->count() == 0) o.block_size = default_block_size(ckpt.mtp_layers());
  auto machine = bench::machine_begin(a.backend);
  // CUDA: copy bandwidth and the memory baseline before any runtime exists,
  // then every runtime is probed for device memory (src/bench/decode_roofline.h).
  bench::DeviceFigures fig;
  if (kind == BackendKind::Cuda) bench::measure_device(&fig);
  const int threads = runtime.cpu_threads;
  // CPU: the copy anchor, a working set the size of what a decode token reads.
  if (kind == BackendKind::Cpu)
    fig.host = bench::host_copy_bandwidth(bench::decode_bytes(ckpt).per_token(),
                                          threads > 0 ? threads : default_thread_count(), 20);
  // The runtimes are built for the rows the decode uses (a verify block of K,
  // or one row), so that the peak below is the workspace such a run needs;
  // prompts then run in chunks of that many rows (same bits). The
  // --prefill-len runs get what `generate` builds (64 rows): a long prompt's
  // last 1..64 tokens run on the graphs, one chunk of rows at a time.
  const int rows = a.max_rows > 0 ? a.max_rows : o.draft == DraftKind::None ? 1 : o.block_size;
  const int long_rows = a.max_rows > 0 ? a.max_rows : kMaxForwardRows;
  if (rows > kMaxForwardRows) fail("--max-rows {} exceeds {}", rows, kMaxForwardRows);
  auto factory_for = [&](int n, const RuntimeOptions& ro) {
    RuntimeFactory f = [&ckpt, kind, ro, n](int cap) { return make_runtime(ckpt, kind, cap, ro, n); };
    return kind == BackendKind::Cuda ? bench::probe_memory(f, &fig, n) : f;
  };
  const RuntimeFactory factory = factory_for(rows, runtime), long_prompt = factory_for(long_rows, runtime);
  const auto r = bench::run_decode_bench(factory, ckpt.config().vocab_size, o, &long_prompt);
  bench::BreakdownReport breakdown;
  if (a.breakdown) {  // separate runtimes with timing events, so that the timed runs above have none
    RuntimeOptions profiled = runtime;
    profiled.profile = true;
    const RuntimeFactory pf = factory_for(rows, profiled), plong = factory_for(long_rows, profiled);
    breakdown = bench::run_breakdown(pf, ckpt.config().vocab_size, o, &plong);
  }
  bench::machine_end(machine, a.backend);
  const auto bytes = bench::decode_bytes(ckpt);
  const auto budget = bench::memory_budget(ckpt, fig.peak_capacity > 0 ? fig.peak_capacity : 1);
  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = dir;
    j["backend"] = a.backend;
    if (kind == BackendKind::Cpu) j["cpu_threads"] = threads > 0 ? threads : default_thread_count();
    auto body = bench::decode_report_json(r, o);
    for (auto it = body.begin(); it != body.end(); ++it) j[it.key()] = it.value();
    j["roofline"] = bench::roofline_json(bytes, budget, fig, r.decode.median);
    if (a.breakdown) j["breakdown"] = bench::breakdown_json(breakdown);
    j["machine"] = bench::machine_json(machine);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  const std::string threads_note =
      kind == BackendKind::Cpu ? fmt::format(", {} threads", threads > 0 ? threads : default_thread_count()) : "";
  std::printf("nextn bench decode: %s (backend %s%s), %s\n", dir.c_str(), a.backend.c_str(), threads_note.c_str(),
              o.draft == DraftKind::None ? "plain greedy" : "speculative, MTP drafts");
  std::printf("%s", bench::decode_table_text(r, o).c_str());
  std::printf("%s", bench::roofline_text(bytes, budget, fig, r.decode.median, 0).c_str());
  if (a.breakdown) std::printf("%s", bench::breakdown_text(breakdown).c_str());
  std::printf("%s", bench::machine_text(machine).c_str());
}

struct VerifyArgs {
  std::string model, backend = "cpu", block_sizes = "3,4,8,16,32", arms = "batched,walk,pad,fused", draft = "mtp",
                     prompt_ids, draft_cost = "free", walk = "flag", fault = "none";
  OracleArgs oracle;
  RuntimeArgs runtime;
  int pad_width = 0, repeats = 5, n = 64;
  bool json = false;
  CLI::Option* ids_opt = nullptr;
};

void run_verify(const VerifyArgs& a) {
  bench::VerifyBenchOptions o;
  std::vector<int> ks;
  for (int32_t k : parse_id_list(a.block_sizes, "--block-sizes")) ks.push_back(int(k));
  o.block_sizes = ks;
  o.arms = parse_verify_arms(a.arms);
  o.draft = parse_draft_kind(a.draft);
  o.oracle = oracle_spec(a.draft, a.oracle);
  o.draft_cost = parse_draft_cost(a.draft_cost);
  o.pad_width = a.pad_width;
  o.repeats = a.repeats;
  o.max_new_tokens = a.n;
  o.fault = parse_fault(a.fault);
  bench::check_verify_bench_options(o);  // everything but the prompt, before the model is read
  const BackendKind kind = parse_backend(a.backend);
  RuntimeOptions runtime = runtime_options(a.runtime);
  runtime.walk = parse_walk_variant(a.walk);
  runtime.fault = o.fault;  // runtime-walk-as-batched: the runtime's head_walk

  const std::string dir = model_dir_or_default(a.model);
  // Any target family (Qwen3.5, Gemma 4): the arms only use the runtime interface.
  const TargetModel target = open_target_model(dir, kind, runtime);
  const int vocab = target.info.vocab_size;
  if (o.draft == DraftKind::Mtp && target.info.mtp_layers == 0)
    fail("{}: --draft mtp: the checkpoint has no MTP head (0 MTP layers); use --draft oracle", dir);
  if (o.draft_cost == DraftCost::Mtp && target.info.mtp_layers == 0)
    fail("{}: --draft-cost mtp: the checkpoint has no MTP head (0 MTP layers)", dir);
  o.prompt = a.ids_opt->count() > 0 ? parse_id_list(a.prompt_ids, "--prompt-ids") : bench::synthetic_prompt(16, vocab);
  for (int32_t t : o.prompt)
    if (t >= vocab) fail("--prompt-ids: token id {} is outside the vocabulary [0, {})", t, vocab);

  auto machine = bench::machine_begin(a.backend);
  bench::VerifyBench b(target.factory, o);
  b.attribute();
  const std::string head = fmt::format(
      "nextn bench verify: {} (backend {}), drafter {}, prompt {} tokens, -n {}, K {}, arms {}, {} repeats\n", dir,
      a.backend, bench::drafter_signature(o.draft, o.oracle, o.draft_cost), o.prompt.size(), o.max_new_tokens, a.block_sizes,
      a.arms, o.repeats);
  auto refuse = [&](const bench::VerifyBenchReport& r) {
    bench::machine_end(machine, a.backend);
    if (a.json) {
      auto j = bench::report_json(r, o);
      j["machine"] = bench::machine_json(machine);
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("refused:\n");
      for (const auto& msg : r.refusals) std::printf("  %s\n", msg.c_str());
      std::printf("%s", bench::machine_text(machine).c_str());
    }
    std::fflush(stdout);
    throw RefusedError(fmt::format("bench verify: the arms cannot be attributed ({} problem{}, e.g. {}); no table",
                                   r.refusals.size(), r.refusals.size() == 1 ? "" : "s", r.refusals.front()));
  };
  if (!a.json) {
    std::printf("%s%s", head.c_str(), bench::counters_text(b.report()).c_str());
    std::fflush(stdout);
  }
  if (!b.report().refusals.empty()) refuse(b.report());
  if (!a.json) {
    std::printf("tokens: every arm's output equals plain greedy (%zu tokens)\n", b.report().reference.size());
    std::fflush(stdout);
  }
  b.time();
  if (!b.report().refusals.empty()) refuse(b.report());
  bench::machine_end(machine, a.backend);
  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = dir;
    j["backend"] = a.backend;
    auto body = bench::report_json(b.report(), o);
    for (auto it = body.begin(); it != body.end(); ++it) j[it.key()] = it.value();
    j["machine"] = bench::machine_json(machine);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s", bench::table_text(b.report(), o).c_str());
  std::printf("%s", bench::machine_text(machine).c_str());
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* bench_cmd = app.add_subcommand("bench", "Benchmarks through the production path");
  bench_cmd->require_subcommand(1);

  auto d = std::make_shared<DecodeArgs>();
  auto* dec = bench_cmd->add_subcommand("decode", "Prefill and plain greedy decode tokens/s");
  dec->add_option("-m,--model", d->model, "Checkpoint directory (default: the shipped model)");
  dec->add_option("--preset", d->preset,
                  "Instead of -m: a make-checkpoint Qwen3.5 preset generated in host memory, no file written (a "
                  "checkpoint larger than the disk, e.g. qwen3.5-122b-a10b)");
  d->quant_opt = dec->add_option("--quant", d->quant, "--preset: q4 (default), bf16, fp8 or gptq4");
  d->seed_opt = dec->add_option("--seed", d->seed, "--preset: RNG seed (default 0; the bytes make-checkpoint writes)");
  dec->add_option("--backend", d->backend, "cpu or cuda (default cpu)");
  dec->add_option("--prompt-len", d->o.prompt_len, "Synthetic prompt length (default 64)");
  dec->add_option("-n", d->o.max_new_tokens, "Tokens to generate (default 64)");
  dec->add_option("--repeats", d->o.repeats, "Timed repeats after one warm-up (default 5)");
  dec->add_option("--prefill-len", d->o.prefill_len, "Also time prefill of a prompt this long (separate runs)")
      ->check(number())
      ->check(CLI::NonNegativeNumber);
  dec->add_option("--draft", d->draft, "none (plain greedy, default) or mtp (speculative with the MTP head)");
  d->block_opt = dec->add_option("--block-size", d->o.block_size, "--draft mtp: verify width K (default: MTP layers + 2)");
  dec->add_option("--max-rows", d->max_rows,
                  "Rows per forward the runtimes are built for (CUDA workspaces; default: K with --draft mtp, else 1, "
                  "and 64 for the --prefill-len runs; 64: every workspace at its largest)")
      ->check(CLI::Range(1, kMaxForwardRows));
  d->draft_vocab_opt = dec->add_option("--draft-vocab", d->o.draft_vocab,
                                       "--draft mtp: draft from token ids [0, N) only (default: the whole vocabulary)")
                           ->check(number());
  add_runtime_options(dec, &d->runtime);
  add_runtime_bench_options(dec, &d->runtime);
  dec->add_flag("--json", d->json, "Print one JSON object");
  dec->add_flag("--breakdown", d->breakdown,
                "Also time each operation class per token / round / prefill (CUDA: timing events in the graphs)");
  dec->callback([d] { run_decode(*d); });

  auto v = std::make_shared<VerifyArgs>();
  auto* ver = bench_cmd->add_subcommand("verify", "Guarded verify-arm benchmark: counters first, then medians");
  ver->add_option("-m,--model", v->model, "Checkpoint directory (default: the shipped model)");
  ver->add_option("--block-sizes", v->block_sizes, "Comma-separated K values (default 3,4,8,16,32)");
  ver->add_option("--verify", v->arms, "Comma-separated arms: batched,walk,pad,fused (default all four)");
  ver->add_option("--draft", v->draft, "Drafter: mtp (default) or oracle");
  add_oracle_options(ver, &v->oracle);
  ver->add_option("--draft-cost", v->draft_cost,
                  "Oracle: free (default) or mtp (run the MTP draft chain for its cost, use the oracle's tokens)");
  ver->add_option("--pad-width", v->pad_width, "Pad arm width (default per K: next multiple of 16, at most 64)");
  ver->add_option("--repeats", v->repeats, "Timed repeats per arm (default 5)");
  v->ids_opt = ver->add_option("--prompt-ids", v->prompt_ids, "Prompt token ids (default: 16 synthetic ids)");
  ver->add_option("-n", v->n, "Tokens to generate per run (default 64)");
  ver->add_option("--backend", v->backend, "cpu or cuda (default cpu)");
  add_runtime_options(ver, &v->runtime);
  add_runtime_bench_options(ver, &v->runtime);
  ver->add_option("--walk", v->walk, "CUDA walk arm: flag (default: rows past a mismatch return on a device flag) or "
                                     "while (a WHILE graph node stops launching rows)");
  ver->add_option("--fault", v->fault,
                  "Plant a fault the guard must catch (exit 2, no table): none (default), walk-as-batched (the "
                  "verifier's walk arm) or runtime-walk-as-batched (the runtime's head_walk)");
  ver->add_flag("--json", v->json, "Print one JSON object");
  ver->callback([v] { run_verify(*v); });

  // nextn bench projection (src/bench/projection.h): issue 5's kernel timing.
  auto pr = std::make_shared<bench::ProjectionOptions>();
  auto pw = std::make_shared<std::string>("1,2,3,4,5,6,8,12,16,24,32");
  auto* proj = bench_cmd->add_subcommand("projection", "Quantized projection per width vs the device copy bandwidth");
  proj->add_option("--shape", pr->shape, "ROWSxCOLS (default 248320x5120, the 27B LM head)");
  proj->add_option("--quant", pr->quant, "q4 or q8 (default q4)");
  proj->add_option("--group-size", pr->group_size, "Quantization group (default 64)");
  proj->add_option("--widths", *pw, "Comma-separated row counts (default 1,2,3,4,5,6,8,12,16,24,32)");
  proj->add_flag("--argmax", pr->argmax, "Fused projection + argmax (the head's production path)");
  proj->add_option("--repeats", pr->repeats, "Timed launches per width (default 30)");
  proj->add_option("--splits", pr->splits, "Split-K override for tuning (default 0: the production choice)")
      ->check(number());
  proj->add_option("--stream-per-sm", pr->stream_per_sm,
                   "Streamed kernel: at most this many blocks per SM, 1..3 (tuning; default: the production choice)")
      ->check(number());
  proj->add_option("--stream-stages", pr->stream_stages,
                   "Streamed kernel: at most this many ring stages, 2..12 (tuning; default: the production choice)")
      ->check(number());
  proj->add_option("--fold", pr->fold,
                   "norm or swiglu: time the fold against the op's own kernel then the matmul (widths 1..8)");
  proj->add_flag("--json", pr->json, "Print one JSON object");
  proj->callback([pr, pw] {
    pr->widths.clear();
    for (int32_t w : parse_id_list(*pw, "--widths")) pr->widths.push_back(int(w));
    if (bench::run_projection(*pr) != 0)
      throw Error("bench projection: the batch invariance or the fold's bits check failed");
  });

  // nextn bench trunk (src/bench/trunk.h): issue 24's kernel table.
  auto tr = std::make_shared<bench::TrunkOptions>();
  auto trows = std::make_shared<std::string>("1,2,4,8,16,32");
  auto tfp8 = std::make_shared<std::string>("w8a16");
  auto* trunk = bench_cmd->add_subcommand(
      "trunk", "Every trunk matrix of the Qwen3.5 presets per row count vs the device copy bandwidth");
  trunk->add_option("--presets", tr->presets, "Comma-separated presets (default qwen3.5-0.8b,qwen3.5-4b,qwen3.5-27b)")
      ->delimiter(',');
  trunk->add_option("--quant", tr->quant, "q4, q8 (MLX affine, group 64) or fp8 (128 x 128 blocks) (default q4)");
  trunk->add_option("--fp8-matmul", *tfp8, "fp8: w8a16 (default) or w8a8, with its error against w8a16");
  trunk->add_option("--rows", *trows, "Comma-separated row counts (default 1,2,4,8,16,32)");
  trunk->add_option("--repeats", tr->repeats, "Timed calls per matrix and row count (default 30)")->check(number());
  trunk->add_flag("--json", tr->json, "Print one JSON object");
  trunk->callback([tr, trows, tfp8] {
    tr->fp8_w8a8 = parse_fp8_matmul(*tfp8) == Fp8Matmul::W8A8;
    tr->rows.clear();
    for (int32_t r : parse_id_list(*trows, "--rows")) tr->rows.push_back(int(r));
    if (bench::run_trunk(*tr) != 0) throw Error("bench trunk: batch invariance check failed");
  });

  // nextn bench chain (src/bench/chain.h): issue 24's persistent-kernel prototype.
  auto ch = std::make_shared<bench::ChainOptions>();
  auto crows = std::make_shared<std::string>("1,2,4,8");
  auto* chain = bench_cmd->add_subcommand(
      "chain", "A preset's MLP blocks as per-layer launches vs one chained launch, per row count");
  chain->add_option("--preset", ch->preset, "A dense qwen3.5 preset (default qwen3.5-0.8b)");
  chain->add_option("--layers", ch->layers, "MLP blocks in the chain, 1..64 (default: the preset's layers)")
      ->check(number());
  chain->add_option("--links", ch->links,
                    "mlp: every MLP block in one chain (default); layer: a chain per layer of GDN out, MLP, next GDN in");
  chain->add_option("--quant", ch->quant, "q4 or q8, MLX affine group 64 (default q4)");
  chain->add_option("--rows", *crows, "Comma-separated row counts, each 1..8 (default 1,2,4,8)");
  chain->add_option("--repeats", ch->repeats, "Timed replays per arm and row count (default 30)")->check(number());
  chain->add_flag("--json", ch->json, "Print one JSON object");
  chain->callback([ch, crows] {
    ch->rows.clear();
    for (int32_t r : parse_id_list(*crows, "--rows")) ch->rows.push_back(int(r));
    if (bench::run_chain(*ch) != 0) throw Error("bench chain: the chained launch's bits differ from the launches'");
  });
}

}  // namespace nextn::cli
