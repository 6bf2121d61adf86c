// Small helpers shared by the subcommands.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace nextn::cli {

// "1,2,3" -> {1,2,3}; `flag` names the option in errors.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& flag);
// -m value, or the default model when empty.
std::string model_dir_or_default(const std::string& dir);
// --threads N (1..1024) into *threads; 0 (unset) means NEXTN_THREADS or all cores.
void add_threads_option(CLI::App* cmd, int* threads);

}  // namespace nextn::cli
