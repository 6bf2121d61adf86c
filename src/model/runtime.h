// The interface between the speculative loop and a backend: one sequence of
// a Qwen3.5 target with its MTP head. Hidden states, caches and logits stay
// inside the backend (on the GPU for CUDA); the loop sees token ids and
// counters only. Several sequences over one copy of the weights, whose
// target forwards run together: model/batch_runtime.h.
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

namespace nextn {

// The most token rows one runtime call works on at once (a forward chunk, a
// verify block, a head argmax width, an MTP draft chain): what make_runtime
// builds a runtime for by default. The CUDA backend sizes its row-count
// workspaces by the rows it is built for (max_rows below) and runs longer
// forwards in chunks of that many.
inline constexpr int kMaxForwardRows = 64;

// What the MTP head computed, counted where the work runs (beside the shared
// issue-11 interface below): entries its decoder layer processed (mtp_forward
// rows and chained mtp_step / mtp_draft steps) and the rows its LM-head argmax
// projected. Cumulative since construction or reset().
struct MtpWork {
  int64_t entries = 0;        // MTP decoder-layer rows run (forward rows + chained steps)
  int64_t chained_steps = 0;  // of those, chained draft steps (mtp_step or inside mtp_draft)
  int64_t argmax_rows = 0;    // MTP logits rows projected for an argmax
};

class Qwen35Checkpoint;

// One operation class's measured device time (ModelRuntime::op_timings).
struct OpTiming {
  std::string op;      // e.g. "gdn.rec", "mlp.down", "mtp.attn.qkv", "head_fused"
  int64_t count = 0;   // intervals measured (one per launch of the class)
  double ms = 0.0;     // their summed device time
};

// Device memory a runtime allocated for one use (ModelRuntime::device_memory).
struct MemoryUse {
  std::string what;  // e.g. "the KV cache", "logits", "prefill activations"
  uint64_t bytes = 0;
};

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
  // Projects rows [first, first + width) (rows past the forward's T are zero
  // padding) and writes the argmax of the first `count` of them.
  virtual void head_argmax(int first, int count, int width, int32_t* out) = 0;
  // Projection with the argmax fused in: logits are never materialised.
  virtual void head_argmax_fused(int first, int count, int32_t* out) = 0;
  // Early-exit walk from row 0: project row j, take its argmax into out[j],
  // stop after the first j with out[j] != drafts[j] (or after drafts.size()+1
  // rows). Returns the number of rows projected.
  virtual int head_walk(std::span<const int32_t> drafts, int32_t* out) = 0;
  // Full logits of one row (tests, sampling).
  virtual void head_logits(int row, float* out) = 0;

  // Counters of the head's work so far (see HeadWork).
  virtual HeadWork head_work() const = 0;
  // Back to the state of a fresh runtime: KV, GDN, MTP state and the head
  // counters cleared; weights (and their device copies) kept.
  virtual void reset() = 0;

  // ---- MTP head (mtp_layers() > 0) ----
  virtual int mtp_length() const = 0;
  // Appends MTP entries p = mtp_length() ... for i in [0, n): entry p pairs
  // next_tokens[i] (token p+1) with target hidden row first_row + i of the
  // last target_forward.
  virtual void mtp_forward(std::span<const int32_t> next_tokens, int first_row) = 0;
  // One chained draft step: entry p pairs `token` with the MTP's own output
  // hidden of the previous entry.
  virtual void mtp_step(int32_t token) = 0;
  // Argmax of the last `count` entries' logits (most recent call only).
  virtual void mtp_argmax(int count, int32_t* out) = 0;
  virtual void mtp_rollback(int length) = 0;
  // n chained drafts: out[0] = argmax of the last entry of the most recent
  // MTP call; out[i] = argmax after mtp_step(out[i-1]). Appends n-1 entries.
  // The default runs that loop from the host; a backend may chain it on the
  // device with one copy back.
  virtual void mtp_draft(int n, int32_t* out);
  // Full logits (vocab floats) of the last entry of the most recent MTP call,
  // for drafting by sampling (engine/step_loop.h, speculative/acceptance.h). Uncounted: not
  // argmax work. The default throws (a backend without it cannot sample drafts).
  virtual void mtp_logits(float* out);
  // Counters of the MTP head's work so far (see MtpWork); reset() clears them.
  virtual MtpWork mtp_work() const = 0;

  // ---- draft vocabulary (docs/speculative.md §10) ----
  // The MTP head's own projections (mtp_argmax, mtp_draft, mtp_logits) cover
  // token ids [0, draft_vocab()) only: drafts are argmaxes over that prefix,
  // and mtp_logits writes -inf past it, so sampled drafts are drawn from
  // exactly the distribution it hands out. The target's head (head_*) always
  // covers the whole vocabulary: the output stays exact, only acceptance
  // changes. Byte-level BPE ids follow merge order, so a prefix holds the
  // frequent tokens and needs no gather table. Kept across reset().
  virtual int draft_vocab() const { return vocab(); }
  // n in [1, vocab): the prefix [0, n); 0 or n >= vocab: the whole vocabulary
  // (a larger n is clamped, so one flag value fits models of any vocabulary).
  // Error for n < 0. The default accepts the whole vocabulary only.
  virtual void set_draft_vocab(int n);

  // ---- where the time goes (bench decode --breakdown) ----
  // Device time per operation class, summed since construction or
  // clear_op_timings(): only when the backend measures it (CUDA with
  // RuntimeOptions::profile places timing events between the operations of
  // its graphs); otherwise empty.
  virtual std::vector<OpTiming> op_timings() const { return {}; }
  virtual void clear_op_timings() {}
  // Kernels launched so far (CUDA: the kernel nodes of every graph replayed);
  // 0 where the backend does not launch kernels.
  virtual int64_t kernels_launched() const { return 0; }
  // Device memory the runtime allocated itself, per use, largest first
  // (CUDA); empty where the backend holds no device memory. What the driver
  // and libraries take besides (CUDA graphs, kernel modules, cuBLAS) is not in it.
  virtual std::vector<MemoryUse> device_memory() const { return {}; }
};

// The draft vocabulary set_draft_vocab(n) gives a model of `vocab` ids:
// n in [1, vocab) stays, 0 or n >= vocab is vocab; Error naming --draft-vocab
// for n < 0.
int effective_draft_vocab(int n, int vocab);

// Builds a runtime (one sequence) for a given cache capacity.
using RuntimeFactory = std::function<std::unique_ptr<ModelRuntime>(int max_tokens)>;

enum class BackendKind { Cpu, Cuda };
BackendKind parse_backend(const std::string& name);  // throws Error

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
