// Each subcommand lives in its own file and registers itself on the app.
// Callbacks throw nextn::Error for bad input; main() turns that into one
// `error: ...` line and exit 1 (RefusedError: exit 2).
#pragma once
#include <CLI/CLI.hpp>

namespace nextn::cli {

void register_generate(CLI::App& app);
void register_draft_trace(CLI::App& app);
void register_inspect(CLI::App& app);
void register_quantize(CLI::App& app);
void register_bench(CLI::App& app);
void register_make_checkpoint(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_detokenize(CLI::App& app);
void register_serve(CLI::App& app);

// The checkpoint used when -m is not given: the repo's shipped default model.
std::string default_model_dir();

}  // namespace nextn::cli
