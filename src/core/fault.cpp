#include "core/fault.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace nextn {

Fault read_fault_hook() {
  const char* v = std::getenv("NEXTN_FAULT");
  if (v == nullptr || *v == '\0') return Fault::None;
  const std::string s(v);
  if (s == "walk-as-batched") return Fault::WalkAsBatched;
  if (s == "runtime-walk-as-batched") return Fault::RuntimeWalkAsBatched;
  fail("NEXTN_FAULT='{}' is not a known fault (known: walk-as-batched, runtime-walk-as-batched)", s);
}

}  // namespace nextn
