// One CUDA sequence's row workspace (docs/cuda-backend.md, "The runtime in
// parts"): the buffers a step's launches work in, R = max_rows rows each
// (the rows the captured graphs are built over), the step arguments the
// kernels read from device memory, and the pinned host buffers of the
// uploads and result copies. Nothing here outlives a call except the hidden
// rows the head and the MTP read after a forward. The prefill's wider rows
// are PrefillWorkspace (prefill_workspace.h). Private to the CUDA runtime.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/head_counters.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_layer.h"
#include "backend/cuda/workspace_dims.h"

namespace nextn::cuda {

struct CudaQwen35Weights;

// Values a step reads from device memory.
struct StepArgs {
  int pos;        // first position of the step (target or MTP cache)
  int parity;     // GDN state buffer to read
  int out_row;    // first hidden row the final norm writes
  int first_row;  // gather: first source row
  int n_real;     // gather: rows before zero padding
  int pad[3];
  int32_t tokens[kMaxRows];
  int32_t drafts[kMaxRows];
};

struct Workspace {
  Workspace() = default;  // holds nothing (a CudaQwen35 before its constructor fills it)
  // Every buffer below for `rows` rows of the weights' shapes (dims: the
  // checked widths, the hidden rows and the partials' first positions).
  Workspace(const CudaQwen35Weights& w, const WorkspaceDims& dims, const AttnShape& attn, int rows);
  // Copies `a` to d_args through a pinned ring slot on `s`; waits only if
  // the slot's previous copy has not run yet (kArgSlots uploads behind).
  void upload(const StepArgs& a, cudaStream_t s);
  // The one host sync of a call: `bytes` from device `src` into host `dst`
  // (through h_out when they fit), after the work queued on `s`. The head
  // counters ride along into h_head: every call that counts head work ends
  // in a fetch, so h_head is always current when no call is running and
  // head_work() reads it without a sync of its own.
  void fetch(const void* src, size_t bytes, void* dst, cudaStream_t s);
  // Waits for the work queued on `s`. The runtime's waits for the device
  // all go through here (fetch too) and are counted in host_syncs
  // (RuntimeProbe::host_syncs); not the upload ring's guard above, which
  // waits for a copy kArgSlots uploads old, nor a table's staging guard.
  void wait(cudaStream_t s) const;
  // Zeroes on `s` what the constructor zeroed that a sequence writes (the
  // arguments, hidden rows, walk and head counters), in place; and h_head
  // (the caller has waited for the stream: no copy into it is in flight).
  void reset(cudaStream_t s);
  // Room for `rows` hidden rows (and MTP hidden rows): new buffers from
  // `from` (null: cudaMalloc) holding the old rows, on `s`. The caller has
  // waited for the stream and drops what captured the old pointers (graphs).
  void grow_hidden(int rows, Allocator* from, cudaStream_t s);
  // Attention partials for `positions` positions: a new buffer from `from`
  // (null: cudaMalloc); the old one goes at once (the partials are scratch,
  // written before they are read within a call). The caller has waited for
  // the stream and drops what captured the old pointer (graphs).
  void grow_partials(int positions, Allocator* from);

  DeviceMemory mem;
  DeviceMemory hidden_mem;   // hidden and mtp_hidden, replaced as they grow
  DeviceMemory partial_mem;  // attn_partial, replaced as it grows
  int rows = 0;  // R
  int H = 0;
  Act act = Act::BF16;
  int proj_ld = 0;      // fp32 projections per row: max(q|gate + k + v, gate + up)
  int act_ld = 0;       // act inputs of o_proj / out_proj / down per row
  AttnShape attn{};     // the partials' shape
  int hidden_rows = 0;  // rows of hidden and mtp_hidden: the longest forward so far + R (grow_hidden)
  int partial_positions = 0;  // positions attn_partial holds the splits of (grow_partials)

  StepArgs* d_args = nullptr;        // [1]
  StepArgs* d_chain_args = nullptr;  // [2R]: per-step arguments of a chained mtp_draft
  float* x = nullptr;                // [R][H] fp32 residual
  void* xn = nullptr;                // [R][2H] act: norm outputs (the MTP's fc input is [R][2H])
  float* proj = nullptr;             // [R][proj_ld] fp32 projections
  void* act_buf = nullptr;           // [R][act_ld] act: inputs of o_proj / out_proj / down (and GDN y)
  float* q = nullptr;                // [R][Hq*hd] fp32 rotated queries
  float* attn_partial = nullptr;     // [attn_partial_floats(attn, partial_positions, R)] fp32 split partials
  float* splitk = nullptr;           // [w.splitk_floats_for(R)] fp32 split-K partials and tile counters
  void* hidden = nullptr;            // [hidden_rows][H] act: post-norm rows of the last target forward
  void* mtp_hidden = nullptr;        // [hidden_rows][H] act: post mtp.norm rows of the last MTP call
  void* mtp_src = nullptr;           // [R][H] act: hidden rows fed to the MTP
  void* head_in = nullptr;           // [R][H] act: rows the LM head projects
  float* logits = nullptr;           // [R][V] fp32
  void* pairs = nullptr;             // [argmax_pairs_bytes(head, R)] per-block (value, index) pairs
  void* argmax_scratch = nullptr;    // [R][argmax_scratch_bytes(V)]
  int32_t* d_out = nullptr;          // [R + 2] result tokens (the walks: rows taken at [rows])
  int32_t* d_group_drafts = nullptr; // [R][kMaxGroupSequences]: as a group's lead, chain step j's drafts at row j
  int* d_walk = nullptr;             // [2]: flag walk: stop flag, rows taken; while walk: row j, stopped
  HeadCounters* d_head = nullptr;    // [1] the head's work counters (head_work, reset)
  MoeScratch moe;                    // a MoE model's MLP rows (R rows), else none

  static constexpr int kArgSlots = 16;
  PinnedBuffer<StepArgs> h_args;        // [kArgSlots] ring staging d_args
  PinnedBuffer<StepArgs> h_chain_args;  // [2R], staged for d_chain_args
  PinnedBuffer<int32_t> h_out;          // [R + 2]
  PinnedBuffer<HeadCounters> h_head;    // [1] d_head as of the last fetch
  mutable int64_t host_syncs = 0;       // wait() calls
  Event arg_events[kArgSlots];          // the last copy out of each ring slot
  int arg_slot = 0;
};

}  // namespace nextn::cuda
