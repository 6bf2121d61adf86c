// A sequence's prefill workspace (qwen35_prefill.cpp): rows for chunks of
// kPrefillRows tokens, the weight expansion scratch and the cuBLAS handle of
// PrefillGemm. Held only while a prompt needs it (CudaQwen35::prefill_), so
// constructing one is the allocation and destroying it the release; a
// constructor that throws leaves nothing held. No graph holds its pointers
// (the prefill runs without graphs). Private to the CUDA runtime.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/layer.h"
#include "backend/cuda/prefill.h"
#include "core/allocator.h"

namespace nextn::cuda {

class PrefillWorkspace {
 public:
  // Buffers for kPrefillRows rows of the widths the decode workspace has
  // (ws), GDN rows over the state's table (state: its state pointers), from
  // `from` (null: cudaMalloc); PrefillGemm on `s`.
  PrefillWorkspace(const CudaQwen35Weights& w, const Workspace& ws, const SequenceState& state, int max_rows,
                   cudaStream_t s, Allocator* from);
  PrefillWorkspace(const PrefillWorkspace&) = delete;  // rows.gdn_host points into it
  PrefillWorkspace& operator=(const PrefillWorkspace&) = delete;

  // y (+)= x W^T over T rows: PrefillGemm where it takes W, else the decode
  // matmul in max_rows slices.
  void project(const LayerContext& c, const DevMatrix& W, const void* x, int T, int ldx, float* y, int ldy,
               bool accumulate) const;
  // The chunk's causal attention over the cache (after attn_prepare): the
  // tensor-core prefill kernel, else the decode kernel in max_rows slices.
  void attention(const LayerContext& c, int T, KvBlocks kv, const StepBuffers& b) const;

  DeviceMemory mem;
  // x [P][H] fp32, xn [P][2H] act, proj [P][proj_ld] fp32, act [P][act_ld]
  // act, q [P][Hq*hd] fp32, tokens = d_tokens, the GDN table below; P = kPrefillRows.
  StepBuffers rows;
  // The state's GDN table with proj [P][gdn_ld] fp32, conv_out [P][conv_dim]
  // fp32 (shared by the layers: one chunk, one layer at a time) and y = rows.act.
  std::vector<GdnLayer> gdn_host;
  int32_t* d_tokens = nullptr;  // [kPrefillRows]
  int* d_pos = nullptr;         // [ceil(kPrefillRows / max_rows)]: attention slice positions
  void* scratch = nullptr;      // bf16 expansion of the largest quantized matrix

 private:
  std::unique_ptr<PrefillGemm> gemm_;  // made last (after the buffers), released first
};

// Attention slices of max_rows rows per prefill chunk.
inline int prefill_slices(int max_rows) { return (kPrefillRows + max_rows - 1) / max_rows; }

}  // namespace nextn::cuda
