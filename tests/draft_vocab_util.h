// Shared by the draft-vocabulary tests (tests/test_draft_vocab.cpp,
// tests/test_cuda_draft_vocab.cpp): the MTP drafter keeping every token it
// proposed, the options of an MTP run, and a prompt for the shipped model.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "speculative/drafter.h"
#include "speculative/generate.h"

namespace nextn::test {

class RecordingMtpDrafter final : public Drafter {
 public:
  explicit RecordingMtpDrafter(ModelRuntime& rt) : inner_(rt) {}
  const char* name() const override { return "mtp"; }
  void begin(std::span<const int32_t> p, int32_t first) override { inner_.begin(p, first); }
  void propose(int n, std::vector<int32_t>& out) override {
    inner_.propose(n, out);
    proposed.insert(proposed.end(), out.begin(), out.end());
  }
  void commit(std::span<const int32_t> d, int a, int32_t next) override { inner_.commit(d, a, next); }
  std::vector<int32_t> proposed;  // every draft, in order

 private:
  MtpDrafter inner_;
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
