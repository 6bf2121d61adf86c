// `nextn serve` with Gemma 4 checkpoints: pairings that cannot run and
// slots the model cannot hold are refused at start, before it listens, with
// one `error:` line (the serving itself: tests/test_server_engine_gemma4.cpp
// and tests/server/test_openai_client.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "cli_util.h"

namespace nextn {
namespace {

using test::expect_one_error_line;
using test::run_cli;

const std::string kGemma = std::string(NEXTN_FIXTURES) + "/gemma4/";
const std::string kTarget = kGemma + "gemma4-tokenizer-bf16/target";  // the fixture with a tokenizer
const std::string kFits = " --max-prompt-tokens 128 --max-tokens 64 --port 0";

TEST(CliServeGemma4, PairingsThatCannotRunAreOneErrorLine) {
  // Another target's assistant: its backbone is 48 wide, this target 32.
  expect_one_error_line(run_cli("serve -m " + kTarget + " --draft " + kGemma + "gemma4-default-bf16/assistant" + kFits),
                        "backbone_hidden_size");
  expect_one_error_line(run_cli("serve -m " + kTarget + " --draft " + kTarget + kFits), "not a Gemma 4 assistant");
  expect_one_error_line(run_cli("serve -m " + kTarget + " --draft mtp" + kFits), "no MTP head");
  // An assistant as the target (with a tokenizer beside it, which serve reads first).
  const auto assistant_dir = std::filesystem::temp_directory_path() / ("nextn-serve-assistant-" + std::to_string(getpid()));
  std::filesystem::create_directories(assistant_dir);
  for (const auto& e : std::filesystem::directory_iterator(kGemma + "gemma4-tokenizer-bf16/assistant"))
    std::filesystem::copy_file(e.path(), assistant_dir / e.path().filename(),
                               std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(kTarget + "/tokenizer.json", assistant_dir / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  expect_one_error_line(run_cli("serve -m " + assistant_dir.string() + kFits), "gemma4_assistant");
  std::filesystem::remove_all(assistant_dir);
  // A Qwen3.5 target with a Gemma 4 assistant.
  expect_one_error_line(
      run_cli("serve -m " + std::string(NEXTN_SOURCE_DIR) + "/models/default --draft " + kGemma +
              "gemma4-tokenizer-bf16/assistant --port 0"),
      "drafts for a Gemma 4 target");
  // The default limits need 2048 + 1024 + K + 1 positions; the fixture holds 256.
  expect_one_error_line(run_cli("serve -m " + kTarget + " --port 0"), "max_position_embeddings");
}

}  // namespace
}  // namespace nextn
