// The verify arm `--verify auto` runs when no calibration of this machine
// matches (bench/calibration.h): the winner per (backend, K) from the
// decision record, one row per K the record measured. auto uses the row of
// the requested K, else of the nearest measured K below it (else the
// smallest), and names the row in its reason.
//
// Why these values (the measured reason; update with the record):
//  - cuda: batched at every K. docs/benchmark_results/mtp-verify-early-exit-decision-h200-2026-11-30.md
//    (H200, real-shape q4 4B and 27B, K = 3/4/8/16/32, oracle 0.6/0.8/0.9,
//    drafting free and at MTP cost, 5 repeats ABBA, 27B repeated in a second
//    call): the walk is 0.81-0.99x of batched (every row it takes reads the
//    head again), pad 0.98-1.00x, fused 0.998-1.008x (a tie: it beat
//    batched's whole spread in 5 of 80 cells, by under 1 %, and nowhere
//    twice in a row). The early-exit ceiling is at most ~1 % of a round.
//    The Gemma 4 31B pairing (head 262144 x 5376, q4, oracle 0.6/0.8/0.9,
//    the record's "Gemma 4 pairing" section): batched at every K as well
//    (walk 0.89-0.99x, pad 0.99x, fused within 0.4 %), so one table serves
//    both families.
//  - cpu: batched at every K. docs/benchmark_results/verify-arms-cpu-2026-11-29.md
//    (fixture qwen35-causal-tied, MTP and oracle 0.8 drafters, K = 3..32):
//    every arm's [min, max] over 7 repeats overlaps batched's at every K
//    (a loaded 2-thread VM), so no arm is shown to beat batched; the CPU
//    backend is the reference, not a serving target.
#pragma once
#include "bench/verify_arms.h"

namespace nextn {

struct RecordedWinner {
  const char* backend;  // "cpu" or "cuda"
  int block_size;       // K
  VerifyArm arm;
  const char* record;  // the document the row comes from
};

inline constexpr RecordedWinner kRecordedWinners[] = {
    {"cuda", 3, VerifyArm::Batched, "docs/benchmark_results/mtp-verify-early-exit-decision-h200-2026-11-30.md"},
    {"cuda", 4, VerifyArm::Batched, "docs/benchmark_results/mtp-verify-early-exit-decision-h200-2026-11-30.md"},
    {"cuda", 8, VerifyArm::Batched, "docs/benchmark_results/mtp-verify-early-exit-decision-h200-2026-11-30.md"},
    {"cuda", 16, VerifyArm::Batched, "docs/benchmark_results/mtp-verify-early-exit-decision-h200-2026-11-30.md"},
    {"cuda", 32, VerifyArm::Batched, "docs/benchmark_results/mtp-verify-early-exit-decision-h200-2026-11-30.md"},
    {"cpu", 3, VerifyArm::Batched, "docs/benchmark_results/verify-arms-cpu-2026-11-29.md"},
    {"cpu", 4, VerifyArm::Batched, "docs/benchmark_results/verify-arms-cpu-2026-11-29.md"},
    {"cpu", 8, VerifyArm::Batched, "docs/benchmark_results/verify-arms-cpu-2026-11-29.md"},
    {"cpu", 16, VerifyArm::Batched, "docs/benchmark_results/verify-arms-cpu-2026-11-29.md"},
    {"cpu", 32, VerifyArm::Batched, "docs/benchmark_results/verify-arms-cpu-2026-11-29.md"},
};

}  // namespace nextn
