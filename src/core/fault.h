// Fault hooks that prove the guarded benchmark catches a wrong path. Read from
// NEXTN_FAULT in this one place:
//   walk-as-batched          the verifier's walk arm calls the batched projection
//   runtime-walk-as-batched  the runtime's head_walk silently runs the batched
//                            projection (its own counters then say so)
// Unset or empty: no fault. Any other value: Error.
#pragma once
namespace nextn {
enum class Fault { None, WalkAsBatched, RuntimeWalkAsBatched };
Fault read_fault_hook();
}  // namespace nextn
