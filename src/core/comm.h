// The collectives tensor parallelism needs (docs/tensor-parallel.md), one
// Communicator per rank. Every rank calls the same collectives in the same
// order with the same counts; each call returns on a rank once that rank's
// result is in place. The contract that makes tensor-parallel decoding
// exact: every result is the same bits on every rank and does not depend on
// timing or on the message size: sums are added in rank order, argmax ties go
// to the lowest index. core/cpu_comm.h is the implementation with ranks as
// threads; an NCCL one (one rank per GPU) would implement the same interface,
// its sum as an all-gather followed by the same ordered sum.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace nextn {

// One rank's candidate for a row's argmax: its best value and that value's
// index in the whole vocabulary; index < 0: no candidate (an empty share, or
// only NaN in it).
struct ArgmaxCandidate {
  float value = 0.0f;
  int32_t index = -1;
};

// cpu::argmax's rule across ranks: a greater value wins, an equal value the
// lower index, NaN never. True when `b` beats `a`.
inline bool argmax_candidate_beats(const ArgmaxCandidate& b, const ArgmaxCandidate& a) {
  if (b.index < 0 || std::isnan(b.value)) return false;
  if (a.index < 0) return true;
  return b.value > a.value || (b.value == a.value && b.index < a.index);
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0, count) becomes the elementwise sum over all ranks' data, added in
  // rank order (((r0 + r1) + r2) + ...): the same bits on every rank.
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // recv[r * count + i] = send[i] of rank r (recv holds size() * count).
  virtual void all_gather(const float* send, size_t count, float* recv) = 0;
  // rows[i] becomes the winner (argmax_candidate_beats) of every rank's
  // rows[i]: the same candidate on every rank.
  virtual void argmax_reduce(std::span<ArgmaxCandidate> rows) = 0;
};

}  // namespace nextn
