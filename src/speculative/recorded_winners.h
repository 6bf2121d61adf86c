// The verify arm `--verify auto` runs when no calibration of this machine
// matches (bench/calibration.h): the winner per (backend, K) from the
// decision record, one row per K the record measured. auto uses the row of
// the requested K, else of the nearest measured K below it (else the
// smallest), and names the row in its reason.
//
// Why these values (the measured reason; update with the record):
//  - cuda: batched at every K. Source until the issue-11 sweep lands: the
//    preview in docs/benchmark_results/cuda-backend-h200-2026-11-29.md
//    (27B q4, oracle 0.8, K = 3 and 4, 3 repeats): walk 0.966x / 0.952x of
//    batched, pad 0.998x / 0.996x, fused 1.000x / 0.999x; no arm beat
//    batched outside its own spread. LEAD: replace with the per-K winners and
//    margins of docs/benchmark_results/mtp-verify-early-exit-decision-h200-<date>.md
//    (scripts/device/sweep_verify.sh + sweep_tables.py print this table).
//  - cpu: batched at every K. docs/benchmark_results/verify-arms-cpu-2026-11-29.md
//    (fixture qwen35-causal-tied, MTP and oracle 0.8 drafters, K = 3..32):
//    every arm's [min, max] over 7 repeats overlaps batched's at every K
//    (a loaded 2-thread VM), so no arm is shown to beat batched; the CPU
//    backend is the reference, not a serving target.
#pragma once
#include "speculative/verify.h"

namespace nextn {

struct RecordedWinner {
  const char* backend;  // "cpu" or "cuda"
  int block_size;       // K
  VerifyArm arm;
  const char* record;  // the document the row comes from
};

inline constexpr RecordedWinner kRecordedWinners[] = {
    {"cuda", 3, VerifyArm::Batched, "docs/benchmark_results/cuda-backend-h200-2026-11-29.md"},
    {"cuda", 4, VerifyArm::Batched, "docs/benchmark_results/cuda-backend-h200-2026-11-29.md"},
    {"cpu", 3, VerifyArm::Batched, "docs/benchmark_results/verify-arms-cpu-2026-11-29.md"},
    {"cpu", 4, VerifyArm::Batched, "docs/benchmark_results/verify-arms-cpu-2026-11-29.md"},
    {"cpu", 8, VerifyArm::Batched, "docs/benchmark_results/verify-arms-cpu-2026-11-29.md"},
    {"cpu", 16, VerifyArm::Batched, "docs/benchmark_results/verify-arms-cpu-2026-11-29.md"},
    {"cpu", 32, VerifyArm::Batched, "docs/benchmark_results/verify-arms-cpu-2026-11-29.md"},
};

}  // namespace nextn
