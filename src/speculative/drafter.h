// A drafter of one sequence, driven by the engine step (engine/step_loop.h):
// the oracle and the Gemma 4 assistant. The Qwen3.5 MTP head is not one:
// it lives in the target's runtime and the step runs it for every sequence
// at once through the group (model/batch_runtime.h).
//
// Protocol, one sequence:
//   begin(prompt, first)      after prefill: the target has run the prompt
//                             (its last forward's rows are the prompt rows)
//                             and `first` is its greedy token after it.
//   propose(n, out)           n >= 0 drafts continuing the committed text,
//                             whose last token (the "bonus") the target has
//                             not run yet.
//   commit(drafts, a, next)   the target verified [bonus, drafts...] in one
//                             forward (rows 0..W-1 of its last forward) and
//                             rolled back to the bonus plus the first `a`
//                             drafts; `next` is the new bonus. Not called
//                             after the last round.
//
// Sampled drafting (engine/step_loop.h, speculative/acceptance.h) replaces propose with
// draft_logits / draft_step: within a round, draft_logits gives the logits
// of the next draft position (the first one continues the bonus), the loop
// samples a token from them and draft_step(token) makes it that position's
// draft, so the next draft_logits continues it. The logits are the
// drafter's own distribution q before the sampling filters; a token the
// drafter can never propose there gets -inf. commit then works as above.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace nextn {

class ModelRuntime;

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  virtual void begin(std::span<const int32_t> prompt, int32_t first) = 0;
  virtual void propose(int n, std::vector<int32_t>& out) = 0;
  virtual void commit(std::span<const int32_t> drafts, int accepted, int32_t next) = 0;
  // Sampled drafting (above); out: vocab floats. The defaults throw: a
  // drafter without them drafts greedily only.
  virtual void draft_logits(float* out);
  virtual void draft_step(int32_t token);
  // Drafters whose proposals can run together (the Gemma 4 assistant's
  // chains on one device) share a non-null key. propose_together(drafters,
  // n, out) is propose(n[i], *out[i]) on each drafters[i] (equal keys; this
  // one is drafters[0]), the drafts of every drafter's position j in one
  // call. The default proposes for each alone.
  virtual const void* batch_key() const { return nullptr; }
  virtual void propose_together(std::span<Drafter* const> drafters, std::span<const int> n,
                                std::span<std::vector<int32_t>* const> out);
};

// Drafts from a known answer: `truth` is the plain greedy output for the same
// prompt (tokens after the prompt). At each drafted position it proposes the
// true token, or that token + 1 (mod vocab) to force a rejection: with
// probability `accept_rate` (seeded mt19937_64); with probability
// position_rates[i] at draft i of a round (the last rate for the positions
// after it: a draft whose predecessors were all true is true with
// position_rates[i], the per-position acceptance a real drafter shows); or
// as `pattern` says ('1' true, '0' wrong), one character per drafted token,
// cyclically. Exactly one of the three is given. Positions past the truth's
// end (after an EOS) are drafted as token 0.
struct OracleSpec {
  double accept_rate = -1.0;  // < 0: position_rates or the pattern
  std::vector<double> position_rates;
  std::string pattern;
  uint64_t seed = 1;
};
// "0.9,0.8,0.7" as --accept-rates gives it (Error naming the flag).
std::vector<double> parse_position_rates(const std::string& list);
void check_oracle_spec(const OracleSpec& spec);  // throws Error
// The oracle flags as given on a command line (nullptr: flag absent), for
// the drafter named `draft`: an error when given to another drafter, and
// checked (check_oracle_spec) for the oracle.
struct OracleFlags {
  const double* accept_rate = nullptr;       // --accept-rate
  const std::string* position_rates = nullptr;  // --accept-rates
  const std::string* pattern = nullptr;      // --accept-pattern
  const uint64_t* seed = nullptr;            // --seed
};
OracleSpec oracle_spec_from_flags(const std::string& draft, const OracleFlags& flags);

class OracleDrafter final : public Drafter {
 public:
  OracleDrafter(std::vector<int32_t> truth, const OracleSpec& spec, int vocab);
  const char* name() const override { return "oracle"; }
  void begin(std::span<const int32_t> prompt, int32_t first) override;
  void propose(int n, std::vector<int32_t>& out) override;
  void commit(std::span<const int32_t> drafts, int accepted, int32_t next) override;

 private:
  bool draw(int position);  // position: the draft's index in its round
  std::vector<int32_t> truth_;
  OracleSpec spec_;
  int vocab_;
  std::mt19937_64 rng_;
  size_t pattern_pos_ = 0;
  size_t committed_ = 0;  // generated tokens committed so far (bonus included)
};

}  // namespace nextn
