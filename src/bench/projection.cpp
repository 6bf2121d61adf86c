#include "bench/projection.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#ifdef NEXTN_HAVE_CUDA
#include "backend/cuda/projection_bench.h"
#endif

namespace nextn::bench {

int run_projection(const ProjectionOptions& o) {
  // Options first, so that bad input reads the same with or without CUDA.
  // ROWSxCOLS, each 1..2^24 (the largest head is 262144 x 16384): parsed
  // whole, so "10x20junk" and out-of-range numbers are refused, never wrapped.
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  int64_t dims[2] = {0, 0};
  const char* p = o.shape.data();
  const char* end = p + o.shape.size();
  bool shape_ok = true;
  for (int d = 0; d < 2 && shape_ok; ++d) {
    const auto [next, ec] = std::from_chars(p, end, dims[d]);
    shape_ok = ec == std::errc() && dims[d] >= 1 && dims[d] <= kMaxDim && (d == 1 ? next == end : next < end && *next == 'x');
    p = next + 1;
  }
  if (!shape_ok) fail("bench projection: --shape must be ROWSxCOLS with each in 1..{}, got '{}'", kMaxDim, o.shape);
  [[maybe_unused]] const int rows = int(dims[0]);  // read by the CUDA bench only
  const int cols = int(dims[1]);
  if (o.group_size != 32 && o.group_size != 64 && o.group_size != 128)
    fail("bench projection: --group-size must be 32, 64 or 128, got {}", o.group_size);
  for (int w : o.widths)
    if (w < 1 || w > 64) fail("bench projection: --widths entries must be 1..64, got {}", w);
  if (o.repeats < 1) fail("bench projection: --repeats must be at least 1, got {}", o.repeats);
  if (o.quant != "q4" && o.quant != "q8") fail("bench projection: --quant must be q4 or q8, got '{}'", o.quant);
  if (o.splits < 0 || (o.splits > 0 && (o.argmax || o.splits > cols / 128)))
    fail("bench projection: --splits {} must be 0 (automatic) or 1..{} without --argmax", o.splits, cols / 128);
  if (o.stream_per_sm < 0 || o.stream_per_sm > 3)
    fail("bench projection: --stream-per-sm must be 1..3, got {}", o.stream_per_sm);
  if (o.stream_stages != 0 && (o.stream_stages < 2 || o.stream_stages > 12))
    fail("bench projection: --stream-stages must be 2..12, got {}", o.stream_stages);
  if (!o.fold.empty() && o.fold != "norm" && o.fold != "swiglu")
    fail("bench projection: --fold must be norm or swiglu, got '{}'", o.fold);
  if (!o.fold.empty() && o.argmax) fail("bench projection: --fold and --argmax do not go together");
#ifndef NEXTN_HAVE_CUDA
  fail("bench projection: this build has no CUDA backend");
#else
  cuda::ProjBenchConfig c;
  c.rows = rows;
  c.cols = cols;
  c.quant = o.quant;
  c.group = o.group_size;
  c.widths = o.widths;
  c.argmax = o.argmax;
  c.repeats = o.repeats;
  c.splits = o.splits;
  c.stream_per_sm = o.stream_per_sm;
  c.stream_stages = o.stream_stages;
  c.fold = o.fold;
  const auto r = cuda::bench_projection(c);
  const bool fold = !o.fold.empty();
  const double copy = r.copy_gbs;
  if (o.json) {
    nlohmann::json j;
    j["device"] = r.device;
    j["shape"] = o.shape;
    j["quant"] = o.quant;
    j["group_size"] = o.group_size;
    j["argmax"] = o.argmax;
    j["splits"] = r.splits;
    j["kernel"] = r.streamed ? "streamed" : "generic";
    j["copies"] = r.copies;
    j["weight_bytes"] = r.weight_bytes;
    j["copy_gbs"] = copy;
    j["batch_invariant"] = r.invariant;
    if (fold) {
      j["fold"] = o.fold;
      j["fold_equal"] = r.fold_equal;
    }
    for (const auto& row : r.rows) {
      nlohmann::json jr = {{"W", row.W},
                           {"ms", row.ms_median},
                           {"ms_min", row.ms_min},
                           {"ms_max", row.ms_max},
                           {"gbs", row.bytes / (row.ms_median * 1e-3) / 1e9}};
      if (fold) {  // ms is the fold's; these, the op's own kernel then the matmul
        jr["unfolded_ms"] = row.unfolded_ms_median;
        jr["unfolded_ms_min"] = row.unfolded_ms_min;
        jr["unfolded_ms_max"] = row.unfolded_ms_max;
      }
      j["rows"].push_back(jr);
    }
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("projection {} {} g{}{} on {}: {:.1f} MB per copy, {} copies rotated, split-K {}, {} kernel\n", o.shape,
               o.quant, o.group_size, o.argmax ? " +argmax" : "", r.device, r.weight_bytes / 1e6, r.copies, r.splits,
               r.streamed ? "streamed" : "generic");
    fmt::print("copy bandwidth (D2D {} MiB, read+write): {:.0f} GB/s; floor at that rate: {:.4f} ms\n",
               r.copy_bytes >> 20, copy, r.weight_bytes / (copy * 1e9) * 1e3);
    fmt::print("batch invariance (rows 0,5,31 alone == inside 64): {}{}\n", r.invariant ? "PASS" : "FAIL",
               r.invariant_detail);
    if (fold)
      fmt::print("{} fold == its kernel then the matmul, bitwise: {}; ms below is the fold's, 'unfolded' the pair's\n",
                 o.fold, r.fold_equal ? "PASS" : "FAIL");
    fmt::print("{:>4} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8}\n", "W", "ms", "min", "max", "GB/s", "%copy", "t/t(1)");
    const double t1 = r.rows.empty() ? 1.0 : r.rows.front().ms_median;
    for (const auto& row : r.rows) {
      const double gbs = row.bytes / (row.ms_median * 1e-3) / 1e9;
      fmt::print("{:>4} {:>9.4f} {:>9.4f} {:>9.4f} {:>8.0f} {:>6.1f}% {:>8.3f}", row.W, row.ms_median, row.ms_min,
                 row.ms_max, gbs, 100.0 * gbs / copy, row.ms_median / t1);
      if (fold) fmt::print("  unfolded {:.4f} [{:.4f}, {:.4f}]", row.unfolded_ms_median, row.unfolded_ms_min, row.unfolded_ms_max);
      fmt::print("\n");
    }
  }
  return r.invariant && r.fold_equal ? 0 : 3;
#endif
}

}  // namespace nextn::bench
