#include "engine/generate.h"

#include <algorithm>

#include "core/error.h"
#include "engine/block_choice.h"
#include "engine/step_loop.h"
#include "model/batch_runtime.h"
#include "model/gemma4_target.h"
#include "speculative/gemma4_drafter.h"

namespace nextn {
namespace {

// Steps one sequence to its end on a group of its own.
GenerateResult run_alone(ModelRuntime& rt, std::span<const int32_t> prompt, const GenerateOptions& options,
                         std::unique_ptr<Drafter> drafter, const std::vector<int32_t>* oracle_truth, HeadStage* head) {
  const auto group = make_solo_group(rt);
  StepLoop loop(*group, head);
  const bool speculative = drafter != nullptr || options.draft != DraftKind::None;
  if (speculative && options.block_policy == BlockPolicy::Auto) {
    ModelRuntime* slot = &rt;
    probe_step_costs(*group, {&slot, 1}, resolve_block_size(options.block_policy, options.block_size, 0),
                     loop.cost_model());
  }
  loop.add(rt, prompt, options, std::move(drafter), oracle_truth ? *oracle_truth : std::vector<int32_t>{});
  while (loop.running() > 0) loop.step();
  std::vector<StepLoop::Finished> done = loop.take_finished();
  if (done.size() != 1) fail("internal: a batch of one finished {} sequences", done.size());
  if (done[0].error) std::rethrow_exception(done[0].error);
  return std::move(done[0].result);
}

}  // namespace

GenerateResult generate(ModelRuntime& rt, std::span<const int32_t> prompt, const GenerateOptions& options,
                        const std::vector<int32_t>* oracle_truth, HeadStage* head) {
  return run_alone(rt, prompt, options, nullptr, oracle_truth, head);
}

GenerateResult generate_with_drafter(ModelRuntime& rt, std::unique_ptr<Drafter> drafter,
                                     std::span<const int32_t> prompt, const GenerateOptions& options,
                                     HeadStage* head) {
  return run_alone(rt, prompt, options, std::move(drafter), nullptr, head);
}

GenerateResult greedy_generate(ModelRuntime& rt, std::span<const int32_t> prompt, int max_new_tokens, bool ignore_eos,
                               const TokenSink& sink) {
  GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  o.ignore_eos = ignore_eos;
  o.sink = sink;
  return generate(rt, prompt, o);
}

GenerateResult generate_fresh(const RuntimeFactory& factory, std::span<const int32_t> prompt,
                              const GenerateOptions& options, HeadStage* head) {
  const int cap = std::max(kProbePositions, runtime_capacity(int(prompt.size()), options.max_new_tokens,
                                                             options.block_size == 0 ? kMaxBlockSize : options.block_size));
  std::vector<int32_t> truth;
  auto rt = factory(cap);
  if (options.draft == DraftKind::Oracle) {
    check_oracle_spec(options.oracle);
    truth = greedy_generate(*rt, prompt, options.max_new_tokens, options.ignore_eos).tokens;
    rt->reset();
  }
  return generate(*rt, prompt, options, options.draft == DraftKind::Oracle ? &truth : nullptr, head);
}

GenerateResult generate_with_assistant(const RuntimeFactory& factory, const std::string& assistant_dir,
                                       std::span<const int32_t> prompt, const GenerateOptions& options,
                                       int cpu_threads, HeadStage* head) {
  GenerateOptions o = options;
  o.block_size = resolve_block_size(o.block_policy, o.block_size, kAssistantBlockSize);
  check_assistant_dir(assistant_dir);  // before the target's caches are made
  auto rt = factory(std::max(kProbePositions, runtime_capacity(int(prompt.size()), o.max_new_tokens, o.block_size)));
  const auto* target = dynamic_cast<const Gemma4Target*>(rt.get());
  if (!target) fail("--draft: a Gemma 4 assistant drafts for a Gemma 4 target only");
  AssistantModel assistant(assistant_dir, target->gemma4_config(), cpu_threads);
  return generate_with_drafter(*rt, assistant.drafter(*rt), prompt, o, head);
}

}  // namespace nextn
