// A chain of streamed projections in one launch (matmul_chain.cu): issue
// 24's persistent-kernel prototype, measured by `nextn bench chain` only.
// Each link is what stream_matmul (bf16 rows), stream_matmul_normed or
// stream_matmul_swiglu computes, with the same bits; link i + 1 may read
// what link i wrote, so the links run in order, but in one grid whose blocks
// stay resident: a block streams the next link's weights into its ring
// while the previous link finishes elsewhere, and no launch separates them.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/kernels.h"

namespace nextn::cuda {

enum class ChainInput { Rows, Norm, Swiglu };
constexpr int kChainMaxLinks = 128;  // a 64-layer model's MLPs

struct ChainLink {
  const DevMatrix* W = nullptr;  // streamed (packed) q4 or q8; every link the same format and group
  ChainInput input = ChainInput::Norm;
  const void* rows = nullptr;    // Rows: bf16 activation rows [T][ldx] (16-byte aligned, ldx % 8 == 0)
  const float* x = nullptr;      // fp32 rows [T][ldx]: the residual (Norm) or gate | up (Swiglu)
  int ldx = 0;
  const float* gamma = nullptr;  // Norm: [W->cols]
  float eps = 0.0f;              // Norm
  int up = 0;                    // Swiglu: column of up's first element in a row of x
  float* y = nullptr;            // [T][ldy]
  int ldy = 0;
  bool accumulate = false;
};

// The three kinds of link, as the one-call entry points take their arguments.
inline ChainLink rows_link(const DevMatrix& W, const void* rows, int ldx, float* y, int ldy, bool accumulate) {
  ChainLink l;
  l.W = &W;
  l.input = ChainInput::Rows;
  l.rows = rows;
  l.ldx = ldx;
  l.y = y;
  l.ldy = ldy;
  l.accumulate = accumulate;
  return l;
}
inline ChainLink norm_link(const DevMatrix& W, const float* x, int ldx, const float* gamma, float eps, float* y, int ldy,
                           bool accumulate) {
  ChainLink l = rows_link(W, nullptr, ldx, y, ldy, accumulate);
  l.input = ChainInput::Norm;
  l.x = x;
  l.gamma = gamma;
  l.eps = eps;
  return l;
}
inline ChainLink swiglu_link(const DevMatrix& W, const float* gate_up, int ld, int up, float* y, int ldy,
                             bool accumulate) {
  ChainLink l = rows_link(W, nullptr, ld, y, ldy, accumulate);
  l.input = ChainInput::Swiglu;
  l.x = gate_up;
  l.up = up;
  return l;
}

// The links' device table and completion counters, built once (outside any
// capture) for T rows; launch() may then be captured and replayed.
struct ChainPhase;  // matmul_chain.cu
class StreamChain {
 public:
  StreamChain(const std::vector<ChainLink>& links, int T);
  ~StreamChain();
  // y's of every link, in order. scratch: split-K floats as
  // splitk_scratch_floats() of the largest link, zero on the first call.
  void launch(float* scratch, cudaStream_t s) const;
  int64_t scratch_floats() const { return scratch_floats_; }
  int grid() const { return grid_; }

 private:
  std::vector<ChainPhase> phases_;
  DeviceBuffer counters_;
  int n_ = 0, T_ = 0, fmt_ = 0, gpc_ = 0, gshift_ = 0, unit_bytes_ = 0;
  int stage_smem_ = 0, stages_ = 0, smem_ = 0, grid_ = 0;
  int64_t scratch_floats_ = 0;
};

}  // namespace nextn::cuda
