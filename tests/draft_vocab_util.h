// Shared by the draft-vocabulary tests (tests/test_draft_vocab.cpp,
// tests/test_cuda_draft_vocab.cpp): the product's head stage keeping every
// draft the engine step verified, the options of an MTP run, and a prompt
// for the shipped model.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "engine/head_stage.h"

namespace nextn::test {

// The engine step's head (engine/head_stage.h): BatchedHead, the product's,
// recording the drafts of every verify round it is handed. With draft mtp
// these are the MTP head's drafts as the step chained them
// (SequenceGroup::mtp_draft_together); pass it as generate()'s head.
class RecordingHead final : public HeadStage {
 public:
  void pick(SequenceGroup& group, std::span<const HeadPick> picks) override {
    for (const HeadPick& p : picks)
      if (p.verify) proposed.insert(proposed.end(), p.drafts.begin(), p.drafts.end());
    inner_.pick(group, picks);
  }
  std::vector<int32_t> proposed;  // every draft, in order

 private:
  BatchedHead inner_;
};

// Greedy MTP speculation: `tokens` new tokens, block size K, drafts over
// ids [0, draft_vocab) (0: all), EOS ignored.
inline GenerateOptions mtp_options(int tokens, int K, int draft_vocab) {
  GenerateOptions o;
  o.max_new_tokens = tokens;
  o.draft = DraftKind::Mtp;
  o.block_size = K;
  o.ignore_eos = true;
  o.draft_vocab = draft_vocab;
  return o;
}

inline const std::string kShippedModel = std::string(NEXTN_SOURCE_DIR) + "/models/nextn-code-15m";

// Python source in the shipped model's vocabulary (its tokenizer's ids for
// "import os\n\ndef main(argv):\n    for name in sorted(os.listdir(argv[1])):\n").
inline const std::vector<int32_t> kShippedCodePrompt = {619, 572, 303, 297, 2606, 3721, 85,   292, 258, 380, 560,
                                                        322, 3388, 1126, 6485, 3721, 85, 58, 16,  1319, 292};

}  // namespace nextn::test
