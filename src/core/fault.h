// Faults planted to prove that the guarded benchmark catches a wrong path
// (bench verify --fault, and the tests; the product never plants one):
//   walk-as-batched          the verifier's walk arm calls the batched projection
//                            (bench/verify_arms.h, ArmChoice::fault)
//   runtime-walk-as-batched  the runtime's head_walk silently runs the batched
//                            projection (its own counters then say so;
//                            RuntimeOptions::fault)
#pragma once
#include <string>

namespace nextn {
enum class Fault { None, WalkAsBatched, RuntimeWalkAsBatched };
// --fault NAME: none, walk-as-batched or runtime-walk-as-batched; Error naming the flag otherwise.
Fault parse_fault(const std::string& name);
}  // namespace nextn
