// Wall-clock bookkeeping shared by the round loops (generate.cpp,
// sampled_generate.cpp): one round's phases added to GenerateStats.
#pragma once
#include <chrono>

#include "speculative/generate.h"

namespace nextn {

using RoundClock = std::chrono::steady_clock;

inline double ms_between(RoundClock::time_point t0, RoundClock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// Draft [r0, r1), verify [r1, r2), rollback [r2, r3), the round [r0, r3).
inline void add_round_times(GenerateStats& s, RoundClock::time_point r0, RoundClock::time_point r1,
                            RoundClock::time_point r2, RoundClock::time_point r3) {
  s.draft_ms += ms_between(r0, r1);
  s.verify_ms += ms_between(r1, r2);
  s.rollback_ms += ms_between(r2, r3);
  s.round_ms += ms_between(r0, r3);
}

}  // namespace nextn
