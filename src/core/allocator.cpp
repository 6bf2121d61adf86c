#include "core/allocator.h"

#include <new>

#include "core/error.h"

namespace nextn {
namespace {

class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, const char* what) override {
    void* p = ::operator new(bytes, std::nothrow);
    if (p == nullptr) fail("out of host memory allocating {:.1f} MiB for {}", double(bytes) / double(1 << 20), what);
    return p;
  }
  void release(void* p, size_t) noexcept override { ::operator delete(p); }
};

}  // namespace

Allocator& host_allocator() {
  static HostAllocator a;
  return a;
}

}  // namespace nextn
