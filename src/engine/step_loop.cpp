#include "engine/step_loop.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "engine/prefill_budget.h"
#include "sampling/sampling.h"
#include "speculative/acceptance.h"

namespace nextn {
namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

}  // namespace

// One sequence as the loop runs it.
struct StepLoop::Run {
  int id = 0;
  ModelRuntime* rt = nullptr;
  GenerateOptions o;
  std::vector<int32_t> prompt;
  std::unique_ptr<Drafter> drafter;       // a drafter of its own (the Gemma 4 assistant)
  std::unique_ptr<OracleDrafter> oracle;  // draft oracle (its tokens; at MTP cost the MTP chain runs too)
  std::unique_ptr<Drafter> cost_drafter;  // the oracle at a drafter's cost (DraftCost::Drafter): it drafts too, its tokens dropped
  std::vector<int32_t> cost_drafts;
  bool greedy = true;
  MtpHead* mtp = nullptr;    // the MTP head, when it runs: draft mtp, or the oracle at MTP cost
  bool speculative = false;  // drafts are proposed
  int K = 1;                 // block size (1 without drafts); Auto: the widest
  bool auto_k = false;       // BlockPolicy::Auto: the chooser sets step_k every step
  int step_k = 1;            // this step's block size
  std::vector<int64_t> offered_at;  // [i]: rounds whose draft i+1 followed accepted drafts
  int rounds_without_drafts = 0;
  int prompt_done = 0;   // prompt tokens forwarded (chunks of at most o.prefill_chunk)
  bool mid_prompt = false;  // this step forwarded a chunk before the prompt's last: no token yet
  bool prefilled = false;   // the whole prompt forwarded and its first token committed
  bool done = false;
  bool failed = false;  // failed alone at the step's reservation (finished already)
  int32_t bonus = 0;
  std::vector<int32_t> block;   // this step's rows
  std::vector<int32_t> drafts;  // block[1..]
  std::vector<int32_t> picks;   // the head's tokens for the rows
  std::vector<int32_t> mtp_pairs;  // tokens the MTP pairs with rows 0.. of this step's forward
  int keep = 0;                    // this step's rows the round keeps (its rollback); 0: no round
  std::optional<Acceptance> drafter_commit;  // the round the oracle / drafter learns once the target is rolled back
  int mtp_committed = 0;           // MTP entries paired with true target rows
  bool mtp_gaps = false;           // Auto: rounds at K = 1 skipped their pairing (fewer entries than positions)
  std::vector<int> eos;
  // sampling
  std::unique_ptr<SamplingRng> rng;
  std::vector<std::vector<double>> q;  // the drafter's distribution at each draft position
  std::vector<float> logits;
  std::vector<int32_t> scratch;
  GenerateResult res;
  HeadWork head_before;
  MtpWork mtp_before;
  Clock::time_point prefill_start{};
  Clock::time_point decode_start{};

  int left() const { return o.max_new_tokens - int(res.tokens.size()); }
  // The MTP head's length at most during this step (0: no MTP work): the
  // entries paired so far, the pairing of the rows the round keeps and the
  // next step's chain (drafts - 1 entries), over every number of kept rows.
  int mtp_end() const {
    if (!mtp) return 0;
    const auto chain = [&](int left) { return left > 0 ? std::max(0, std::min(K, left) - 2) : 0; };
    const int W = int(block.size());
    if (!prefilled) return mtp_committed + W + chain(this->left() - 1);  // a prefill pairs every row, keeps one token
    int most = 0;
    for (int kept = 1; kept <= W; ++kept) most = std::max(most, kept + chain(this->left() - kept));
    return mtp_committed + most;
  }
  bool is_eos(int32_t t) const { return std::find(eos.begin(), eos.end(), t) != eos.end(); }
  // The target's sampling distribution of row `row` of the last forward.
  void target_row(int row, std::vector<double>& p) {
    logits.resize(size_t(rt->vocab()));
    rt->head_logits(row, logits.data());
    sampling_distribution(logits, o.sampling, p, scratch);
  }
  // Commits tokens whose rows start at first_row: up to the first EOS,
  // then the budget, then the sink.
  void commit(std::span<const int32_t> tokens, int first_row) {
    GenerateStats& s = res.stats;
    size_t kept = 0;
    while (kept < tokens.size()) {
      const int32_t t = tokens[kept++];
      res.tokens.push_back(t);
      if (is_eos(t)) {
        done = true;
        s.stop = "eos";
        break;
      }
    }
    if (left() <= 0) done = true;
    if (o.sink && !o.sink(tokens.first(kept), first_row)) {
      if (!done) s.stop = "sink";
      done = true;
    }
  }
};

StepLoop::StepLoop(SequenceGroup& group, HeadStage* head)
    : group_(group), head_(head), batched_(head ? nullptr : std::make_unique<BatchedHead>()) {
  if (!head_) head_ = batched_.get();
}

StepLoop::~StepLoop() = default;

int StepLoop::add(ModelRuntime& slot, std::span<const int32_t> prompt, const GenerateOptions& options,
                  std::unique_ptr<Drafter> drafter, std::vector<int32_t> oracle_truth) {
  const ModelInfo info = slot.info();
  check_generate_request(info, prompt, options);
  if (slot.target_length() != 0)
    fail("internal: generation needs a fresh sequence (target_length {})", slot.target_length());
  auto run = std::make_unique<Run>();
  Run& r = *run;
  r.id = next_id_++;
  r.rt = &slot;
  r.o = options;
  r.prompt.assign(prompt.begin(), prompt.end());
  r.greedy = options.sampling.greedy();
  r.drafter = std::move(drafter);
  if (options.draft == DraftKind::Oracle && options.draft_cost == DraftCost::Drafter) {
    if (!r.drafter) fail("internal: the oracle at a drafter's cost without the drafter");
    r.cost_drafter = std::move(r.drafter);
  }
  r.speculative = r.drafter != nullptr || options.draft != DraftKind::None;
  if (r.speculative) {
    r.auto_k = options.block_policy == BlockPolicy::Auto;
    r.K = resolve_block_size(options.block_policy, options.block_size, default_block_size(info.mtp_layers));
    check_block_size(r.K);
  }
  r.step_k = r.K;
  r.offered_at.assign(size_t(r.K - 1), 0);
  if (!r.drafter && options.draft == DraftKind::Mtp) {
    r.mtp = &mtp_of(slot);
    r.mtp->set_draft_vocab(options.draft_vocab);
  }
  if (!r.drafter && options.draft == DraftKind::Oracle) {
    if (oracle_truth.empty() && options.max_new_tokens > 0)
      fail("internal: the oracle drafter needs the greedy output first");
    r.oracle = std::make_unique<OracleDrafter>(std::move(oracle_truth), options.oracle, info.vocab_size);
    if (options.draft_cost == DraftCost::Mtp) {
      r.mtp = &mtp_of(slot);
      r.mtp->set_draft_vocab(0);  // the cost of the whole head's chain, whatever the sequence was set to
    }
  }
  if (!options.ignore_eos) r.eos = info.eos_token_ids;
  if (!r.greedy) r.rng = std::make_unique<SamplingRng>(options.sampling.seed);
  r.q.resize(size_t(r.K));

  GenerateStats& s = r.res.stats;
  VerifyCounters& c = s.counters;
  s.draft = r.drafter ? r.drafter->name() : r.speculative ? draft_kind_name(options.draft) : "none";
  s.prompt_tokens = int(prompt.size());
  s.draft_cost = r.cost_drafter ? r.cost_drafter->name() : draft_cost_name(options.draft_cost);
  s.block_policy = block_policy_name(r.auto_k ? BlockPolicy::Auto : BlockPolicy::Fixed);
  s.rounds_at_block.assign(size_t(r.K), 0);
  c.block_size = r.K;
  c.vocab = info.vocab_size;
  c.accepted_at.assign(size_t(r.K - 1), 0);
  c.verify_requested = c.verify_chosen = !r.speculative ? "none" : r.greedy ? "batched" : "sampled";
  c.verify_taken = r.speculative && r.greedy ? "none" : c.verify_chosen;  // greedy: what the runtime says ran
  const int id = r.id;
  if (options.max_new_tokens == 0) {
    finished_.push_back({id, std::move(r.res), nullptr});
    return id;
  }
  runs_.push_back(std::move(run));
  return id;
}

void StepLoop::step() {
  if (runs_.empty()) return;
  const auto t0 = Clock::now();
  StepReport report;
  try {
    cut_prompts(report);
    reserve();
    if (runs_.empty()) return;  // every sequence failed alone: no step ran
    std::vector<ModelRuntime*> seqs;
    std::vector<std::span<const int32_t>> rows;
    for (auto& run : runs_) {
      Run& r = *run;
      if (!r.prefilled) {  // cut_prompts() cut the prompt's next chunk
        report.prefill_rows += int(r.block.size());
        if (r.prompt_done == 0) r.prefill_start = t0;
      }
      seqs.push_back(r.rt);
      rows.emplace_back(r.block);
      report.rows += int(r.block.size());
    }
    report.sequences = int(seqs.size());
    group_.forward_together(seqs, rows);
    const auto t_forward = Clock::now();
    report.forward_ms = ms_between(t0, t_forward);
    // A chunk before the prompt's last gives no token: the MTP pairs its
    // rows with the prompt's next tokens, and the sequence waits for its
    // next chunk (no head rows, no drafts).
    for (auto& run : runs_) {
      Run& r = *run;
      if (r.prefilled) continue;
      const int first = r.prompt_done;
      r.prompt_done += int(r.block.size());
      r.mid_prompt = r.prompt_done < int(r.prompt.size());
      if (r.mid_prompt && r.mtp)
        r.mtp_pairs.assign(r.prompt.begin() + first + 1, r.prompt.begin() + r.prompt_done + 1);
    }

    std::vector<Run*> greedy;
    for (auto& run : runs_)
      if (run->greedy && !run->mid_prompt) greedy.push_back(run.get());
    pick_tokens(greedy);
    for (auto& run : runs_)
      if (!run->mid_prompt) commit_round(*run, run->picks);
    // The sequences that go on, and their next step's block sizes, chosen
    // before the MTP pairing: a sequence that will not draft skips it (below).
    std::vector<Run*> continuing;
    for (auto& run : runs_)
      if (!run->done && !run->mid_prompt) continuing.push_back(run.get());
    choose_blocks(continuing, report);
    const auto t1 = Clock::now();
    report.head_ms = ms_between(t_forward, t1);

    // Rollback (every round's rows past what it keeps, in one call) and the
    // MTP pairing of the committed tokens.
    std::vector<ModelRuntime*> rolling;
    std::vector<int> keeps;
    for (auto& run : runs_) {
      if (run->keep == 0) continue;
      rolling.push_back(run->rt);
      keeps.push_back(run->keep);
      run->keep = 0;
    }
    if (!rolling.empty()) group_.rollback_together(rolling, keeps);
    // Drafters learn the round with the target as it goes on (rolled back).
    for (auto& run : runs_) {
      Run& r = *run;
      if (!r.drafter_commit) continue;
      const Acceptance a = *r.drafter_commit;
      r.drafter_commit.reset();
      if (r.oracle) r.oracle->commit(r.drafts, a.accepted, a.next);
      if (r.drafter) r.drafter->commit(r.drafts, a.accepted, a.next);
      if (r.cost_drafter) r.cost_drafter->commit(r.drafts, a.accepted, a.next);
    }
    std::vector<ModelRuntime*> pairing;
    std::vector<std::span<const int32_t>> pairs;
    for (auto& run : runs_) {
      Run& r = *run;
      if (r.mtp && !r.done && !r.mtp_pairs.empty()) {
        if (r.auto_k && r.step_k == 1) {
          // It drafts nothing next step: its pairing would cost a sequence's
          // MTP forward for no draft. The head's cache skips these positions
          // (drafts after the gap may be accepted less; the output, verified
          // by the target, cannot change).
          r.mtp_pairs.clear();
          r.mtp_gaps = true;
          continue;
        }
        pairing.push_back(r.rt);
        pairs.emplace_back(r.mtp_pairs);
      }
    }
    if (!pairing.empty()) group_.mtp_forward_together(pairing, pairs);
    // A step of prompt chunks only has no head to wait for its work: it waits
    // here, so the device never runs chunks behind and a request that joins
    // next step starts after this one chunk, not a queue of them.
    if (std::all_of(runs_.begin(), runs_.end(), [](const auto& r) { return r->mid_prompt; })) group_.wait_for(seqs);
    for (auto& run : runs_) {
      Run& r = *run;
      if (!r.mtp || r.done || r.mtp_pairs.empty()) continue;
      r.mtp_committed += int(r.mtp_pairs.size());
      r.mtp_pairs.clear();
      if (!r.mtp_gaps && r.mtp_committed != r.rt->target_length())
        fail("internal: MTP holds {} entries, target {} positions", r.mtp_committed, r.rt->target_length());
    }
    const auto t2 = Clock::now();
    report.pairing_ms = ms_between(t1, t2);
    for (auto& run : runs_) {
      Run& r = *run;
      if (r.mid_prompt) continue;
      if (r.prefilled && r.decode_start == Clock::time_point{}) {  // prefilled in this step
        r.res.stats.prefill_ms = ms_between(r.prefill_start, t2);
        r.decode_start = t2;
        if (r.mtp) r.mtp_before = r.mtp->mtp_work();
      } else {  // a round: its verify and rollback (its drafts were timed by the step before)
        r.res.stats.verify_ms += ms_between(t0, t1);
        r.res.stats.rollback_ms += ms_between(t1, t2);
        r.res.stats.round_ms += ms_between(t0, t2);
      }
    }
    draft_next(continuing);
    const auto t3 = Clock::now();
    report.draft_ms = ms_between(t2, t3);
    int chain = 0, drafted = 0;
    for (Run* r : continuing) {
      r->res.stats.draft_ms += ms_between(t2, t3);
      r->res.stats.round_ms += ms_between(t2, t3);  // the next round's drafts
      chain = std::max(chain, int(r->drafts.size()));
      drafted += int(r->drafts.size());
    }
    // What this step cost, for the next choices (steps with prompt rows are not decode steps).
    if (report.prefill_rows == 0)
      chooser_->observe_step(report.sequences, report.rows, ms_between(t0, t2), chain, drafted, ms_between(t2, t3));
    else if (report.prompt_budget >= 0)
      cost_model_.observe_prompt_step(report.sequences, report.rows, ms_between(t0, t2));
  } catch (...) {
    fail_all(std::current_exception());
    return;
  }
  for (auto& run : runs_)
    if (run->done) finish(*run);
  std::erase_if(runs_, [](const std::unique_ptr<Run>& r) { return r->done; });
  ++steps_;
  report.ms = ms_between(t0, Clock::now());
  if (on_step) on_step(report);
}

void StepLoop::set_prefill_stall(double stall) {
  check_prefill_stall(stall);
  prefill_stall_ = stall;
}

void StepLoop::cut_prompts(StepReport& report) {
  std::vector<std::pair<Run*, int>> prompts;  // each prompt and its whole next chunk
  int decode_sequences = 0, decode_rows = 0, whole = 0;
  for (auto& run : runs_) {
    Run& r = *run;
    if (r.prefilled) {
      ++decode_sequences;
      decode_rows += int(r.block.size());
    } else {
      prompts.emplace_back(&r, std::min(r.o.prefill_chunk, int(r.prompt.size()) - r.prompt_done));
      whole += prompts.back().second;
    }
  }
  // With nothing decoding nobody waits: every prompt forwards its whole chunk.
  int allowed = whole;
  if (prefill_stall_ > 0 && decode_sequences > 0 && !prompts.empty()) {
    allowed = prompt_rows_within(cost_model_, prefill_stall_, decode_sequences, decode_rows, int(prompts.size()),
                                 whole);
    report.prompt_budget = allowed;
    report.prompt_scale = cost_model_.prompt_scale();
  }
  // In arrival order; each prompt forwards at least one row, so every one
  // moves, and its chunk is cut only where no bit changes (prefill_budget.h).
  for (auto [r, chunk] : prompts) {
    const bool may_cut = r->o.prefill_chunk <= group_.chunk_invariant_rows();
    const int n = may_cut ? std::clamp(allowed, 1, chunk) : chunk;
    allowed -= n;
    r->block.assign(r->prompt.begin() + r->prompt_done, r->prompt.begin() + r->prompt_done + n);
  }
}

void StepLoop::reserve() {
  for (auto& run : runs_) {
    Run& r = *run;
    try {
      r.rt->reserve_step(r.block, r.mtp_end());
    } catch (const DeviceFault&) {
      throw;  // nothing can be known of the device: the whole step fails (step())
    } catch (const std::exception&) {  // an Error (bad input, capacity, out of memory) or a host bad_alloc
      fail_alone(r, std::current_exception());
    }
  }
  std::erase_if(runs_, [](const std::unique_ptr<Run>& r) { return r->failed; });
}

void StepLoop::fail_alone(Run& r, std::exception_ptr error) {
  // Nothing of this step ran on it; a fresh slot (what its reservation took
  // released) is what the caller gets back to reuse.
  r.rt->reset();
  r.res.stats.generated = int(r.res.tokens.size());
  finished_.push_back({r.id, std::move(r.res), error});
  r.done = r.failed = true;
}

void StepLoop::pick_tokens(std::vector<Run*>& greedy) {
  std::vector<HeadPick> picks;
  for (Run* r : greedy) {
    HeadPick p;
    p.sequence = r->rt;
    if (!r->prefilled) {
      p.first = int(r->block.size()) - 1;
      p.count = 1;
    } else {
      p.count = int(r->block.size());
      p.verify = r->speculative;
      p.drafts = r->drafts;
    }
    r->picks.assign(size_t(p.count), -1);
    p.out = r->picks.data();
    p.counters = &r->res.stats.counters;
    picks.push_back(p);
  }
  head_->pick(group_, picks);
}

void StepLoop::commit_round(Run& r, std::span<const int32_t> picks) {
  if (!r.prefilled) {  // the prompt's last chunk: its last row gives the first token
    const int last_row = int(r.block.size()) - 1;
    int32_t first = 0;
    if (r.greedy) {
      first = picks[0];
    } else {
      std::vector<double> p;
      r.target_row(last_row, p);
      first = sample_index(p, *r.rng);
    }
    r.prefilled = true;
    r.commit({&first, 1}, last_row);
    if (r.greedy && !head_->records_rounds()) r.head_before = r.rt->head_work();
    r.bonus = first;
    if (r.done || !r.speculative) return;
    if (r.mtp) {  // the chunk's entries, the last (x_T = first, h_T-1)
      r.mtp_pairs.assign(r.prompt.end() - (last_row + 1) + 1, r.prompt.end());
      r.mtp_pairs.push_back(first);
    }
    if (r.oracle) r.oracle->begin(r.prompt, first);
    if (r.drafter) r.drafter->begin(r.prompt, first);
    if (r.cost_drafter) r.cost_drafter->begin(r.prompt, first);
    return;
  }
  const int W = int(r.block.size());
  const Acceptance a = r.greedy ? accept_greedy(r.drafts, picks)
                                : accept_sampled(r.drafts, std::span(r.q).first(r.drafts.size()),
                                                 [&r](int row, std::vector<double>& p) { r.target_row(row, p); },
                                                 *r.rng, r.o.accept_rule);
  VerifyCounters& c = r.res.stats.counters;
  ++c.rounds;
  c.drafted += W - 1;
  c.accepted += a.accepted;
  for (int i = 0; i < a.accepted; ++i) ++c.accepted_at[size_t(i)];
  if (r.speculative) {
    const int offered = std::min(a.accepted + 1, W - 1);  // drafts 1..a accepted, draft a+1 the first refused
    for (int i = 0; i < offered; ++i) ++r.offered_at[size_t(i)];
    ++r.res.stats.rounds_at_block[size_t(W - 1)];
    r.rounds_without_drafts = W == 1 ? r.rounds_without_drafts + 1 : 0;
    if (r.auto_k) chooser_->observe_round(offered, a.accepted);
  }
  std::vector<int32_t> round(r.drafts.begin(), r.drafts.begin() + a.accepted);
  round.push_back(a.next);
  r.commit(round, 0);
  // Rows past the kept ones are rolled back with the step's other rounds (step()).
  r.keep = a.accepted + 1 < W ? a.accepted + 1 : 0;
  r.bonus = a.next;
  if (r.done || !r.speculative) return;
  if (r.mtp) {  // drop the chained entries, pair d_1..d_a, next with the verify rows 0..a
    r.mtp->mtp_rollback(r.mtp_committed);
    r.mtp_pairs = round;
  }
  if (r.oracle || r.drafter || r.cost_drafter) r.drafter_commit = a;  // after the step's rollback (step())
}

void StepLoop::choose_blocks(std::span<Run* const> runs, StepReport& report) {
  std::vector<BlockCandidate> candidates;
  std::vector<Run*> choosing;
  for (Run* r : runs) {
    if (!r->auto_k) continue;
    BlockCandidate c;
    c.max_k = std::max(1, std::min(r->K, r->left()));
    c.offered = r->offered_at;
    c.accepted = r->res.stats.counters.accepted_at;
    c.rounds_without_drafts = r->rounds_without_drafts;
    candidates.push_back(c);
    choosing.push_back(r);
  }
  if (choosing.empty()) return;
  std::vector<int> k(choosing.size(), 1);
  chooser_->choose(candidates, int(runs.size() - choosing.size()), k);
  for (size_t i = 0; i < choosing.size(); ++i) {
    const int K = k[i];
    if (K < 1 || K > candidates[i].max_k)
      fail("internal: the block chooser picked K = {} outside [1, {}]", K, candidates[i].max_k);
    choosing[i]->step_k = K;
  }
  report.chosen_k = std::move(k);
  report.choice = &chooser_->report();
}

void StepLoop::draft_next(std::span<Run* const> runs) {
  // The MTP chains of greedy sequences: one call per chained step for all of them.
  std::vector<ModelRuntime*> chained;
  std::vector<int> counts;
  std::vector<Run*> chained_runs;
  for (Run* r : runs) {
    r->drafts.clear();
    if (!r->speculative) continue;
    const int n = std::min(r->step_k, r->left()) - 1;
    r->drafts.resize(size_t(n));
    if (r->mtp && r->greedy && n > 0) {
      chained.push_back(r->rt);
      counts.push_back(n);
      chained_runs.push_back(r);
    }
  }
  if (!chained.empty()) {
    int total = 0;
    for (int n : counts) total += n;
    std::vector<int32_t> out(static_cast<size_t>(total));
    group_.mtp_draft_together(chained, counts, out.data());
    size_t at = 0;
    for (size_t i = 0; i < chained_runs.size(); ++i) {
      std::copy_n(out.begin() + long(at), counts[i], chained_runs[i]->drafts.begin());
      at += size_t(counts[i]);
    }
  }
  // The greedy drafters' proposals (a run's own drafter, or the oracle's
  // cost drafter, whose tokens are dropped): drafters with equal batch keys
  // in one propose_together call, the others alone.
  struct Batch {
    const void* key = nullptr;  // null: a drafter alone
    std::vector<Drafter*> drafters;
    std::vector<int> counts;
    std::vector<std::vector<int32_t>*> outs;
  };
  std::vector<Batch> batches;
  for (Run* r : runs) {
    if (!r->speculative || r->drafts.empty()) continue;
    Drafter* d = r->oracle ? r->cost_drafter.get() : r->greedy ? r->drafter.get() : nullptr;
    if (d == nullptr) continue;
    const void* key = d->batch_key();
    auto it = std::find_if(batches.begin(), batches.end(), [&](const Batch& b) { return key != nullptr && b.key == key; });
    if (it == batches.end()) it = batches.insert(batches.end(), Batch{key, {}, {}, {}});
    it->drafters.push_back(d);
    it->counts.push_back(int(r->drafts.size()));
    it->outs.push_back(r->oracle ? &r->cost_drafts : &r->drafts);
  }
  for (Batch& b : batches) {
    b.drafters[0]->propose_together(b.drafters, b.counts, b.outs);
    for (size_t i = 0; i < b.drafters.size(); ++i)
      if (int(b.outs[i]->size()) != b.counts[i])
        fail("internal: drafter {} proposed {} of {} tokens", b.drafters[i]->name(), b.outs[i]->size(), b.counts[i]);
  }
  for (Run* r : runs) {
    if (r->speculative) {
      const int n = int(r->drafts.size());
      if (r->oracle) {
        r->oracle->propose(n, r->drafts);  // at a drafter's or MTP cost that ran above; its tokens are dropped
      } else if (!r->greedy) {  // sampled drafting: q_i from the drafter's logits, d_i ~ q_i, then one chained step
        r->logits.resize(size_t(r->rt->vocab()));
        for (int i = 0; i < n; ++i) {
          if (i > 0) r->drafter ? r->drafter->draft_step(r->drafts[size_t(i - 1)]) : r->mtp->mtp_step(r->drafts[size_t(i - 1)]);
          if (r->drafter)
            r->drafter->draft_logits(r->logits.data());
          else
            r->mtp->mtp_logits(r->logits.data());
          sampling_distribution(r->logits, r->o.sampling, r->q[size_t(i)], r->scratch);
          r->drafts[size_t(i)] = sample_index(r->q[size_t(i)], *r->rng);
        }
      }
    }
    r->block.assign(1, r->bonus);
    r->block.insert(r->block.end(), r->drafts.begin(), r->drafts.end());
  }
}

void StepLoop::finish(Run& r) {
  GenerateStats& s = r.res.stats;
  s.generated = int(r.res.tokens.size());
  if (r.decode_start != Clock::time_point{}) s.decode_ms = ms_between(r.decode_start, Clock::now());
  if (r.mtp) {
    const MtpWork now = r.mtp->mtp_work();
    s.mtp_work.entries = now.entries - r.mtp_before.entries;
    s.mtp_work.chained_steps = now.chained_steps - r.mtp_before.chained_steps;
    s.mtp_work.argmax_rows = now.argmax_rows - r.mtp_before.argmax_rows;
    if (r.o.draft == DraftKind::Mtp) s.draft_vocab = r.mtp->draft_vocab();
  }
  if (r.greedy && !head_->records_rounds()) {  // the runtime's own counters, read once
    VerifyCounters& c = s.counters;
    const HeadWork now = r.rt->head_work();
    c.rows_projected = now.rows_projected - r.head_before.rows_projected;
    c.head_bytes_read = now.head_bytes_read - r.head_before.head_bytes_read;
    c.logits_bytes_written = now.logits_bytes_written - r.head_before.logits_bytes_written;
    c.walk_rows = now.walk_rows - r.head_before.walk_rows;
    c.head_calls = now.head_calls - r.head_before.head_calls;
    if (r.speculative && c.rounds > 0) {
      c.paths = {head_path_name(now.last_path)};
      c.verify_taken = c.paths[0];
    }
  }
  finished_.push_back({r.id, std::move(r.res), nullptr});
}

void StepLoop::fail_all(std::exception_ptr error) {
  for (auto& run : runs_) {
    run->res.stats.generated = int(run->res.tokens.size());
    finished_.push_back({run->id, std::move(run->res), error});
  }
  runs_.clear();
}

std::vector<StepLoop::Finished> StepLoop::take_finished() { return std::exchange(finished_, {}); }

}  // namespace nextn
