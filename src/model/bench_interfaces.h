// What the benchmarks and tests reach of a runtime besides ModelRuntime
// (docs/engine.md "Interfaces"): the verify experiment's losing head arms
// and the profiling probes. They sit here, not on ModelRuntime, because the
// product never calls them (src/engine, src/server, src/speculative and the
// CLI outside `nextn bench` must not); here, not in src/bench/, because the
// backends implement them and must not include src/bench/. A backend
// implements them beside ModelRuntime (multiple inheritance); callers reach
// them through the helpers below (dynamic_cast), which name the backend
// when it lacks one.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nextn {

class ModelRuntime;

// The verify experiment's arms (bench verify, src/bench/verify_arms.h) over
// rows of the last target_forward. The product's head is
// ModelRuntime::head_argmax, which projects exactly its rows; these are the
// alternatives it was measured against. Each counts its work into the
// runtime's HeadWork under its own HeadPath.
class VerifyHeadArms {
 public:
  virtual ~VerifyHeadArms() = default;
  // Projects rows [first, first + width) (rows past the forward's T are zero
  // padding) and writes the argmax of the first `count` of them; width ==
  // count is head_argmax (HeadPath::Batched), a wider one HeadPath::Padded.
  virtual void head_argmax_padded(int first, int count, int width, int32_t* out) = 0;
  // Projection with the argmax fused in: logits are never materialised.
  virtual void head_argmax_fused(int first, int count, int32_t* out) = 0;
  // Early-exit walk from row 0: project row j, take its argmax into out[j],
  // stop after the first j with out[j] != drafts[j] (or after drafts.size()+1
  // rows). Returns the number of rows projected.
  virtual int head_walk(std::span<const int32_t> drafts, int32_t* out) = 0;
};

// One operation class's measured device time (RuntimeProbe::op_timings).
struct OpTiming {
  std::string op;      // e.g. "gdn.rec", "mlp.down", "mtp.attn.qkv", "head_fused"
  int64_t count = 0;   // intervals measured (one per launch of the class)
  double ms = 0.0;     // their summed device time
};

// Device memory a runtime allocated for one use (RuntimeProbe::device_memory).
struct MemoryUse {
  std::string what;  // e.g. "the KV cache", "logits", "prefill activations"
  uint64_t bytes = 0;
};

// Where the time and memory go (bench decode --breakdown, the roofline,
// tests). Implemented by the backends that measure something (CUDA); the
// others have none.
class RuntimeProbe {
 public:
  virtual ~RuntimeProbe() = default;
  // Device time per operation class, summed since construction or
  // clear_op_timings(): only when the backend measures it (CUDA with
  // RuntimeOptions::profile places timing events between the operations of
  // its graphs); otherwise empty.
  virtual std::vector<OpTiming> op_timings() const = 0;
  virtual void clear_op_timings() = 0;
  // Kernels launched so far (CUDA: the kernel nodes of every graph replayed).
  virtual int64_t kernels_launched() const = 0;
  // Routed-expert weight bytes read so far by a MoE model's grouped expert
  // passes on this runtime's workspace (0 for a dense model), as the kernels
  // count them.
  virtual uint64_t expert_bytes_read() const = 0;
  // Times the host waited for the device's results on this runtime's
  // workspace (CUDA: Workspace::fetch, one per head call or draft chain;
  // group calls count on their lead), so far.
  virtual int64_t host_syncs() const = 0;
  // Device memory the runtime allocated itself, per use, largest first.
  // What the driver and libraries take besides (CUDA graphs, kernel
  // modules, cuBLAS) is not in it.
  virtual std::vector<MemoryUse> device_memory() const = 0;
};

// The runtime's verify arms, or Error naming its backend.
VerifyHeadArms& verify_arms_of(ModelRuntime& rt);
// The runtime's probe, or nullptr where the backend measures nothing.
RuntimeProbe* find_probe(ModelRuntime& rt);
const RuntimeProbe* find_probe(const ModelRuntime& rt);
// The runtime's probe, or Error naming its backend.
RuntimeProbe& probe_of(ModelRuntime& rt);
const RuntimeProbe& probe_of(const ModelRuntime& rt);

}  // namespace nextn
