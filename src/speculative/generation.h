// What one generation asks for and what it reports: the options, the stats
// and their JSON, shared by the engine (engine/step_loop.h, which runs them)
// and everything that prints or checks them. The round, per sequence
// (docs/speculative.md; K = block size, W = min(K, tokens left)):
//   draft    the drafter proposes W-1 tokens after the bonus token;
//   verify   one target forward over [bonus, drafts] (W rows), the LM head's
//            argmax of every row; the longest matching prefix of `a` drafts
//            is accepted plus the target's token at row a (the next bonus);
//   rollback the target keeps a+1 of the W positions; the drafter commits.
// Stops on the token budget (the last round shrinks to the tokens left) or
// when a committed token is an EOS id (kept in the output, as transformers
// does), unless ignore_eos. Greedy output equals plain greedy, bit for bit,
// on a runtime that keeps ModelRuntime's exactness contract; sampled output
// keeps the plain sampling distribution (speculative/acceptance.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "model/runtime.h"
#include "sampling/sampling.h"
#include "speculative/acceptance.h"
#include "speculative/drafter.h"
#include "speculative/verify_counters.h"

namespace nextn {

enum class DraftKind { None, Mtp, Oracle };
const char* draft_kind_name(DraftKind d);

// What drafting costs with the oracle: Free (its tokens only) or Mtp (the MTP
// head's draft chain runs every round, as the mtp drafter runs it, and its
// tokens are replaced by the oracle's: the cost of real drafting at a fixed
// acceptance). Needs a checkpoint with an MTP head.
// The oracle's cost: none, the MTP draft chain, or a drafter's (the Gemma 4
// assistant's: the drafter given to the step loop drafts every round and
// its tokens are dropped).
enum class DraftCost { Free, Mtp, Drafter };
const char* draft_cost_name(DraftCost c);
DraftCost parse_draft_cost(const std::string& name);  // free|mtp; throws Error (serve also takes a drafter directory)
// none|mtp|oracle; anything else (a directory: a separate drafter
// checkpoint) throws Error "separate drafter checkpoints are not supported yet".
DraftKind parse_draft_kind(const std::string& name);

// --draft-vocab n as a command line gives it (`given`: the flag is present)
// for the drafter `draft`: Error naming the flag for n < 1 or a drafter
// other than mtp. Returns the GenerateOptions::draft_vocab value (0 when absent).
int draft_vocab_from_flag(DraftKind draft, bool given, int n);

// The default block size: MTP layer count + 2 (3 for Qwen3.5; 2 without MTP).
int default_block_size(int mtp_layers);

// Receives tokens as they are committed: tokens[i] came from row
// first_row + i of the runtime's last target forward (so a sink may call
// head_logits on those rows, e.g. for logprobs). Returning false stops the
// generation after these tokens (stats.stop "sink"): a client went away or a
// stop string matched.
using TokenSink = std::function<bool(std::span<const int32_t> tokens, int first_row)>;

// How a speculative sequence's block size is set: Fixed, block_size every
// round; Auto, chosen every step by the engine's cost model
// (engine/block_choice.h), up to block_size (0: kAutoMaxBlockSize).
enum class BlockPolicy { Fixed, Auto };
const char* block_policy_name(BlockPolicy p);
// The widest block Auto picks by default (the caches are sized for it).
constexpr int kAutoMaxBlockSize = 8;
// The block size a drafter runs at: `given` when set (not 0), else Auto's
// widest, else `fixed_default` (default_block_size, or the assistant's 4).
int resolve_block_size(BlockPolicy policy, int given, int fixed_default);

// Prompt tokens a sequence forwards per engine step (--prefill-chunk): a
// long prompt joins the running sequences' steps a chunk at a time, so
// their time between tokens grows by one chunk's forward, not by the whole
// prompt's (docs/engine.md, "Chunked prefill").
constexpr int kDefaultPrefillChunk = 512;

struct GenerateOptions {
  int max_new_tokens = 32;
  // Prompt tokens per step (>= 1). The chunks are the sequence's own, the
  // same alone and in a batch, so they never change its tokens; on the CPU
  // they change no bit either.
  int prefill_chunk = kDefaultPrefillChunk;
  DraftKind draft = DraftKind::None;
  int block_size = 0;  // 0: default_block_size(the runtime's MTP layer count); Auto: the widest
  BlockPolicy block_policy = BlockPolicy::Fixed;
  bool ignore_eos = false;
  // temperature 0 (the default): greedy; above: sampling, speculative with
  // the lossless acceptance rule when a drafter drafts (speculative/acceptance.h).
  SamplingParams sampling{.temperature = 0.0};
  AcceptRule accept_rule = AcceptRule::Exact;
  OracleSpec oracle;  // draft == Oracle
  DraftCost draft_cost = DraftCost::Free;  // draft == Oracle
  // draft == Mtp: the MTP drafts cover token ids [0, draft_vocab) only
  // (MtpHead::set_draft_vocab); 0: the whole vocabulary.
  int draft_vocab = 0;
  TokenSink sink;  // optional
};

struct GenerateStats {
  std::string draft = "none";
  VerifyCounters counters;  // plain greedy: one "round" per decode forward, block_size 1, arm "none"
  int prompt_tokens = 0;
  int generated = 0;
  std::string stop = "budget";  // "budget", "eos" or "sink"
  std::string auto_source, auto_reason;  // set by bench verify's --verify auto (bench/verify_arms.h)
  std::string draft_cost = "free";        // oracle: "free" or "mtp"
  int draft_vocab = 0;                     // mtp: the ids drafts covered, [0, draft_vocab); 0: no MTP drafts
  MtpWork mtp_work;                       // the runtime's MTP counters over the decode (after the prefill)
  std::string block_policy = "fixed";     // "fixed" or "auto"
  std::vector<int64_t> rounds_at_block;   // [K-1]: verify rounds run at block size K
  // Wall-clock totals (steady_clock), milliseconds.
  double prefill_ms = 0;   // prompt forward + first token (+ seeding the drafter)
  double decode_ms = 0;    // everything after the prefill
  double draft_ms = 0;     // drafter.propose
  double verify_ms = 0;    // target forward + projection + accept
  double rollback_ms = 0;  // target rollback + drafter commit
  double round_ms = 0;     // draft through rollback
  // Decode rate: tokens after the first, over decode_ms.
  double tokens_per_second() const;
  double prefill_tokens_per_second() const;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (prompt excluded)
  GenerateStats stats;
};

// Cache capacity one run needs.
int runtime_capacity(int prompt_tokens, int max_new_tokens, int block_size);

// Checks what a generation asks for before anything runs (Error naming the
// field or flag): the prompt's ids against `info`, the budget, the block
// size, the drafter's options, the sampling parameters.
void check_generate_request(const ModelInfo& info, std::span<const int32_t> prompt, const GenerateOptions& options);

// {"rounds", "drafted", ..., "tokens_per_second", ...} as `nextn generate --json` prints it.
nlohmann::ordered_json stats_json(const GenerateStats& stats);

}  // namespace nextn
