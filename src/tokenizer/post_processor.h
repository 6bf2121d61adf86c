// Post-processors of tokenizer.json, for one sequence: TemplateProcessing
// (its "single" template: special tokens around $A), ByteLevel, and
// Sequence of these. ByteLevel only trims offsets, so ids pass unchanged.
#pragma once
#include <cstdint>
#include <vector>

#include "tokenizer/json_reader.h"

namespace nextn::tok {

struct PostProcessor {
  // The single-sequence template: ids to emit, with -1 marking where the
  // sequence goes. Empty: the ids pass through unchanged.
  std::vector<int32_t> single;
  bool has_template = false;
};

PostProcessor parse_post_processor(const Field& f);
std::vector<int32_t> post_process(const PostProcessor& p, const std::vector<int32_t>& ids);

}  // namespace nextn::tok
