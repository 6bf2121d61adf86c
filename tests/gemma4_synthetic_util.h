// Small Gemma 4 target + assistant pairs from the 31B presets' generator
// (io/synthetic_gemma4.h) with every width shrunk, for tests: any head dims,
// dense or MoE targets, written in a few milliseconds.
#pragma once
#include <string>

#include "io/synthetic_gemma4.h"

namespace nextn::test {

struct Gemma4Shape {
  int hidden = 64, assistant_hidden = 32, layers = 7, intermediate = 96, heads = 4;
  int head_dim = 16, kv_heads = 2, global_head_dim = 32, global_kv_heads = 1;
  int sliding_window = 6, vocab = 512;
  int experts = 0, top_k_experts = 0, moe_intermediate = 0;  // a MoE target (the 26B-A4B's layer) when experts > 0
};

// The gemma4-31b (or -assistant) preset with `s`'s widths.
inline Gemma4SyntheticPreset shrunk_gemma4_preset(const Gemma4Shape& s, bool assistant) {
  Gemma4SyntheticPreset p = *gemma4_synthetic_preset(assistant ? "gemma4-31b-assistant" : "gemma4-31b");
  p.name = assistant ? "shrunk-assistant" : "shrunk";
  p.hidden = assistant ? s.assistant_hidden : s.hidden;
  p.layers = assistant ? 4 : s.layers;  // target: every sixth layer and the last are full
  p.intermediate = assistant ? s.intermediate / 2 : s.intermediate;
  p.heads = s.heads;
  p.head_dim = s.head_dim;
  p.kv_heads = s.kv_heads;
  p.global_head_dim = s.global_head_dim;
  p.global_kv_heads = s.global_kv_heads;
  p.sliding_window = s.sliding_window;
  p.vocab = s.vocab;
  p.max_positions = 256;
  if (assistant) {
    p.backbone_hidden = s.hidden;
    p.centroids = 16;
    p.centroid_top_k = 4;
  } else {  // the assistant of a MoE target is dense
    p.experts = s.experts;
    p.top_k_experts = s.top_k_experts;
    p.moe_intermediate = s.moe_intermediate;
  }
  return p;
}

// A shape whose every matrix width is a multiple of the synthetic quantization
// group (64), so that --quant q4 / q8 quantizes every matrix of the pair.
inline Gemma4Shape quantizable_gemma4_shape() {
  Gemma4Shape s;
  s.assistant_hidden = 64;
  s.intermediate = 128;  // the assistant's: 64
  return s;
}

// A MoE shape: 8 experts top-2 of width `moe_intermediate` (64: every expert
// projection quantizes at group 64; 48: down_proj stays dense, as mlx-lm
// leaves it), beside the dense MLP of quantizable_gemma4_shape.
inline Gemma4Shape moe_gemma4_shape(int moe_intermediate = 64) {
  Gemma4Shape s = quantizable_gemma4_shape();
  s.experts = 8;
  s.top_k_experts = 2;
  s.moe_intermediate = moe_intermediate;
  return s;
}

// Writes the pair under dir/target and dir/assistant (`quant`: bf16, q4 or q8; seed 3).
inline void write_shrunk_gemma4_pair(const Gemma4Shape& s, const std::string& dir, const std::string& quant = "bf16") {
  MakeCheckpointOptions o;
  o.quant = quant;
  o.seed = 3;
  make_gemma4_checkpoint(shrunk_gemma4_preset(s, false), o, dir + "/target");
  make_gemma4_checkpoint(shrunk_gemma4_preset(s, true), o, dir + "/assistant");
}

}  // namespace nextn::test
