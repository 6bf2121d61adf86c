#include "bench/chain.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "bench/machine.h"
#include "bench/trunk.h"
#include "core/error.h"
#include "io/synthetic.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/chain_bench.h"
#endif

namespace nextn::bench {

namespace {

constexpr int kMaxLayers = 64;  // --links mlp: cuda::kChainMaxLinks / 2 (and every dense preset's count)
constexpr int kMaxRows = 8;     // cuda::kFoldedRows: the folds' widths

SyntheticPreset check_options(const ChainOptions& o) {
  const auto p = synthetic_preset(o.preset);
  if (!p || o.preset.rfind("qwen3.5-", 0) != 0 || p->moe())
    fail("bench chain: --preset: '{}' is not a dense qwen3.5 preset (qwen3.5-0.8b, qwen3.5-4b, qwen3.5-27b)", o.preset);
  if (o.layers < 0 || o.layers > kMaxLayers) fail("bench chain: --layers must be 1..{}, got {}", kMaxLayers, o.layers);
  if (o.layers == 0 && p->layers > kMaxLayers)
    fail("bench chain: {} has {} layers, more than the bench takes ({}): give --layers", o.preset, p->layers, kMaxLayers);
  if (o.quant != "q4" && o.quant != "q8") fail("bench chain: --quant must be q4 or q8, got '{}'", o.quant);
  if (o.links != "mlp" && o.links != "layer") fail("bench chain: --links must be mlp or layer, got '{}'", o.links);
  if (o.rows.empty()) fail("bench chain: --rows is empty");
  for (int r : o.rows)
    if (r < 1 || r > kMaxRows) fail("bench chain: --rows entries must be 1..{} (the folded widths), got {}", kMaxRows, r);
  if (o.repeats < 1) fail("bench chain: --repeats must be at least 1, got {}", o.repeats);
  return *p;
}

}  // namespace

int run_chain(const ChainOptions& o) {
  [[maybe_unused]] const SyntheticPreset p = check_options(o);  // before any device work
#ifndef NEXTN_HAVE_CUDA
  fail("bench chain: this build has no CUDA backend");
#else
  MachineRecord machine = machine_begin("cuda");
  cuda::ChainBenchConfig c;
  c.hidden = p.hidden;
  c.intermediate = p.intermediate;
  c.layers = o.layers > 0 ? o.layers : p.layers;
  c.quant = o.quant;
  if (o.links == "layer")
    for (const TrunkMatrix& m : trunk_matrices(p)) {
      if (m.name == "gdn.in") c.in_rows = m.rows;
      if (m.name == "gdn.out") c.out_cols = m.cols;
    }
  c.rows = o.rows;
  c.repeats = o.repeats;
  const cuda::ChainBenchResult r = cuda::bench_chain(c);
  machine_end(machine, "cuda");
  bool equal = true;
  nlohmann::ordered_json out;
  out["benchmark"] = "bench chain";
  out["device"] = r.device;
  out["preset"] = o.preset;
  out["hidden"] = c.hidden;
  out["intermediate"] = c.intermediate;
  out["layers"] = c.layers;
  out["links"] = o.links;
  out["in_rows"] = c.in_rows;
  out["out_cols"] = c.out_cols;
  out["launches_per_replay"] = r.launches;
  out["chains_per_replay"] = r.chains;
  out["quant"] = o.quant;
  out["group_size"] = 64;
  out["gate_up_splits"] = r.gate_up_splits;
  out["down_splits"] = r.down_splits;
  out["weight_mb"] = r.weight_bytes / 1e6;
  out["copy_gbs"] = r.copy_gbs;
  out["repeats"] = o.repeats;
  std::string table;
  for (const auto& row : r.rows) {
    equal = equal && row.equal;
    // The weights' bytes over each arm's time, against copy bandwidth.
    const double chain_share = r.weight_bytes / (row.chain_ms * 1e-3) / 1e9 / r.copy_gbs;
    const double calls_share = r.weight_bytes / (row.calls_ms * 1e-3) / 1e9 / r.copy_gbs;
    out["rows"].push_back({{"T", row.T},
                           {"launches_us", row.calls_ms * 1e3},
                           {"launches_us_min", row.calls_ms_min * 1e3},
                           {"launches_us_max", row.calls_ms_max * 1e3},
                           {"chain_us", row.chain_ms * 1e3},
                           {"chain_us_min", row.chain_ms_min * 1e3},
                           {"chain_us_max", row.chain_ms_max * 1e3},
                           {"chain_over_launches", row.chain_ms / row.calls_ms},
                           {"launches_copy_share", calls_share},
                           {"chain_copy_share", chain_share},
                           {"chain_grid", row.grid},
                           {"bits_equal", row.equal}});
    table += fmt::format("| {} | {:.1f} [{:.1f}, {:.1f}] ({:.0f}%) | {:.1f} [{:.1f}, {:.1f}] ({:.0f}%) | {:.3f} | {} | {} |\n",
                         row.T, row.calls_ms * 1e3, row.calls_ms_min * 1e3, row.calls_ms_max * 1e3, 100 * calls_share,
                         row.chain_ms * 1e3, row.chain_ms_min * 1e3, row.chain_ms_max * 1e3, 100 * chain_share,
                         row.chain_ms / row.calls_ms, row.grid, row.equal ? "yes" : "NO");
  }
  out["bits_equal"] = equal;
  out["machine"] = machine_json(machine);
  if (o.json) {
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("{}\n", machine_text(machine));
    fmt::print("{} layers of {}: {}x{} gate_up, {}x{} down{}, {} group 64 (MLP splits {} and {}), {:.1f} MB of weights; "
               "copy bandwidth {:.0f} GB/s\n",
               c.layers, o.preset, 2 * c.intermediate, c.hidden, c.hidden, c.intermediate,
               o.links == "layer" ? fmt::format(", {}x{} GDN out, {}x{} GDN in", c.hidden, c.out_cols, c.in_rows, c.hidden)
                                  : std::string(),
               o.quant, r.gate_up_splits, r.down_splits, r.weight_bytes / 1e6, r.copy_gbs);
    fmt::print("us per pass over every block: median [min, max] of {} graph replays (share of copy bandwidth)\n\n",
               o.repeats);
    fmt::print("| rows | {} launches | {} chained launch{} | chain / launches | chain blocks | same bits |\n",
               r.launches, r.chains, r.chains == 1 ? "" : "es");
    fmt::print("|---:|---:|---:|---:|---:|---|\n{}", table);
  }
  return equal ? 0 : 3;
#endif
}

}  // namespace nextn::bench
