#include "bench/host_copy.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"

namespace nextn::bench {

HostCopy host_copy_bandwidth(uint64_t bytes, int threads, int repeats) {
  HostCopy r;
  r.bytes = std::max<uint64_t>(bytes, 4096);
  r.threads = std::max(1, threads);
  std::vector<unsigned char> src(r.bytes, 1), dst(r.bytes, 0);  // written now: no page faults in the timed copies
  ThreadPool pool(r.threads);
  const int64_t slices = r.threads;
  auto copy = [&] {
    pool.parallel_for(slices, 1, [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) {
        const uint64_t lo = r.bytes * uint64_t(s) / uint64_t(slices), hi = r.bytes * uint64_t(s + 1) / uint64_t(slices);
        std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
      }
    });
  };
  copy();  // warm-up: caches and the pool's threads
  double best = 1e30;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    copy();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  r.gbs = 2.0 * double(r.bytes) / best / 1e9;
  return r;
}

}  // namespace nextn::bench
