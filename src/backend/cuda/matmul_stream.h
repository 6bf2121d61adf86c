// The streamed quantized matmul (matmul_stream.cu), reached through
// matmul() / matmul_argmax() in matmul.cu for matrices pack_quant put into
// its layout (DevMatrix::packed). Host-callable.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace nextn::cuda {

// Q4/Q8, (scale, bias) exact in bf16, cols % 128 == 0, group 32/64/128:
// a function of the matrix only, never of the token count.
bool stream_eligible(const DevMatrix& m);
// Bytes of the stage-unit layout (0 when not eligible); tiles of 128 rows.
int64_t stream_layout_bytes(const DevMatrix& m);
int stream_tiles(const DevMatrix& m);
// Fills the layout from m.w (MLX word order) and the fp32 scales/biases.
void stream_pack(const DevMatrix& m, void* dst, cudaStream_t s);
// A SwiGLU-paired matrix's intermediate size (rows / 2; stream_layout.cuh's
// source_row), 0 for any other; Error if a paired matrix is split or its
// rows are not a multiple of 16.
int paired_half(const DevMatrix& m);
// Embedding lookup from the layout: x[t] = row tokens[t] of E, dequantized
// to fp32 exactly as the MLX-order copy would give it.
void stream_embed_rows(const DevMatrix& E, const int32_t* tokens, int T, float* x, int ldx, cudaStream_t s);
// Caps on blocks per SM (1..3) and ring stages (2..12) for tuning sweeps
// (`nextn bench projection --stream-per-sm / --stream-stages`); 0 restores
// the production cap. Speed only: the bits do not depend on them.
void set_stream_caps(int per_sm, int stages);
// The ring launch() lays out for W at T rows: bytes per stage, stages,
// blocks per SM, dynamic shared bytes per block (matmul_chain.cu sizes its
// ring the same way).
// The dynamic shared memory the streamed kernels may take per block (their
// MaxDynamicSharedMemorySize attribute).
constexpr int kStreamSmemMaxBlock = 220 * 1024;
struct StreamRing {
  int stage_smem = 0, stages = 0, per_sm = 0, smem = 0;
};
StreamRing stream_ring(const DevMatrix& W, int T);
// The split-K factor for an eligible shape (rows, cols).
int stream_splits(int rows, int cols);
// Floats at the start of a split-K scratch that hold the tile counters.
int64_t stream_counter_floats();

// With a tally (the LM head) the kernel counts its work (kernels.h, HeadCounters).
void stream_matmul(const DevMatrix& W, const void* x, int T, int ldx, float* y, int ldy, bool accumulate,
                   float* scratch, cudaStream_t s, const HeadTally& tally = {});
// The folds (stream_fold.cuh): at decode and verify widths (T <=
// kFoldedRows, one token fragment) the op before the projection runs in its
// kernel, with the bits of that op's own kernel to bf16 then
// stream_matmul(). W8A8 is refused (the stream_folds_* checks say so).
constexpr int kFoldedRows = 8;
// y (+)= W . bf16(rmsnorm(x, gamma, eps)), from the fp32 rows x [T][ldx].
bool stream_folds_norm(const DevMatrix& W, int T);
void stream_matmul_normed(const DevMatrix& W, const float* x, int ldx, const float* gamma, float eps, int T, float* y,
                          int ldy, bool accumulate, float* scratch, cudaStream_t s);
// y (+)= W . bf16(silu(gate) * up), gate = gate_up[t][0, W.cols) and
// up = gate_up[t][up, up + W.cols), fp32 rows [T][ld] (the gate_up
// projection's output: up = the intermediate size). Bench chain's MLP links
// only: the layer path computes the SwiGLU in gate_up's epilogue (below)
// or, past kFoldedRows rows, with the swiglu kernel (layer.cpp says why).
bool stream_folds_swiglu(const DevMatrix& W, int T);
void stream_matmul_swiglu(const DevMatrix& W, const float* gate_up, int ld, int up, int T, float* y, int ldy,
                          bool accumulate, float* scratch, cudaStream_t s);
// A SwiGLU-paired gate_up (DevMatrix::swiglu_pairs) at up to kFoldedRows
// rows: act[t][j] = bf16(silu(gate_j) * up_j) (bf16 rows [T][ld_act], j <
// W.rows / 2) from the projection's epilogue, the bits of stream_matmul()
// then the swiglu kernel; no fp32 gate_up rows are written. The _normed
// form also folds the RMSNorm of fp32 rows x (stream_matmul_normed).
bool stream_fuses_swiglu(const DevMatrix& W, int T);
void stream_gate_up_swiglu(const DevMatrix& W, const void* x, int T, int ldx, void* act, int ld_act, cudaStream_t s);
void stream_gate_up_swiglu_normed(const DevMatrix& W, const float* x, int ldx, const float* gamma, float eps, int T,
                                  void* act, int ld_act, cudaStream_t s);
// Writes (max, index) pairs [T][stream_tiles(W)].
void stream_matmul_argmax(const DevMatrix& W, const void* x, int T, int ldx, void* pairs, const int* stop,
                          cudaStream_t s, const HeadTally& tally = {});

}  // namespace nextn::cuda
