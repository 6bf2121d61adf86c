// The Qwen3.5 MoE router's choice for one token (transformers'
// Qwen3_5MoeTopKRouter): softmax over the E router logits in fp32, the k
// largest probabilities, renormalized to sum 1. Ties go to the lower expert
// id, so the choice is a function of the logits alone (torch.topk leaves the
// order of equal values unspecified).
#pragma once
#include <cstdint>

namespace nextn::cpu {

// logits[E] -> experts[k] (by falling probability, equal ones by rising id)
// and weights[k] (their probabilities over the sum of the k, added in that
// order). Requires 1 <= k <= E.
void route_top_k(const float* logits, int E, int k, int32_t* experts, float* weights);

}  // namespace nextn::cpu
