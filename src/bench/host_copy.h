// The CPU backend's memory anchor for bench decode: how fast the machine
// copies a working set the size of what one decode token reads, with the
// backend's thread count. A decode step that streams its weights once can
// at best read them at about this rate, so decode tokens/s divided by
// (copy bytes/s / bytes per token) is the share of the floor it reaches.
#pragma once
#include <cstdint>

namespace nextn::bench {

struct HostCopy {
  double gbs = 0;          // (read + write) bytes / s, best of the repeats, in 1e9
  uint64_t bytes = 0;      // one buffer (the source; the destination is as large)
  int threads = 0;
};

// memcpy of `bytes` split across `threads` (contiguous slices, one per
// thread, run by a ThreadPool), timed `repeats` times after one warm-up
// that also faults the pages in; the best time counts.
HostCopy host_copy_bandwidth(uint64_t bytes, int threads, int repeats);

}  // namespace nextn::bench
