// bench decode on CUDA: the byte accounting behind the roofline, the memory
// budget, and the device measurements taken in the same run (copy bandwidth,
// peak device memory through a probing runtime wrapper).
//
// Roofline tokens/s = copy bandwidth / bytes one greedy decode token must read:
// the trunk (every tensor under layers.*, the final norm; packed weights,
// scales and biases as stored; of a MoE layer's routed experts the share k/E
// a token reads, the active bytes) + the LM head (the embedding when tied) +
// one embedding row. The MTP head is not read by plain greedy decoding.
//
// Memory budget = the weights as stored (norms counted in fp32, as the
// kernels read them; quantized scales and biases as stored) + KV caches (bf16, every full-attention
// layer and the MTP layer, at the runtime's capacity) + Gated DeltaNet state
// (two recurrent-state buffers and two conv-state buffers per layer, the
// speculative state); the target is peak <= 1.10 x budget.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/host_copy.h"
#include "engine/generate.h"
#include "model/bench_interfaces.h"

namespace nextn {
class Qwen35Checkpoint;
}

namespace nextn::bench {

struct DecodeBytes {
  uint64_t trunk = 0, head = 0, embed_row = 0, mtp = 0, stored_total = 0;
  uint64_t experts_stored = 0;  // routed experts under layers.* (trunk holds their k/E share)
  uint64_t device_weights = 0;  // the budget's weights (see above)
  uint64_t per_token() const { return trunk + head + embed_row; }
};
DecodeBytes decode_bytes(const Qwen35Checkpoint& ck);

struct MemoryBudget {
  uint64_t weights = 0, kv = 0, gdn_state = 0;
  uint64_t total() const { return weights + kv + gdn_state; }
};
MemoryBudget memory_budget(const Qwen35Checkpoint& ck, int max_tokens);

// Device-side figures of one bench decode run (CUDA; `host` for the CPU backend).
struct DeviceFigures {
  bool valid = false;
  double copy_gbs = 0;          // device-to-device copy, read + write, best of 10 x 2 GiB
  uint64_t baseline_used = 0;   // device memory in use before the first runtime (context included)
  uint64_t peak_runtime = 0;    // max over runtimes of (used - baseline), probed after creation and before destruction
  int peak_capacity = 0;        // that runtime's max_tokens
  int runtime_rows = 0;         // rows per forward the peak's runtime was built for (make_runtime's max_rows; 0: not said)
  std::vector<MemoryUse> peak_uses;  // that runtime's own allocations at the peak (RuntimeProbe::device_memory)
  // CPU backend: the host copy anchor (bench/host_copy.h); gbs 0 when not measured.
  HostCopy host;
};

// Wraps a factory so every runtime it makes records device memory in use
// right after creation and right before destruction into *fig (CUDA builds;
// elsewhere it returns `inner` unchanged and leaves fig invalid).
// rows: the rows per forward `inner` builds its runtimes for (reported with the peak).
RuntimeFactory probe_memory(RuntimeFactory inner, DeviceFigures* fig, int rows);
// Measures copy_gbs and baseline_used (CUDA builds; no-op elsewhere).
void measure_device(DeviceFigures* fig);

std::string roofline_text(const DecodeBytes& b, const MemoryBudget& m, const DeviceFigures& f,
                          double decode_tps_median, int decode_capacity);
nlohmann::ordered_json roofline_json(const DecodeBytes& b, const MemoryBudget& m, const DeviceFigures& f,
                                     double decode_tps_median);

}  // namespace nextn::bench
