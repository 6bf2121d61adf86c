// The memory a step reserves before its first launch (docs/engine.md,
// "Failures") comes from an Allocator: the buffers of a sequence that grow
// with its rows (CPU: its hidden rows, GDN recurrence inputs, MTP rows; CUDA:
// the prefill workspace). The product uses each backend's default (host:
// operator new; CUDA: cudaMalloc, backend/cuda/device_handles.h); a test
// substitutes one that refuses a chosen request (SequenceGroup::set_allocator),
// to show that the sequence whose reservation failed fails alone.
// Included by .cu files too (through device_handles.h), so C++17.
#pragma once
#include <cstddef>

namespace nextn {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // At least `bytes` for `what` (a string literal naming the use). Throws
  // Error naming `what` when it cannot.
  virtual void* allocate(size_t bytes, const char* what) = 0;
  // A block allocate(bytes, ...) returned.
  virtual void release(void* p, size_t bytes) noexcept = 0;
};

// operator new / delete; a refusal becomes an Error naming the use.
Allocator& host_allocator();

}  // namespace nextn
