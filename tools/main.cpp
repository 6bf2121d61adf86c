// nextn: the command-line entry point. Subcommands register themselves;
// this file owns the exit-code contract (0 ok, 1 error, 2 refused).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>

#include "commands.h"
#include "core/error.h"

namespace nextn::cli {

std::string default_model_dir() {
  if (const char* env = std::getenv("NEXTN_DEFAULT_MODEL")) return env;
  return std::string(NEXTN_SOURCE_DIR) + "/models/default";
}

}  // namespace nextn::cli

int main(int argc, char** argv) {
  CLI::App app{"nextn: speculative decoding for MTP language models"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for all subcommands");
  nextn::cli::register_generate(app);
  nextn::cli::register_draft_trace(app);
  nextn::cli::register_inspect(app);
  nextn::cli::register_quantize(app);
  nextn::cli::register_bench(app);
  nextn::cli::register_make_checkpoint(app);
  nextn::cli::register_tokenize(app);
  nextn::cli::register_detokenize(app);
  nextn::cli::register_serve(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Where a subcommand is required, CLI11 leaves an unknown word (or flag)
    // over and reports only "A subcommand is required": name what was given.
    const CLI::App* at = &app;
    while (!at->get_subcommands().empty()) at = at->get_subcommands().front();
    if (at->get_require_subcommand_min() > 0 && at->get_subcommands().empty() && !at->remaining().empty()) {
      std::string known;
      for (const auto* sub : at->get_subcommands({})) known += (known.empty() ? "" : ", ") + sub->get_name();
      const std::string word = at->remaining().front();
      std::fprintf(stderr, "error: %s%s '%s' (expected one of: %s)\n", at == &app ? "" : (at->get_name() + ": ").c_str(),
                   word.starts_with("-") ? "unknown option" : "unknown command", word.c_str(), known.c_str());
      return 1;
    }
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const nextn::RefusedError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const nextn::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of host memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
