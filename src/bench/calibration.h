// The measurement `--verify auto` decides from.
//
// `nextn bench verify --calibrate` writes, after a run that was not refused,
// one entry per K it timed: the winner (highest median decode tokens/s) and
// every arm's median, to the calibration file
//   $NEXTN_CALIBRATION, else $XDG_CACHE_HOME/nextn/calibration.json,
//   else $HOME/.cache/nextn/calibration.json
// An entry is keyed by (backend, hardware, checkpoint hash, drafter, K):
// hardware is the GPU name (cuda) or CPU model and thread count (cpu); the
// checkpoint hash is FNV-1a 64 over config.json and every *.safetensors
// file's header (its 8-byte length and JSON), so a different checkpoint in
// the same directory has another key. A new entry replaces the one with the
// same key; other entries are kept.
//
// `--verify auto` at block size K runs, in this order:
//   1. "calibration": the winner of the entry for this key and K;
//   2. "record": the recorded winner for (backend, K) from the decision
//      record (bench/recorded_winners.h);
// and says which, and why, in its stats.
#pragma once
#include <string>

#include "bench/verify_bench.h"

namespace nextn::bench {

// FNV-1a 64 over config.json, model.safetensors.index.json (if present) and
// the headers of the directory's *.safetensors files in name order; 16 hex
// digits. Throws Error when a file cannot be read or a header is malformed.
std::string checkpoint_hash(const std::string& model_dir);

struct CalibrationKey {
  std::string backend, hardware, checkpoint_hash;
};
CalibrationKey calibration_key(const std::string& model_dir, const std::string& backend);
std::string calibration_path();

// The drafter a calibration was measured with: "mtp", "oracle rate 0.8 seed 1",
// "oracle pattern 110", with " cost mtp" appended when the oracle drafted at MTP cost.
std::string drafter_signature(DraftKind draft, const OracleSpec& oracle, DraftCost cost = DraftCost::Free);

// Adds (or replaces) one entry per timed K; returns the file's path.
std::string write_calibration(const CalibrationKey& key, const std::string& model_dir,
                              const VerifyBenchReport& report, const VerifyBenchOptions& options,
                              const std::string& commit);

struct AutoChoice {
  VerifyArm arm = VerifyArm::Batched;
  int pad_width = 0;   // pad arm: the width measured (0: the default for K)
  std::string source;  // "calibration" or "record"
  std::string reason;
};
// The arm for block size K (check_block_size'd by the caller).
AutoChoice choose_auto(const CalibrationKey& key, const std::string& drafter, int block_size);

}  // namespace nextn::bench
