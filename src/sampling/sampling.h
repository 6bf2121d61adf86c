// Token sampling: temperature, top-k, min-p, top-p over one row of logits,
// with a per-request seeded generator so a request with a seed is
// reproducible. Temperature 0 is greedy and is not handled here: the callers
// keep the existing argmax path for it (speculative/generate.h), so greedy
// output stays bit-identical to `nextn generate`.
//
// The distribution a row samples from (docs/server.md, "Sampling"):
//   z = logits / temperature
//   keep the top_k largest z (0: all; ties broken by the smaller id)
//   p = softmax over the kept z (in double)
//   drop p < min_p * max(p)
//   keep the smallest prefix, by descending p, whose mass reaches top_p
//   renormalise.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace nextn {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (argmax), handled by the caller
  int top_k = 0;             // 0: no limit
  double top_p = 1.0;        // (0, 1]
  double min_p = 0.0;        // [0, 1]
  uint64_t seed = 0;
  bool greedy() const { return temperature == 0.0; }
};

// Throws Error naming the field (`temperature`, `top_k`, ...) when a value is
// out of range: temperature in [0, 100], top_k >= 0, top_p in (0, 1],
// min_p in [0, 1].
void check_sampling_params(const SamplingParams& p);

// Uniform doubles in [0, 1) from mt19937_64, 53 random bits each; the same
// seed gives the same sequence on every platform.
class SamplingRng {
 public:
  explicit SamplingRng(uint64_t seed) : gen_(seed) {}
  double uniform() { return double(gen_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 gen_;
};

// The filtered, normalised distribution of one row (dense, V entries; the
// dropped tokens are 0). `scratch` is reused between calls.
void sampling_distribution(std::span<const float> logits, const SamplingParams& params, std::vector<double>& probs,
                           std::vector<int32_t>& scratch);

// Inverse-CDF draw from a non-negative vector (need not sum to 1); the
// vector must have positive mass.
int32_t sample_index(std::span<const double> weights, SamplingRng& rng);

// Log-probabilities of the model's own distribution (log_softmax of the raw
// logits, before temperature and filters), as OpenAI's logprobs report them.
struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;  // the `top_n` most likely tokens, descending
};
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top_n);

}  // namespace nextn
