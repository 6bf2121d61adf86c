// The interface between the engine and a backend: one sequence of a target
// model (docs/engine.md "Interfaces"). Hidden states, caches and logits stay
// inside the backend (on the GPU for CUDA); the engine sees token ids and
// counters only. A Qwen3.5 sequence also carries an MTP head
// (model/mtp_head.h, through mtp()); what only the benchmarks reach (the
// verify experiment's head arms, profiling probes) is in
// model/bench_interfaces.h. Several sequences over one copy of the weights,
// whose target forwards run together: model/batch_runtime.h.
//
// Exactness contract: every method computes row j of a multi-row call
// exactly (bit for bit) as a one-row call with the same prefix would. One
// exception: a CUDA target_forward of more than 64 tokens in the bf16 mode
// runs all but its last 1..64 tokens through the prefill GEMMs
// (backend/cuda/prefill.h), whose sums are ordered differently; greedy and
// speculative decoding prefill the same prompt the same way, so their
// outputs stay equal, and every forward a round makes is short.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/options.h"
#include "io/config.h"
#include "model/mtp_head.h"

namespace nextn {

// The most token rows one runtime call works on at once (a forward chunk, a
// verify block, a head argmax width, an MTP draft chain): what make_runtime
// builds a runtime for by default. The CUDA backend sizes its row-count
// workspaces by the rows it is built for (max_rows below) and runs longer
// forwards in chunks of that many.
inline constexpr int kMaxForwardRows = 64;

class Qwen35Checkpoint;

// The kernel path of an LM-head call, as recorded by the code that ran it.
enum class HeadPath : int32_t { None = 0, Batched = 1, Padded = 2, Fused = 3, Walk = 4, WalkFlag = 5 };
const char* head_path_name(HeadPath path);

// What the LM head actually did, counted by the code that did the work (the
// CPU op; on CUDA, the kernels, on the device) and only copied by callers.
// Cumulative since construction or reset().
struct HeadWork {
  int64_t rows_projected = 0;        // rows whose projection read the head weights
  int64_t head_bytes_read = 0;       // head weight bytes read (scales/biases included)
  int64_t logits_bytes_written = 0;  // fp32 logits written to memory (0 for fused)
  int64_t walk_rows = 0;             // rows a walk took (accepted + 1 per walk)
  int64_t head_calls = 0;            // head entry points that ran
  HeadPath last_path = HeadPath::None;
};

// What the speculative loop and the CLI read of any model family.
struct ModelInfo {
  int vocab_size = 0;
  int hidden_size = 0;
  int max_position_embeddings = 0;
  int mtp_layers = 0;              // MTP head layers (0: none)
  std::vector<int> eos_token_ids;  // empty: generate to the budget
};

// A Qwen3.5 config's ModelInfo (ModelRuntime::info's default).
ModelInfo qwen35_info(const Qwen35Config& config);

class ModelRuntime {
 public:
  virtual ~ModelRuntime() = default;
  // The Qwen3.5 config; a runtime of another family throws (use info()).
  virtual const Qwen35Config& config() const;
  // Family-agnostic facts; the default reads config().
  virtual ModelInfo info() const;
  virtual const char* backend_name() const = 0;
  int vocab() const { return info().vocab_size; }

  // ---- target trunk ----
  // Tokens held in the target's caches (the next position).
  virtual int target_length() const = 0;
  // Runs the trunk over `tokens` at positions target_length() onward and
  // extends the caches. Keeps the T post-norm hidden rows ("rows of the last
  // forward") until the next target_forward, and whatever target_rollback needs.
  virtual void target_forward(std::span<const int32_t> tokens) = 0;
  // The step's reservation (engine/step_loop.h, docs/engine.md "Failures"),
  // before the step's first launch: checks that target_forward(tokens) can
  // run (token ids, cache capacity) and that the MTP head can reach
  // `mtp_end` entries in the step (0: no MTP work), and acquires every buffer
  // of this sequence that grows with the step's rows, so that its calls in
  // the step find their memory in place. Throws Error when it cannot;
  // nothing the sequence computes changes (a buffer may stay grown). The
  // default checks the token ids only.
  virtual void reserve_step(std::span<const int32_t> tokens, int mtp_end);
  // Keeps the first `keep` tokens of the last target_forward (1 <= keep <= T),
  // undoing the rest: KV truncation, GDN conv and recurrent state restored.
  virtual void target_rollback(int keep) = 0;

  // ---- LM head over rows of the last target_forward ----
  // Projects rows [first, first + count) and writes their argmax: exactly
  // those rows (the verify experiment's padded, fused and walk arms lost,
  // model/bench_interfaces.h).
  virtual void head_argmax(int first, int count, int32_t* out) = 0;
  // Full logits of one row (tests, sampling).
  virtual void head_logits(int row, float* out) = 0;

  // Counters of the head's work so far (see HeadWork).
  virtual HeadWork head_work() const = 0;
  // Back to the state of a fresh runtime: KV, GDN, MTP state and the head
  // counters cleared; weights (and their device copies) kept.
  virtual void reset() = 0;

  // ---- MTP head ----
  // The sequence's MTP head (model/mtp_head.h), or nullptr when the
  // checkpoint has none (ModelInfo::mtp_layers == 0). Its state is part of
  // this sequence: reset() clears it; reserve_step covers its growth.
  virtual MtpHead* mtp() { return nullptr; }
};

// Builds a runtime (one sequence) for a given cache capacity.
using RuntimeFactory = std::function<std::unique_ptr<ModelRuntime>(int max_tokens)>;

enum class BackendKind { Cpu, Cuda };
BackendKind parse_backend(const std::string& name);  // throws Error
// The options a backend cannot honor, each refused naming its flag:
// --tensor-parallel below 1, or other than 1 on the CUDA backend (one GPU per
// process: the NCCL communicator and multi-GPU runs are not implemented);
// --fp8-matmul w8a8 on the CPU backend or with --act fp32 (it is a bf16-mode
// CUDA kernel).
void check_backend_options(BackendKind kind, const RuntimeOptions& options);
// max_tokens bounds the caches (prompt + generated + block size).
// options: what the user or a benchmark chose (core/options.h); each backend
// reads the fields that apply to it.
// max_rows (CUDA; the CPU backend has no row-count workspaces): the rows per
// call the runtime is built for, in [1, kMaxForwardRows]; a call over more
// (head argmax width, walk rows, draft chain) throws Error, a longer forward
// runs in chunks. Results do not depend on it.
std::unique_ptr<ModelRuntime> make_runtime(const Qwen35Checkpoint& ckpt, BackendKind kind, int max_tokens,
                                           const RuntimeOptions& options = {}, int max_rows = kMaxForwardRows);

}  // namespace nextn
