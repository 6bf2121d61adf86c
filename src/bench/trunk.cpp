#include "bench/trunk.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "bench/machine.h"
#include "core/error.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/projection_bench.h"
#endif

namespace nextn::bench {

std::vector<TrunkMatrix> trunk_matrices(const SyntheticPreset& p) {
  // Every fourth layer is full attention (synthetic_config_json's layer_types).
  const int full = p.layers / 4, gdn = p.layers - full;
  const int q = p.heads * p.head_dim, kv = p.kv_heads * p.head_dim;
  const int kd = p.lin_k_heads * p.lin_k_dim, vd = p.lin_v_heads * p.lin_v_dim;
  std::vector<TrunkMatrix> m;
  // The runtime fuses q (with its gate) | k | v, and the GDN in-projections
  // qkv | z | b | a, into one matrix each (CudaQwen35Weights::upload_linear).
  if (full > 0) {
    m.push_back({"attn.qkv", 2 * q + 2 * kv, p.hidden, full, false});
    m.push_back({"attn.o", p.hidden, q, full, false});
  }
  if (gdn > 0) {
    m.push_back({"gdn.in", (2 * kd + vd) + vd + 2 * p.lin_v_heads, p.hidden, gdn, false});
    m.push_back({"gdn.out", p.hidden, vd, gdn, false});
  }
  m.push_back({"mlp.gate_up", 2 * p.intermediate, p.hidden, p.layers, false});
  m.push_back({"mlp.down", p.hidden, p.intermediate, p.layers, false});
  m.push_back({"head", p.vocab, p.hidden, 1, true});
  return m;
}

namespace {

void check_options(const TrunkOptions& o) {
  if (o.presets.empty()) fail("bench trunk: --presets is empty");
  for (const auto& name : o.presets) {
    const auto p = synthetic_preset(name);
    if (!p || name.rfind("qwen3.5-", 0) != 0 || p->moe())  // trunk_matrices models the dense MLP only
      fail("bench trunk: --presets: '{}' is not qwen3.5-0.8b, qwen3.5-4b or qwen3.5-27b", name);
  }
  if (o.quant != "q4" && o.quant != "q8" && o.quant != "fp8")
    fail("bench trunk: --quant must be q4, q8 or fp8, got '{}'", o.quant);
  if (o.fp8_w8a8 && o.quant != "fp8") fail("bench trunk: --fp8-matmul w8a8 needs --quant fp8");
  if (o.rows.empty()) fail("bench trunk: --rows is empty");
  for (int r : o.rows)
    if (r < 1 || r > 64) fail("bench trunk: --rows entries must be 1..64, got {}", r);
  if (o.repeats < 1) fail("bench trunk: --repeats must be at least 1, got {}", o.repeats);
}

}  // namespace

int run_trunk(const TrunkOptions& o) {
  check_options(o);  // before any device work: bad input reads the same without CUDA
#ifndef NEXTN_HAVE_CUDA
  fail("bench trunk: this build has no CUDA backend");
#else
  MachineRecord machine = machine_begin("cuda");
  nlohmann::ordered_json out;
  out["benchmark"] = "bench trunk";
  const bool fp8 = o.quant == "fp8";
  out["quant"] = o.quant;
  out["fp8_matmul"] = fp8 ? (o.fp8_w8a8 ? "w8a8" : "w8a16") : "";
  out["group_size"] = fp8 ? 128 : 64;
  out["rows"] = o.rows;
  out["repeats"] = o.repeats;
  double copy_min = 0, copy_max = 0;
  bool invariant = true;
  std::string text;
  for (const auto& name : o.presets) {
    const SyntheticPreset p = *synthetic_preset(name);
    nlohmann::ordered_json pj;
    pj["preset"] = name;
    // Per row count: the matmul time of one step (each matrix times its calls
    // per token) and the bytes it streams.
    std::vector<double> step_us(o.rows.size(), 0.0);
    double step_bytes = 0, copy_sum = 0;
    std::string table;
    int measured = 0;
    for (const TrunkMatrix& m : trunk_matrices(p)) {
      if (fp8 && m.argmax) continue;  // FP8 checkpoints' LM heads are bf16, and nextn keeps them so
      ++measured;
      cuda::ProjBenchConfig c;
      c.rows = m.rows;
      c.cols = m.cols;
      c.quant = o.quant;
      c.group = o.quant == "fp8" ? 128 : 64;
      c.fp8_w8a8 = o.fp8_w8a8;
      c.widths = o.rows;
      c.argmax = m.argmax;
      c.repeats = o.repeats;
      const cuda::ProjBenchResult r = cuda::bench_projection(c);
      out["device"] = r.device;
      copy_min = copy_min == 0 ? r.copy_gbs : std::min(copy_min, r.copy_gbs);
      copy_max = std::max(copy_max, r.copy_gbs);
      copy_sum += r.copy_gbs;
      invariant = invariant && r.invariant;
      step_bytes += r.weight_bytes * m.per_token;
      nlohmann::ordered_json mj = {{"name", m.name},
                                   {"rows", m.rows},
                                   {"cols", m.cols},
                                   {"per_token", m.per_token},
                                   {"argmax", m.argmax},
                                   {"weight_mb", r.weight_bytes / 1e6},
                                   {"kernel", r.streamed ? "streamed" : "generic"},
                                   {"splits", r.splits},
                                   {"copy_gbs", r.copy_gbs},
                                   {"batch_invariant", r.invariant}};
      if (o.fp8_w8a8)
        mj["w8a8_error"] = {{"rel_rms", r.w8a8_rel_rms},
                            {"rel_max", r.w8a8_rel_max},
                            {"outliers_rel_rms", r.w8a8_outlier_rel_rms},
                            {"outliers_rel_max", r.w8a8_outlier_rel_max}};
      const double t1 = r.rows.front().ms_median;
      table += fmt::format("| {} | {}x{} | {:.1f} | {} |", m.name, m.rows, m.cols, r.weight_bytes / 1e6, m.per_token);
      for (size_t i = 0; i < r.rows.size(); ++i) {
        const auto& row = r.rows[i];
        const double gbs = row.bytes / (row.ms_median * 1e-3) / 1e9;
        step_us[i] += row.ms_median * 1e3 * m.per_token;
        mj["timings"].push_back({{"R", row.W},
                                 {"us", row.ms_median * 1e3},
                                 {"us_min", row.ms_min * 1e3},
                                 {"us_max", row.ms_max * 1e3},
                                 {"gbs", gbs},
                                 {"copy_share", gbs / r.copy_gbs},
                                 {"over_one_row", row.ms_median / t1}});
        table += fmt::format(" {:.1f} ({:.0f}%) |", row.ms_median * 1e3, 100.0 * gbs / r.copy_gbs);
      }
      if (o.fp8_w8a8)
        table += fmt::format(" {:.2e} / {:.2e} | {:.2e} / {:.2e} |", r.w8a8_rel_rms, r.w8a8_rel_max,
                             r.w8a8_outlier_rel_rms, r.w8a8_outlier_rel_max);
      if (!r.invariant) table += fmt::format(" batch invariance FAILED:{}", r.invariant_detail);
      table += "\n";
      pj["matrices"].push_back(mj);
    }
    // The step's weight bytes at the preset's mean copy bandwidth, against its summed matmul time.
    const double copy = copy_sum / double(measured);
    std::string step_line = "| step matmuls (weights only) | | " + fmt::format("{:.0f}", step_bytes / 1e6) + " | |";
    for (size_t i = 0; i < o.rows.size(); ++i) {
      const double share = step_bytes / (copy * 1e9) / (step_us[i] * 1e-6);
      pj["step"].push_back({{"R", o.rows[i]}, {"us", step_us[i]}, {"copy_share", share}, {"over_one_row", step_us[i] / step_us[0]}});
      step_line += fmt::format(" {:.0f} ({:.0f}%) |", step_us[i], 100.0 * share);
    }
    pj["step_weight_mb"] = step_bytes / 1e6;
    out["presets"].push_back(pj);
    const std::string format = !fp8 ? "MLX affine, group 64"
                               : o.fp8_w8a8 ? "e4m3 weights, 128 x 128 block scales, W8A8; LM head not FP8, not timed"
                                            : "e4m3 weights, 128 x 128 block scales, W8A16; LM head not FP8, not timed";
    text += fmt::format("\n### {} {} ({})\n\n| matrix | rows x cols | MB | per token |", name, o.quant, format);
    for (int r : o.rows) text += fmt::format(" R={} us (%copy) |", r);
    if (o.fp8_w8a8) text += " W8A8 vs W8A16: rel rms / rel max | with outlier columns |";
    text += "\n|---|---|---:|---:|";
    for (size_t i = 0; i < o.rows.size() + (o.fp8_w8a8 ? 2 : 0); ++i) text += "---:|";
    text += "\n" + table + step_line + "\n";
  }
  machine_end(machine, "cuda");
  out["copy_gbs_min"] = copy_min;
  out["copy_gbs_max"] = copy_max;
  out["batch_invariant"] = invariant;
  out["machine"] = machine_json(machine);
  if (o.json) {
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("{}\n", machine_text(machine));
    fmt::print("copy bandwidth (D2D 1 GiB, read+write, measured beside every matrix): {:.0f}-{:.0f} GB/s\n", copy_min,
               copy_max);
    fmt::print("each cell: median us per call ({} timed calls, graphs of 10 launches over rotated weight copies), "
               "and the bytes it must move as a share of copy bandwidth\n{}",
               o.repeats, text);
  }
  return invariant ? 0 : 3;
#endif
}

}  // namespace nextn::bench
