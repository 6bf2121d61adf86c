// The measurement `--verify auto` decides from. `nextn bench verify
// --calibrate` writes, after a run that was not refused, the median decode
// tokens/s of every (K, arm) it timed to
//   $NEXTN_CACHE_DIR, else $XDG_CACHE_HOME/nextn, else ~/.cache/nextn
//   /verify-calibration-<16 hex digits>.json
// keyed by backend + model (resolved directory, config.json bytes, weight
// file sizes) + hardware (CPU model and threads, or GPU name). auto takes
// the fastest measured (K, arm), among those at the requested K when
// --block-size is given, from a calibration taken with the same drafter;
// with no such calibration it runs batched at the requested (or default) K
// and says why. Nothing is ever chosen from expectation.
#pragma once
#include <string>

#include "bench/verify_bench.h"

namespace nextn::bench {

struct CalibrationKey {
  std::string backend, model_dir, model_fingerprint, hardware;
  std::string file_name() const;  // verify-calibration-<hash>.json
};

CalibrationKey calibration_key(const std::string& model_dir, const std::string& backend);
std::string calibration_dir();
std::string calibration_path(const CalibrationKey& key);

// The drafter a calibration was measured with: "mtp", "oracle rate 0.8 seed 1",
// "oracle pattern 110 ".
std::string drafter_signature(DraftKind draft, const OracleSpec& oracle);

// Writes the calibration for a timed, unrefused report; returns the path.
std::string write_calibration(const CalibrationKey& key, const VerifyBenchReport& report,
                              const VerifyBenchOptions& options, const std::string& commit);

struct AutoChoice {
  VerifyArm arm = VerifyArm::Batched;
  int block_size = 0;  // 0: keep the requested/default K
  int pad_width = 0;
  std::string reason;
};
// requested_block_size 0: auto picks K too.
AutoChoice choose_auto(const CalibrationKey& key, DraftKind draft, const OracleSpec& oracle, int requested_block_size);

}  // namespace nextn::bench
