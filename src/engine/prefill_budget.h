// Chunked prefill within a cost budget (docs/engine.md, "Chunked prefill").
// While sequences decode, a step carries at most the prompt rows that the
// cost model (engine/block_choice.h) predicts keep the step within `stall`
// times what the decode rows alone cost, so the decoding streams' time
// between tokens stays within about that factor of their median while a long
// prompt arrives; with nothing decoding, every prompt forwards its whole
// chunk (nobody waits for it).
//
// The budget only ever shrinks a prompt's chunk where that changes no bit:
// when the prompt's own chunk (--prefill-chunk) is at most the group's
// SequenceGroup::chunk_invariant_rows(), every cut of it into forwards
// gives the caches its solo run gives, so an answer still does not depend on
// what else was running.
#pragma once

#include "engine/block_choice.h"

namespace nextn {

// Error naming --prefill-stall unless `stall` is 0 (off) or a finite factor above 1.
void check_prefill_stall(double stall);

// The most prompt rows, in [0, most], that `prompt_sequences` prompts may add
// to a step of `decode_sequences` sequences and `decode_rows` rows while the
// model's step time stays within `stall` times the decode rows' alone. A
// step with prompt rows is predicted at the cost model's prompt_scale()
// times the verify table's time for its rows (what such steps measured).
int prompt_rows_within(const CostModelChooser& cost, double stall, int decode_sequences, int decode_rows,
                       int prompt_sequences, int most);

}  // namespace nextn
