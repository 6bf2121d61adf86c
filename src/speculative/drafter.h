// A drafter proposes the tokens a verify round checks. The round loop
// (spec/generate.h) uses only this interface, so drafters that keep their own
// state (the Qwen3.5 MTP head in the target's runtime, the oracle, later a
// separate Gemma 4 assistant checkpoint) plug in without loop changes.
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
// Sampled drafting (speculative/sampled_generate.h) replaces propose with
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
};

// The Qwen3.5 MTP head (model-spec §A.8), driven through ModelRuntime's mtp_*
// methods. Entry p pairs token p+1 with the target's post-norm hidden row of
// position p; after each commit the MTP holds exactly one entry per target
// position, and the last one yields the next round's first draft. Further
// drafts chain mtp_step on the MTP's own output hidden.
class MtpDrafter final : public Drafter {
 public:
  explicit MtpDrafter(ModelRuntime& rt);  // the runtime's mtp_* calls throw when it has no MTP head
  const char* name() const override { return "mtp"; }
  void begin(std::span<const int32_t> prompt, int32_t first) override;
  void propose(int n, std::vector<int32_t>& out) override;
  void commit(std::span<const int32_t> drafts, int accepted, int32_t next) override;
  void draft_logits(float* out) override;  // mtp_logits of the last entry
  void draft_step(int32_t token) override;  // mtp_step

 private:
  ModelRuntime& rt_;
  int committed_ = 0;  // MTP entries paired with true target hiddens
  std::vector<int32_t> buf_;
};

// Drafts from a known answer: `truth` is the plain greedy output for the same
// prompt (tokens after the prompt). At each drafted position it proposes the
// true token, or that token + 1 (mod vocab) to force a rejection: with
// probability `accept_rate` (seeded mt19937_64), or as `pattern` says ('1'
// true, '0' wrong), one character per drafted token, cyclically. Positions
// past the truth's end (after an EOS) are drafted as token 0.
struct OracleSpec {
  double accept_rate = -1.0;  // < 0: use the pattern
  std::string pattern;
  uint64_t seed = 1;
};
void check_oracle_spec(const OracleSpec& spec);  // throws Error
// The oracle flags as given on a command line (nullptr: flag absent), for
// the drafter named `draft`: an error when given to another drafter, and
// checked (check_oracle_spec) for the oracle.
OracleSpec oracle_spec_from_flags(const std::string& draft, const double* accept_rate, const std::string* pattern,
                                  const uint64_t* seed);

class OracleDrafter final : public Drafter {
 public:
  OracleDrafter(std::vector<int32_t> truth, const OracleSpec& spec, int vocab);
  const char* name() const override { return "oracle"; }
  void begin(std::span<const int32_t> prompt, int32_t first) override;
  void propose(int n, std::vector<int32_t>& out) override;
  void commit(std::span<const int32_t> drafts, int accepted, int32_t next) override;

 private:
  bool draw();
  std::vector<int32_t> truth_;
  OracleSpec spec_;
  int vocab_;
  std::mt19937_64 rng_;
  size_t pattern_pos_ = 0;
  size_t committed_ = 0;  // generated tokens committed so far (bonus included)
};

// The oracle's tokens at the MTP head's cost: every call runs the MtpDrafter
// (its draft chain in propose, its re-pairing in begin/commit) and discards
// its drafts for the oracle's. Since commit pairs the MTP entries with the
// tokens actually committed, the MTP state stays exactly what the mtp drafter
// would hold after the same text.
class OracleAtMtpCostDrafter final : public Drafter {
 public:
  OracleAtMtpCostDrafter(ModelRuntime& rt, std::vector<int32_t> truth, const OracleSpec& spec);
  const char* name() const override { return "oracle"; }
  void begin(std::span<const int32_t> prompt, int32_t first) override;
  void propose(int n, std::vector<int32_t>& out) override;
  void commit(std::span<const int32_t> drafts, int accepted, int32_t next) override;

 private:
  MtpDrafter mtp_;
  OracleDrafter oracle_;
  std::vector<int32_t> discarded_;
};

}  // namespace nextn
