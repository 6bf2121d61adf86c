#include "core/fault.h"

#include "core/error.h"

namespace nextn {

Fault parse_fault(const std::string& name) {
  if (name == "none") return Fault::None;
  if (name == "walk-as-batched") return Fault::WalkAsBatched;
  if (name == "runtime-walk-as-batched") return Fault::RuntimeWalkAsBatched;
  fail("--fault '{}' is not a known fault (known: none, walk-as-batched, runtime-walk-as-batched)", name);
}

}  // namespace nextn
