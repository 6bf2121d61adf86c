// A decoder layer's launches, one code path for every kind of rows
// (docs/cuda-backend.md, "The runtime in parts"): a decode step or verify
// block of one sequence, a prefill chunk (PrefillWorkspace's wider rows,
// PrefillGemm matmuls) and a group pass over several sequences' rows (the
// row-wise ops over all rows, attention and GDN over the pass's table).
// What differs between them is in the views the layer is given, never in a
// second copy of the layer. Private to the CUDA runtime (qwen35*.cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <vector>

#include "backend/cuda/group_entry.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/profiler.h"
#include "backend/cuda/sequence_state.h"
#include "backend/cuda/workspace.h"

namespace nextn::cuda {

struct CudaQwen35Weights;
struct Linear;
struct LayerWeights;
struct MoeScratch;
class PrefillWorkspace;

// A group pass's device table (group_entry.h): what decoder_layer's
// attention and GDN read instead of one sequence's arguments. The graphs of
// a pass are keyed by (entries, rows, max_T), never by which sequences fill
// the table.
struct GroupPass {
  const cuda::GroupEntry* entries = nullptr;
  int n = 0;      // entries, padding ones (T = 0) included
  int max_T = 0;  // at least every entry's T
};

// The rows a forward step reads and writes: the decode workspace (R rows,
// the ones the captured graphs use) or the prefill workspace (kPrefillRows
// rows, run without graphs).
struct StepBuffers {
  float* x = nullptr;     // [rows][H] fp32 residual
  void* xn = nullptr;     // [rows][2H] act: norm outputs
  float* proj = nullptr;  // [rows][proj_ld] fp32 projections
  void* act = nullptr;    // [rows][act_ld] act: inputs of o_proj / out_proj / down (and GDN y)
  float* q = nullptr;     // [rows][Hq*hd] fp32
  cuda::GdnLayer* gdn_table = nullptr;                    // device table whose proj/conv_out/y point into these rows
  const std::vector<cuda::GdnLayer>* gdn_host = nullptr;  // its host copy
  const int32_t* tokens = nullptr;                        // [rows] device token ids
  // Non-null: a prefill chunk (matmuls through its PrefillGemm, attention
  // over the whole chunk).
  const PrefillWorkspace* prefill = nullptr;
  // A group pass (qwen35_group.cpp): the rows are several sequences'; the
  // row-wise ops run over all of them, attention and GDN over the table.
  const GroupPass* group = nullptr;
};

// The sequence state a step of one sequence's rows reads (a group pass
// reads each sequence's through its table instead).
struct SequenceView {
  const StepArgs* args = nullptr;  // [1] device: position and GDN parity
  void* const* kv_blocks = nullptr;  // device: its KV block table (layer LayerWeights::kv_index of each block)
};

// What every launch of a sequence's steps takes besides its rows: the
// weights and shapes, the workspace scratch the kernels share, the stream
// and the profile marks.
struct LayerContext {
  const CudaQwen35Weights& w;
  int H = 0;
  Act act = Act::BF16;
  int partial_positions = 0;  // the positions attn_partial holds the splits of (Workspace::partial_positions)
  int max_rows = 0;    // R: the decode kernels' widest call
  AttnShape attn{};
  GdnShape gdn{};
  int proj_ld = 0, act_ld = 0;  // the workspaces' row widths (Workspace)
  float* splitk = nullptr;        // Workspace::splitk
  float* attn_partial = nullptr;  // Workspace::attn_partial
  cudaStream_t stream = nullptr;
  Profiler& prof;
  const MoeScratch* moe = nullptr;  // Workspace::moe (a MoE model's MLP rows)
  void mark(const char* op) const { prof.mark(op, stream); }
};

// y (+)= x W^T over T rows: the decode matmul, or the prefill's.
void project(const LayerContext& c, const DevMatrix& W, const void* x, int T, int ldx, float* y, int ldy,
             bool accumulate, const StepBuffers& b);
// Every part of a fused projection into its columns of y.
void run_linear(const LayerContext& c, const Linear& lin, const void* x, int T, int ldx, float* y, int ldy,
                const StepBuffers& b);
// One decoder layer over T rows of b: x += attention or GDN, x += MLP (dense or MoE).
void decoder_layer(const LayerContext& c, const LayerWeights& L, int T, const StepBuffers& b, const SequenceView& s);

}  // namespace nextn::cuda
