// What a user or a benchmark chooses for a runtime. The CLI fills it from
// flags (tools/cli_common.h) and passes it through make_runtime,
// make_sequence_group, open_target_model and the server's engine to the
// backends; no backend reads the environment for any of it. Every field is
// listed with its flag in docs/runtime-options.md.
#pragma once
#include <string>

#include "core/fault.h"

namespace nextn {

// The CUDA backend's activations (--act). bf16: the product's mode; fp32:
// the parity mode (dense weights and activations in fp32, CUDA cores). The
// CPU backend computes in fp32 whatever this says.
enum class Activations { Bf16, Fp32 };

// How the CUDA backend multiplies FP8 weights (--fp8-matmul). W8A16: the
// e4m3 weights decoded exactly to bf16 against bf16 activations, the exact
// default. W8A8: each token's activations quantized on the fly to e4m3 per
// 64 columns (scale = amax / 448: the FP8 releases' dynamic activation
// scheme, in groups of 64 rather than 128) and FP8 tensor-core MMAs; its
// error against W8A16 and its speed are measured in docs/formats.md.
// Matrices in other formats are not affected.
enum class Fp8Matmul { W8A16, W8A8 };

// Programmatic dependent launch in the CUDA Qwen3.5 graphs (bench --pdl; it
// changes time, never bits). Off is the measured choice and the default
// (docs/benchmark_results/decode-h200-2026-12-05c.md).
enum class PdlPolicy {
  Off,          // no graph and no prefill launch with PDL
  On,           // every graph with PDL
  MultiRowOff,  // forwards of more than one row without PDL, at every size
};

// How the CUDA head_walk exits early (bench verify --walk; the walk arm is a
// bench arm). Flag (default): all rows' kernels in one graph, rows past the
// first mismatch return at once on a device flag. While: a conditional
// WHILE node launches one row per iteration and stops at the mismatch.
enum class WalkVariant { Flag, While };

struct RuntimeOptions {
  int cpu_threads = 0;  // CPU backend (--threads); 0: NEXTN_THREADS, else all cores; no result depends on it
  // Ranks the model is split over (--tensor-parallel, docs/tensor-parallel.md):
  // 1 alone; N > 1 on the CPU backend only (ranks as threads); the CUDA
  // backend refuses it (multi-GPU is not implemented).
  int tensor_parallel = 1;
  Activations act = Activations::Bf16;
  Fp8Matmul fp8_matmul = Fp8Matmul::W8A16;

  // Benchmark and test seams: `generate` and `serve` leave them as they are.
  bool cuda_graphs = true;   // false (bench --graphs off): the same launches without graphs, the same bits
  bool profile = false;      // timing events between operations (bench decode --breakdown)
  PdlPolicy pdl = PdlPolicy::Off;
  // false (bench --prefill chunked): prompts of more than 64 tokens run on
  // the 64-row graphs, the path before the prefill GEMM (the tests' reference).
  bool prefill_gemm = true;
  WalkVariant walk = WalkVariant::Flag;
  // bench verify --fault and the tests: runtime-walk-as-batched makes the
  // runtime's head_walk run the batched projection (core/fault.h).
  Fault fault = Fault::None;
};

// The flags' values; each throws Error naming its flag for anything else.
Activations parse_activations(const std::string& text);  // --act: bf16 | fp32
Fp8Matmul parse_fp8_matmul(const std::string& text);      // --fp8-matmul: w8a16 | w8a8
PdlPolicy parse_pdl_policy(const std::string& text);      // --pdl: off | on | multi-row-off
WalkVariant parse_walk_variant(const std::string& text);  // --walk: flag | while
bool parse_prefill_path(const std::string& text);         // --prefill: gemm (true) | chunked (false)
bool parse_graphs(const std::string& text);               // --graphs: on | off

}  // namespace nextn
