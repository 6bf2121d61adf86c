// Several sequences of one model whose target forwards run together
// (docs/server.md, "Batching"). Each sequence is an ordinary ModelRuntime
// (its own KV cache, GDN state, MTP state and counters), so the speculative
// loop keeps its one-sequence API; the group shares the weights and runs the
// target forwards of several sequences as one trunk forward over their
// concatenated rows where the backend can.
//
// Exactness: forward_together leaves every sequence exactly (bit for bit) as
// target_forward(tokens[i]) on that sequence alone would: the matrix products
// are batch-invariant (row j of a many-row product equals a one-row product)
// and attention and the GDN recurrence run per sequence.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "model/runtime.h"

namespace nextn {

class Qwen35Checkpoint;

class SequenceGroup {
 public:
  virtual ~SequenceGroup() = default;
  virtual const char* backend_name() const = 0;
  virtual ModelInfo info() const = 0;
  // How many sequences a caller should keep at once: a backend without
  // multi-sequence support gives 1 (each sequence there holds its own copy
  // of the weights).
  virtual int max_sequences() const = 0;
  // True when forward_together runs one trunk forward over all the rows;
  // false when it runs the sequences' forwards one after another.
  virtual bool shares_forwards() const = 0;
  // A fresh sequence with caches of `max_tokens` positions. The group must
  // outlive it; destroying it frees its caches. On CUDA not while another
  // thread runs one of the group's sequences: the constructor synchronizes
  // the device, which fails during that thread's graph capture (the server
  // therefore makes every slot at start, server/engine.cpp).
  virtual std::unique_ptr<ModelRuntime> add_sequence(int max_tokens) = 0;
  // target_forward(tokens[i]) on sequences[i] for every i: distinct
  // sequences of this group, each with at least one token. When
  // shares_forwards(), every sequence is checked (token ids, capacity)
  // before any changes, so an Error leaves all of them as they were;
  // otherwise the forwards run in order and an Error leaves the sequences
  // before the failing one forwarded.
  virtual void forward_together(std::span<ModelRuntime* const> sequences,
                                std::span<const std::span<const int32_t>> tokens) = 0;
};

// CPU and CUDA: one weight load, shared forwards (CUDA: up to 32 sequences,
// backend/cuda/qwen35_group.cpp). A CUDA request in a build without the CUDA
// backend gets the serial group, whose first sequence reports it.
std::unique_ptr<SequenceGroup> make_sequence_group(const Qwen35Checkpoint& ckpt, BackendKind kind, int cpu_threads = 0);
// The fallback make_sequence_group gives a backend without multi-sequence
// support (sequences from make_runtime, forwards one after another); any
// backend may use it (tests run it on the CPU).
std::unique_ptr<SequenceGroup> make_serial_sequence_group(const Qwen35Checkpoint& ckpt, BackendKind kind,
                                                          int cpu_threads = 0);
// A fresh sequence of `max_tokens` positions (a RuntimeFactory, speculative/generate.h).
using SequenceFactory = std::function<std::unique_ptr<ModelRuntime>(int max_tokens)>;
// The serial group of any model family: sequences from `factory` (which
// owns or outlives the weights), facts from `info`.
std::unique_ptr<SequenceGroup> make_serial_sequence_group(SequenceFactory factory, ModelInfo info,
                                                          const std::string& backend_name);

}  // namespace nextn
