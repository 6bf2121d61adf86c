#include "speculative/gemma4_drafter.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "io/gemma4_checkpoint.h"
#include "model/gemma4_target.h"
#include "model/runtime.h"

namespace nextn {

Gemma4AssistantDrafter::Gemma4AssistantDrafter(std::unique_ptr<AssistantChain> chain) : chain_(std::move(chain)) {}

Gemma4AssistantDrafter::Gemma4AssistantDrafter(ModelRuntime& rt, CpuGemma4Assistant& assistant)
    : chain_(make_cpu_assistant_chain(assistant, rt)) {}

void Gemma4AssistantDrafter::begin(std::span<const int32_t>, int32_t first) {
  bonus_ = first;
  in_round_ = false;
}

// A round of its own is a batch of one.
void Gemma4AssistantDrafter::propose(int n, std::vector<int32_t>& out) {
  Drafter* self = this;
  std::vector<int32_t>* outs[] = {&out};
  propose_together({&self, 1}, {&n, 1}, outs);
}

void Gemma4AssistantDrafter::propose_together(std::span<Drafter* const> drafters, std::span<const int> n,
                                              std::span<std::vector<int32_t>* const> out) {
  if (drafters.size() != n.size() || drafters.size() != out.size() || drafters.empty() || drafters[0] != this)
    fail("internal: propose_together must be called on its first drafter");
  std::vector<AssistantChain*> chains;
  std::vector<int32_t*> outs;
  std::vector<int> counts;
  for (size_t i = 0; i < drafters.size(); ++i) {
    auto* d = dynamic_cast<Gemma4AssistantDrafter*>(drafters[i]);
    if (d == nullptr || d->batch_key() != batch_key()) fail("internal: propose_together over drafters of different kinds");
    out[i]->assign(size_t(std::max(0, n[i])), 0);
    if (n[i] <= 0) continue;
    d->chain_->start(d->bonus_);
    chains.push_back(d->chain_.get());
    outs.push_back(out[i]->data());
    counts.push_back(n[i]);
  }
  if (!chains.empty()) chains[0]->propose_together(chains, counts, outs);
}

void Gemma4AssistantDrafter::draft_logits(float* out) {
  if (!in_round_) {  // the round's first draft: as propose starts it
    chain_->start(bonus_);
    in_round_ = true;
  }
  chain_->next_logits(out);
}

void Gemma4AssistantDrafter::draft_step(int32_t token) {
  if (!in_round_) fail("internal: draft_step before draft_logits");
  chain_->advance(token);
}

void Gemma4AssistantDrafter::commit(std::span<const int32_t>, int, int32_t next) {
  bonus_ = next;
  in_round_ = false;
}

void check_assistant_dir(const std::string& dir) {
  if (gemma4_model_type(dir) != "gemma4_assistant")
    fail("--draft {}: not a Gemma 4 assistant checkpoint (config.json model_type is not gemma4_assistant)", dir);
}

AssistantModel::AssistantModel(const std::string& dir, const Gemma4TextConfig& target, int cpu_threads)
    : target_(target), cpu_threads_(cpu_threads) {
  check_assistant_dir(dir);
  checkpoint_ = std::make_unique<const Gemma4Checkpoint>(Gemma4Checkpoint::open_assistant(dir));
  (void)check_assistant_fits(*checkpoint_, target);  // before any drafter is asked for
}

AssistantModel::~AssistantModel() = default;

std::unique_ptr<Drafter> AssistantModel::drafter(ModelRuntime& rt) {
  auto* target = dynamic_cast<Gemma4Target*>(&rt);
  if (target == nullptr) fail("--draft: a Gemma 4 assistant drafts for a Gemma 4 target only");
  if (auto chain = target->device_assistant(*checkpoint_)) return std::make_unique<Gemma4AssistantDrafter>(std::move(chain));
  return cpu_drafter(rt);
}

std::unique_ptr<Drafter> AssistantModel::cpu_drafter(ModelRuntime& rt) {
  if (!assistant_) assistant_ = std::make_unique<CpuGemma4Assistant>(*checkpoint_, target_, cpu_threads_);
  return std::make_unique<Gemma4AssistantDrafter>(rt, *assistant_);
}

std::vector<int32_t> assistant_draft_trace(ModelRuntime& rt, AssistantModel& assistant, std::span<const int32_t> ids) {
  if (rt.target_length() != 0) fail("internal: assistant_draft_trace on a runtime that already holds tokens");
  const std::unique_ptr<Drafter> drafter = assistant.drafter(rt);
  std::vector<int32_t> out, one;
  for (size_t p = 0; p + 1 < ids.size(); ++p) {
    rt.target_forward(ids.subspan(p, 1));
    drafter->begin(ids.first(p + 1), ids[p + 1]);  // ids[p+1] as the round's bonus
    drafter->propose(1, one);
    out.push_back(one.at(0));
  }
  return out;
}

bool is_drafter_checkpoint(const std::string& draft) {
  std::error_code ec;
  return std::filesystem::is_directory(draft, ec);
}

}  // namespace nextn
