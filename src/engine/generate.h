// One generation as a batch of one through the engine step (engine/step_loop.h):
// what `nextn generate`, the benchmarks and the tests run. The server runs
// the same step over many sequences (server/engine.h).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/head_stage.h"
#include "model/runtime.h"
#include "speculative/drafter.h"
#include "speculative/generation.h"

namespace nextn {

// On a fresh runtime (target_length() == 0): options.draft none, mtp or
// oracle (which needs `oracle_truth`, the plain greedy output for the same
// prompt and budget), greedy or sampled (options.sampling). head: the head
// stage (nullptr: the product's BatchedHead; bench verify passes its arms).
// Errors (bad input, a failed forward) are rethrown.
GenerateResult generate(ModelRuntime& rt, std::span<const int32_t> prompt, const GenerateOptions& options,
                        const std::vector<int32_t>* oracle_truth = nullptr, HeadStage* head = nullptr);

// The same with a drafter of the sequence's own (the Gemma 4 assistant),
// instead of options.draft.
GenerateResult generate_with_drafter(ModelRuntime& rt, std::unique_ptr<Drafter> drafter,
                                     std::span<const int32_t> prompt, const GenerateOptions& options,
                                     HeadStage* head = nullptr);

// Plain greedy: generate() with draft none.
GenerateResult greedy_generate(ModelRuntime& rt, std::span<const int32_t> prompt, int max_new_tokens, bool ignore_eos,
                               const TokenSink& sink = {});

// generate() on one runtime from the factory; for the oracle drafter it
// first runs plain greedy (untimed) on it to learn the truth, then reset()s.
GenerateResult generate_fresh(const RuntimeFactory& factory, std::span<const int32_t> prompt,
                              const GenerateOptions& options, HeadStage* head = nullptr);

// Speculative generation of a Gemma 4 target with the assistant in
// `assistant_dir`, on a fresh runtime from `factory` (block size 0: 4).
// Errors (one line) for an assistant that does not fit the target.
GenerateResult generate_with_assistant(const RuntimeFactory& factory, const std::string& assistant_dir,
                                       std::span<const int32_t> prompt, const GenerateOptions& options,
                                       int cpu_threads = 0, HeadStage* head = nullptr);

}  // namespace nextn
