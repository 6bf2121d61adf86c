// Owning wrappers for every CUDA object nextn creates: streams, events,
// graphs, executable graphs, pinned host buffers, device buffers and the
// runtime's device-memory arena. Each is move-only (copying one would free it
// twice) and releases what it holds in its destructor, so a constructor that
// throws halfway releases whatever its members already hold, and so does a
// function that throws between creating and destroying one.
//
// live_count() counts the objects held right now, over all kinds: a test
// takes it before and after a call that throws to show that nothing leaked.
// Included by .cu files too, so C++17.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/check.h"
#include "core/allocator.h"
#include "core/error.h"

namespace nextn::cuda {

inline constexpr double kGiB = double(1ull << 30);

namespace detail {
inline std::atomic<int64_t>& live_handles() {
  static std::atomic<int64_t> n{0};
  return n;
}
}  // namespace detail

// CUDA objects held by the wrappers below, summed over all kinds.
inline int64_t live_count() { return detail::live_handles().load(); }

// One CUDA object or allocation of handle type H (a pointer type), released
// by Release.
template <typename H, typename Release>
class Handle {
 public:
  Handle() = default;
  explicit Handle(H h) : h_(h) {
    if (h_) ++detail::live_handles();
  }
  ~Handle() { reset(); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  H get() const { return h_; }
  // Reads as the raw handle where the CUDA API takes one; ownership stays here.
  operator H() const { return h_; }
  // Destroys the object now (errors ignored: this also runs while unwinding).
  void reset() {
    if (h_) {
      Release{}(h_);
      --detail::live_handles();
      h_ = nullptr;
    }
  }

 private:
  H h_ = nullptr;
};

struct StreamRelease {
  void operator()(cudaStream_t s) const { (void)cudaStreamDestroy(s); }
};
struct EventRelease {
  void operator()(cudaEvent_t e) const { (void)cudaEventDestroy(e); }
};
struct GraphRelease {
  void operator()(cudaGraph_t g) const { (void)cudaGraphDestroy(g); }
};
struct GraphExecRelease {
  void operator()(cudaGraphExec_t g) const { (void)cudaGraphExecDestroy(g); }
};

using Stream = Handle<cudaStream_t, StreamRelease>;
using Event = Handle<cudaEvent_t, EventRelease>;
using Graph = Handle<cudaGraph_t, GraphRelease>;
using GraphExec = Handle<cudaGraphExec_t, GraphExecRelease>;

inline Stream make_stream(unsigned flags = cudaStreamNonBlocking) {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, flags));
  return Stream(s);
}

inline Event make_event(unsigned flags = cudaEventDefault) {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  return Event(e);
}

// The graph captured on `s` since cudaStreamBeginCapture, owned (null when the
// capture produced none). Ends the capture; check the result with CUDA_CHECK.
inline cudaError_t end_capture(cudaStream_t s, Graph* out) {
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(s, &g);
  *out = Graph(g);
  return e;
}

inline GraphExec instantiate(const Graph& g) {
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, g.get(), 0));
  return GraphExec(exec);
}

struct PinnedRelease {
  void operator()(void* p) const { (void)cudaFreeHost(p); }
};
struct DeviceRelease {
  void operator()(void* p) const { (void)cudaFree(p); }
};

// Page-locked host memory (cudaMallocHost) and one device allocation (cudaMalloc).
template <typename T>
using PinnedBuffer = Handle<T*, PinnedRelease>;
using DeviceBuffer = Handle<void*, DeviceRelease>;

template <typename T>
PinnedBuffer<T> make_pinned(size_t count) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, count * sizeof(T)));
  return PinnedBuffer<T>(static_cast<T*>(p));
}

// At least 16 bytes.
inline DeviceBuffer make_device_buffer(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes < 16 ? 16 : bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it so that later checks do not see it
    cuda_fail(e, "cudaMalloc", __FILE__, __LINE__);
  }
  return DeviceBuffer(p);
}

// cudaMalloc / cudaFree as an Allocator (core/allocator.h): what a test's
// substitute passes the requests it grants on to.
class DeviceAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, const char* what) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes < 16 ? 16 : bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it so that later checks do not see it
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      fail("--backend cuda: out of device memory allocating {:.1f} MiB for {} ({:.2f} of {:.2f} GiB free): {}",
           double(bytes) / double(1 << 20), what, double(free_b) / kGiB, double(total_b) / kGiB,
           cudaGetErrorString(e));
    }
    return p;
  }
  void release(void* p, size_t) noexcept override { (void)cudaFree(p); }
};
inline Allocator& device_allocator() {
  static DeviceAllocator a;
  return a;
}

// The runtime's device allocations: freed in the destructor (or earlier,
// through release, for load-time copies the kernels no longer read). Each
// block keeps its use (`what`, a string literal) so that a benchmark can say
// where the memory went (by_use). A block taken from an Allocator (`from`,
// a step's reservation: the prefill workspace) goes back to it.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory() { free_all(); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& o) noexcept
      : blocks_(std::exchange(o.blocks_, {})), total_(std::exchange(o.total_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      free_all();
      blocks_ = std::exchange(o.blocks_, {});
      total_ = std::exchange(o.total_, 0);
    }
    return *this;
  }

  template <typename T = void>
  T* alloc(size_t bytes, const char* what, Allocator* from = nullptr) {
    void* p = nullptr;
    if (bytes == 0) bytes = 16;
    blocks_.reserve(blocks_.size() + 1);  // so that the push below cannot throw with p held
    if (from != nullptr) {
      p = from->allocate(bytes, what);
      blocks_.push_back(Block{p, bytes, what, from});
      ++detail::live_handles();
      total_ += bytes;
      return static_cast<T*>(p);
    }
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      fail("--backend cuda: out of device memory allocating {:.1f} MiB for {} ({:.2f} GiB allocated by nextn, "
           "{:.2f} of {:.2f} GiB free): {}",
           double(bytes) / double(1 << 20), what, double(total_) / kGiB, double(free_b) / kGiB,
           double(total_b) / kGiB, cudaGetErrorString(e));
    }
    blocks_.push_back(Block{p, bytes, what, nullptr});
    ++detail::live_handles();
    total_ += bytes;
    return static_cast<T*>(p);
  }
  void release(const void* p) {
    for (size_t i = 0; i < blocks_.size(); ++i)
      if (blocks_[i].ptr == p) {
        cudaError_t e = cudaSuccess;
        if (blocks_[i].from != nullptr) blocks_[i].from->release(blocks_[i].ptr, blocks_[i].bytes);
        else e = cudaFree(blocks_[i].ptr);
        total_ -= blocks_[i].bytes;
        blocks_.erase(blocks_.begin() + long(i));
        --detail::live_handles();
        CUDA_CHECK(e);
        return;
      }
  }
  size_t total() const { return total_; }
  // Bytes held per use, largest first.
  std::vector<std::pair<std::string, size_t>> by_use() const {
    std::map<std::string, size_t> sum;
    for (const auto& b : blocks_) sum[b.what] += b.bytes;
    std::vector<std::pair<std::string, size_t>> out(sum.begin(), sum.end());
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return out;
  }

 private:
  struct Block {
    void* ptr;
    size_t bytes;
    const char* what;
    Allocator* from;  // null: cudaMalloc'ed here
  };
  void free_all() {
    for (const auto& b : blocks_) {
      if (b.from != nullptr) b.from->release(b.ptr, b.bytes);
      else (void)cudaFree(b.ptr);
      --detail::live_handles();
    }
    blocks_.clear();
    total_ = 0;
  }
  std::vector<Block> blocks_;
  size_t total_ = 0;
};

}  // namespace nextn::cuda
