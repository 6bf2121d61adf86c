// A bad-input sweep of the whole CLI: every subcommand and its flags with
// missing, empty, negative, huge, non-numeric and duplicated values,
// non-UTF-8 paths, directories where files are expected and files nobody can
// read (FIFOs, dangling links: the tests run as root, where chmod 000 does
// not stop a read). Each case must print exactly one `error: ` line naming
// the flag, value or file, exit 1 and not hang (`timeout`). `make asan` runs
// it under ASan/UBSan, where any sanitizer report breaks the one-line rule.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using test::run_cli;

const std::string kFixture = std::string(NEXTN_FIXTURES) + "/qwen35-causal-tied";

// A case: arguments with placeholders, and text the error line must contain.
//   {M}     a valid model directory          {FIFO}  a FIFO
//   {DIR}   an empty directory               {FILE}  a regular non-model file
//   {BAD8}  a path that is not UTF-8         {DANGLE} a dangling symlink
//   {CFGDIR} a model whose config.json is a directory
//   {CFGFIFO} a model whose config.json is a FIFO
//   {STFIFO} a model whose model.safetensors is a FIFO
//   {IDXFIFO} a model whose model.safetensors.index.json is a FIFO
//   {GENDIR} a model whose generation_config.json is a directory
//   {STDIR} a directory named x.safetensors
struct Case {
  std::string args;
  std::string needle;
};

// Each stays within the flags and files the subcommand owns; none of them
// may start real work (they all fail before any model is loaded or written).
const std::vector<Case> kCases = {
    // ---- top level ----
    {"", "A subcommand is required"},
    {"frobnicate", "frobnicate"},
    {"--no-such-flag", "unknown option '--no-such-flag'"},

    // ---- inspect ----
    {"inspect", "PATH"},
    {"inspect ''", "PATH"},
    {"inspect '{BAD8}'", "no such file"},
    {"inspect '{FIFO}'", "not a regular file"},
    {"inspect '{DANGLE}'", "no such file"},
    {"inspect '{DIR}'", "no model.safetensors"},
    {"inspect '{STDIR}'", "no model.safetensors"},
    {"inspect '{FILE}'", "{FILE}: header length"},
    {"inspect '{CFGDIR}'", "config.json: not a regular file"},
    {"inspect '{CFGFIFO}'", "config.json: not a regular file"},
    {"inspect '{STFIFO}'", "not a regular file"},
    {"inspect '{IDXFIFO}'", "not a regular file"},
    {"inspect '{GENDIR}'", "generation_config.json: not a regular file"},
    {"inspect {M} {M}", "{M}"},

    // ---- quantize ----
    {"quantize", "-m/--model is required"},
    {"quantize -m", "-m"},
    {"quantize -m '' -o '{T}/q1'", "-m/--model is required"},
    {"quantize -m {M}", "-o/--output is required"},
    {"quantize -m {M} -o ''", "-o/--output is required"},
    {"quantize -m {M} -o '{T}/q2' --bits", "--bits"},
    {"quantize -m {M} -o '{T}/q2' --bits ''", "--bits"},
    {"quantize -m {M} -o '{T}/q2' --bits -4", "--bits"},
    {"quantize -m {M} -o '{T}/q2' --bits 99999999999999999999", "--bits"},
    {"quantize -m {M} -o '{T}/q2' --bits four", "--bits"},
    {"quantize -m {M} -o '{T}/q2' --bits 4 --bits 8", "--bits"},
    {"quantize -m {M} -o '{T}/q2' --group-size -64", "--group-size"},
    {"quantize -m {M} -o '{T}/q2' --group-size 0", "--group-size"},
    {"quantize -m {M} -o '{T}/q2' --group-size 4294967360", "--group-size"},
    {"quantize -m {M} -o '{T}/q2' --group-size 64.5", "--group-size"},
    {"quantize -m {M} -m {M} -o '{T}/q2'", "-m"},
    {"quantize -m {M} -o '{T}/q2' -o '{T}/q3'", "-o"},
    {"quantize -m '{BAD8}' -o '{T}/q2'", "cannot read config.json"},
    {"quantize -m '{FIFO}' -o '{T}/q2'", "cannot read config.json"},
    {"quantize -m '{FILE}' -o '{T}/q2'", "cannot read config.json"},
    {"quantize -m '{CFGDIR}' -o '{T}/q2'", "cannot read config.json"},
    {"quantize -m '{STFIFO}' -o '{T}/q2'", "not a regular file"},
    {"quantize -m {M} -o '{FILE}'", "{FILE}"},
    {"quantize -m {M} -o '{FIFO}'", "{FIFO}"},

    // ---- make-checkpoint (every case fails before anything is written) ----
    {"make-checkpoint", "--preset is required"},
    {"make-checkpoint --preset '' -o '{T}/mc'", "--preset is required"},
    {"make-checkpoint --preset nope -o '{T}/mc'", "unknown --preset 'nope'"},
    {"make-checkpoint --preset test-tiny", "--out is required"},
    {"make-checkpoint --preset test-tiny -o ''", "--out is required"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --quant q3", "--quant"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --quant ''", "--quant"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --seed -1", "--seed"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --seed ''", "--seed"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --threads ''", "--threads"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --shard-gb ''", "--shard-gb"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --shard-gb 1e-300", "--shard-gb"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --seed 99999999999999999999999", "--seed"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --seed x", "--seed"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --shard-gb -1", "--shard-gb"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --shard-gb 0", "--shard-gb"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --shard-gb nan", "--shard-gb"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --shard-gb inf", "--shard-gb"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --shard-gb 1e300", "--shard-gb"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --shard-gb many", "--shard-gb"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --threads -1", "--threads"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --threads 99999999999", "--threads"},
    {"make-checkpoint --preset test-tiny -o '{T}/mc' --threads x", "--threads"},
    {"make-checkpoint --preset test-tiny --preset test-tiny -o '{T}/mc'", "--preset"},
    {"make-checkpoint --preset test-tiny -o '{FILE}'", "{FILE}"},

    // ---- draft-trace ----
    {"draft-trace -m {M}", "--prompt-ids"},
    {"draft-trace -m {M} --prompt-ids", "--prompt-ids"},
    {"draft-trace -m {M} --prompt-ids ''", "--prompt-ids"},
    {"draft-trace -m {M} --prompt-ids 1", "at least 2"},
    {"draft-trace -m {M} --prompt-ids 1,-2", "--prompt-ids"},
    {"draft-trace -m {M} --prompt-ids 1,,2", "--prompt-ids"},
    {"draft-trace -m {M} --prompt-ids 1,", "--prompt-ids"},
    {"draft-trace -m {M} --prompt-ids 1,99999999999", "--prompt-ids"},
    {"draft-trace -m {M} --prompt-ids 1,x", "--prompt-ids"},
    {"draft-trace -m {M} --prompt-ids 1,2.5", "--prompt-ids"},
    {"draft-trace -m {M} --prompt-ids 1,999999", "outside the vocabulary"},
    {"draft-trace -m {M} --prompt-ids 1,2 --prompt-ids 3,4", "--prompt-ids"},
    {"draft-trace -m {M} --prompt-ids 1,2 --draft ''", "--draft"},
    {"draft-trace -m {M} --prompt-ids 1,2 --draft none", "--draft"},
    {"draft-trace -m {M} --prompt-ids 1,2 --draft '{DIR}'", "cannot read config.json"},
    {"draft-trace -m {M} --prompt-ids 1,2 --draft '{CFGFIFO}'", "cannot read config.json"},
    {"draft-trace -m {M} --prompt-ids 1,2 --backend ''", "--backend"},
    {"draft-trace -m {M} --prompt-ids 1,2 --backend tpu", "--backend"},
    {"draft-trace -m '' --prompt-ids 1,2 --backend tpu", "--backend"},
    {"draft-trace -m '{BAD8}' --prompt-ids 1,2", "cannot read config.json"},
    {"draft-trace -m '{DIR}' --prompt-ids 1,2", "cannot read config.json"},
    {"draft-trace -m '{CFGFIFO}' --prompt-ids 1,2", "cannot read config.json"},
    {"draft-trace -m '{STFIFO}' --prompt-ids 1,2", "not a regular file"},
    {"draft-trace -m {M} -m {M} --prompt-ids 1,2", "-m"},
    {"draft-trace -m {M} --prompt-ids 1,2 --act fp16", "--act 'fp16'"},

    // ---- generate ----
    {"generate -m {M}", "--prompt-ids"},
    {"generate -m {M} --prompt-ids", "--prompt-ids"},
    {"generate -m {M} --prompt-ids ''", "--prompt-ids"},
    {"generate -m {M} --prompt-ids 1,-2", "--prompt-ids"},
    {"generate -m {M} --prompt-ids 1,,2", "--prompt-ids"},
    {"generate -m {M} --prompt-ids x", "--prompt-ids"},
    {"generate -m {M} --prompt-ids 99999999999", "--prompt-ids"},
    {"generate -m {M} --prompt-ids 999999", "outside the vocabulary"},
    {"generate -m {M} --prompt-ids 1 -n", "-n"},
    {"generate -m {M} --prompt-ids 1 -n -1", "-n"},
    {"generate -m {M} --prompt-ids 1 -n 99999999999", "-n"},
    {"generate -m {M} --prompt-ids 1 -n x", "-n"},
    {"generate -m {M} --prompt-ids 1 -n 1 -n 2", "-n"},
    {"generate -m {M} --prompt-ids 1 --prefill-chunk 0", "--prefill-chunk 0"},
    {"generate -m {M} --prompt-ids 1 --prefill-chunk -3", "--prefill-chunk -3"},
    {"generate -m {M} --prompt-ids 1 --prefill-chunk x", "--prefill-chunk"},
    {"generate -m {M} --prompt-ids 1 --prefill-chunk 99999999999", "--prefill-chunk"},
    {"generate -m {M} --prompt-ids 1 -n 5000", "max_position_embeddings is 4096"},
    {"generate -m {M} --prompt-ids 1 -n 2147483647", "more than a runtime holds"},
    {"generate -m {M} --prompt-ids 1 -n 2147483647 --draft mtp", "more than a runtime holds"},
    {"generate -m {M} --prompt-ids 1 --draft ''", "--draft"},
    {"generate -m {M} --prompt-ids 1 --draft bogus", "--draft"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --block-size 0", "--block-size"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --block-size -3", "--block-size"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --block-size 65", "--block-size"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --block-size 99999999999", "--block-size"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --block-size x", "--block-size"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --verify ''", "--verify"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --verify bogus", "--verify"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --verify pad --pad-width -1", "--pad-width"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --verify pad --pad-width 65", "--pad-width"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --verify pad --pad-width x", "--pad-width"},
    {"generate -m {M} --prompt-ids 1 --draft oracle --accept-rate -0.5", "--accept-rate"},
    {"generate -m {M} --prompt-ids 1 --draft oracle --accept-rate 2", "--accept-rate"},
    {"generate -m {M} --prompt-ids 1 --draft oracle --accept-rate nan", "--accept-rate"},
    {"generate -m {M} --prompt-ids 1 --draft oracle --accept-rate x", "--accept-rate"},
    {"generate -m {M} --prompt-ids 1 --draft oracle --accept-pattern ''", "--accept-pattern"},
    {"generate -m {M} --prompt-ids 1 --draft oracle --accept-pattern 12", "--accept-pattern"},
    {"generate -m {M} --prompt-ids 1 --draft oracle --accept-rate 0.5 --seed x", "--seed"},
    {"generate -m {M} --prompt-ids 1 --backend ''", "--backend"},
    // the runtime options (core/options.h); the bench-only ones are not generate's
    {"generate -m {M} --prompt-ids 1 --act ''", "--act ''"},
    {"generate -m {M} --prompt-ids 1 --act fp16", "--act 'fp16'"},
    {"generate -m {M} --prompt-ids 1 --act bf16 --act fp32", "--act"},
    {"generate -m {M} --prompt-ids 1 --fp8-matmul w4a8", "--fp8-matmul 'w4a8'"},
    {"generate -m {M} --prompt-ids 1 --fp8-matmul w8a8", "--fp8-matmul w8a8: the CPU backend"},
    {"generate -m {M} --prompt-ids 1 --backend cuda --act fp32 --fp8-matmul w8a8", "--fp8-matmul w8a8: --act fp32"},
    {"serve --fp8-matmul w8a8", "--fp8-matmul w8a8: the CPU backend"},
    {"generate -m {M} --prompt-ids 1 --threads 0", "--threads"},
    {"generate -m {M} --prompt-ids 1 --graphs off", "--graphs"},
    {"generate -m {M} --prompt-ids 1 --pdl off", "--pdl"},
    {"generate -m {M} --prompt-ids 1 --prefill chunked", "--prefill"},
    {"generate -m {M} --prompt-ids 1 --fault walk-as-batched", "--fault"},
    {"generate -m '{BAD8}' --prompt-ids 1", "cannot read config.json"},
    {"generate -m '{FILE}' --prompt-ids 1", "cannot read config.json"},
    {"generate -m '{CFGDIR}' --prompt-ids 1", "cannot read config.json"},
    {"generate -m '{STFIFO}' --prompt-ids 1", "not a regular file"},
    {"generate -m '{IDXFIFO}' --prompt-ids 1", "not a regular file"},
    {"generate -m '{GENDIR}' --prompt-ids 1", "generation_config.json"},

    // ---- serve (each fails before it listens) ----
    {"serve --draft oracle", "--draft oracle needs --accept-rate"},
    {"serve --draft oracle --accept-rates 0.9,2", "--accept-rates"},
    {"serve --draft oracle --accept-rates ''", "--accept-rates"},
    {"serve --draft oracle --accept-rate 0.5 --accept-pattern 10", "exclusive"},
    {"serve --draft oracle --accept-rate 0.5 --draft-cost gpu", "--draft-cost 'gpu'"},
    {"serve --draft mtp --accept-rate 0.5", "--draft oracle only"},
    {"serve --draft mtp --draft-cost mtp", "--draft-cost applies to --draft oracle only"},
    {"serve --draft oracle --accept-rate 0.5 --draft-cost '{DIR}'", "applies to a Gemma 4 target"},
    {"serve --draft mtp --block-size x", "--block-size 'x'"},
    {"serve --draft mtp --block-size auto8", "--block-size"},
    {"generate --prompt-ids 1 --draft mtp --block-size 0", "--block-size 0"},
    {"generate --prompt-ids 1 --block-size auto", "--block-size applies to a drafter only"},
    {"serve --draft '{DIR}'", "--draft"},
    {"serve --block-size 3", "--block-size applies to a drafter only"},
    {"serve --draft mtp --block-size 1", "--block-size 1"},
    {"serve --port 70000", "--port 70000"},
    {"serve --port -1", "--port -1"},
    {"serve --port x", "--port"},
    {"serve --max-tokens 0", "--max-tokens 0"},
    {"serve --max-prompt-tokens -5", "--max-prompt-tokens -5"},
    {"serve --queue-depth 0", "--queue-depth 0"},
    {"serve --max-batch 0", "--max-batch 0"},
    {"serve --prefill-chunk 0", "--prefill-chunk 0"},
    {"serve --prefill-chunk x", "--prefill-chunk"},
    {"serve --prefill-stall 1", "--prefill-stall 1"},
    {"serve --prefill-stall 0.5", "--prefill-stall 0.5"},
    {"serve --prefill-stall -2", "--prefill-stall -2"},
    {"serve --prefill-stall x", "--prefill-stall"},
    {"serve --prefill-stall inf", "--prefill-stall"},
    {"serve --max-body-kib 0", "--max-body-kib 0"},
    {"serve --max-body-kib 99999999999", "--max-body-kib"},
    {"serve --backend tpu", "--backend"},
    {"serve --act fp64", "--act 'fp64'"},
    {"serve --walk while", "--walk"},
    {"serve -m '{DIR}'", "tokenizer.json"},
    {"serve --max-prompt-tokens 4000", "max_position_embeddings"},
    {"serve --host 999.1.1.1 --port 0", "--host 999.1.1.1"},
    {"serve --max-connections 0", "--max-connections 0"},
    {"serve --header-timeout 0", "--header-timeout 0"},
    {"serve --body-timeout -1", "--body-timeout -1"},
    {"serve --idle-timeout 99999", "--idle-timeout 99999"},
    {"serve --write-timeout x", "--write-timeout"},
    {"serve --drain-timeout -2", "--drain-timeout -2"},

    // ---- bench ----
    {"bench", "subcommand"},
    {"bench frobnicate", "bench: unknown command 'frobnicate'"},
    {"bench --no-such-flag", "bench: unknown option '--no-such-flag'"},
    {"bench decode -m {M} --prompt-len -1", "--prompt-len"},
    {"bench decode -m {M} --prompt-len 0", "--prompt-len"},
    {"bench decode -m {M} --prompt-len 99999999999", "--prompt-len"},
    {"bench decode -m {M} --prompt-len x", "--prompt-len"},
    {"bench decode -m {M} -n -1", "-n"},
    {"bench decode -m {M} -n x", "-n"},
    {"bench decode -m {M} -n 2147483647 --repeats 1", "more than a runtime holds"},
    {"bench decode -m {M} --prompt-len 5000 --repeats 1", "max_position_embeddings is 4096"},
    {"bench decode -m {M} -n '' --repeats 1", "-n"},
    {"bench decode -m {M} --repeats 0", "--repeats"},
    {"bench decode -m {M} --repeats -1", "--repeats"},
    {"bench decode -m {M} --backend ''", "--backend"},
    {"bench decode -m '{CFGFIFO}'", "cannot read config.json"},
    {"bench decode -m {M} --act x", "--act 'x'"},
    {"bench decode -m {M} --graphs ''", "--graphs ''"},
    {"bench decode -m {M} --graphs 0", "--graphs '0'"},
    {"bench decode -m {M} --pdl sometimes", "--pdl 'sometimes'"},
    {"bench decode -m {M} --pdl forward_multi", "--pdl 'forward_multi'"},
    {"bench decode -m {M} --prefill split", "--prefill 'split'"},
    {"bench decode -m {M} --prefill gemm --prefill chunked", "--prefill"},
    {"bench decode -m {M} --fault walk-as-batched", "--fault"},
    {"bench verify -m {M} --block-sizes ''", "--block-sizes"},
    {"bench verify -m {M} --block-sizes 1", "--block-size"},
    {"bench verify -m {M} --block-sizes 65", "--block-size"},
    {"bench verify -m {M} --block-sizes 3,,4", "--block-sizes"},
    {"bench verify -m {M} --block-sizes 3,x", "--block-sizes"},
    {"bench verify -m {M} --block-sizes -3", "--block-sizes"},
    {"bench verify -m {M} --verify ''", "--verify"},
    {"bench verify -m {M} --verify batched,,walk", "--verify"},
    {"bench verify -m {M} --verify bogus", "--verify"},
    {"bench verify -m {M} --draft bogus", "--draft"},
    {"bench verify -m {M} --repeats 0", "--repeats"},
    {"bench verify -m {M} --repeats x", "--repeats"},
    {"bench verify -m {M} -n -1", "-n"},
    {"bench verify -m {M} -n '' --repeats 1", "-n"},
    {"bench verify -m {M} --prompt-ids ''", "--prompt-ids"},
    {"bench verify -m {M} --prompt-ids 1,-1", "--prompt-ids"},
    {"bench verify -m {M} --draft oracle --accept-rate 7", "--accept-rate"},
    {"bench verify -m {M} --backend ''", "--backend"},
    {"bench verify -m {M} --walk run", "--walk 'run'"},
    {"bench verify -m {M} --walk ''", "--walk ''"},
    {"bench verify -m {M} --fault bogus", "--fault 'bogus'"},
    {"bench verify -m {M} --fault ''", "--fault ''"},
    {"bench verify -m {M} --pdl x", "--pdl 'x'"},
    {"bench projection --shape ''", "--shape"},
    {"bench projection --shape 0x5120", "0x5120"},
    {"bench projection --shape -1x5120", "-1x5120"},
    {"bench projection --shape 248320x", "248320x"},
    {"bench projection --quant ''", "--quant"},
    {"bench projection --quant q3", "q3"},
    {"bench projection --widths ''", "--widths"},
    {"bench projection --widths 1,,2", "--widths"},
    {"bench projection --widths x", "--widths"},
    {"bench projection --splits -1", "--splits"},
    {"bench projection --fold silu", "--fold"},
    {"bench projection --fold norm --argmax", "--argmax"},
    {"bench chain --preset qwen3.5-35b-a3b", "qwen3.5-35b-a3b"},
    {"bench chain --preset ''", "--preset"},
    {"bench chain --layers 65", "--layers"},
    {"bench chain --layers -1", "--layers"},
    {"bench chain --layers x", "--layers"},
    {"bench chain --quant fp8", "--quant"},
    {"bench chain --links all", "--links"},
    {"bench chain --rows 9", "--rows"},
    {"bench chain --rows 0", "--rows"},
    {"bench chain --rows ''", "--rows"},
    {"bench chain --repeats 0", "--repeats"},
};

// generate and bench: an empty value read as 0, a negative seed read as
// 2^64 - 1, a negative length accepted (the validators of tools/cli_common.h).
const std::vector<Case> kGenerateAndBenchCases = {
    {"generate -m {M} --prompt-ids 1 -n ''", "-n"},
    {"generate -m {M} --prompt-ids 1 --draft oracle --accept-rate 0.5 --seed -1", "--seed"},
    {"bench decode -m {M} --prefill-len -1", "--prefill-len"},
    {"generate -m {M} --prompt-ids 1 --draft oracle --accept-rate 0.5 --seed ''", "--seed"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --verify pad --pad-width ''", "--pad-width"},
    {"generate -m {M} --prompt-ids 1 --draft mtp --block-size ''", "--block-size"},
    {"bench decode -m {M} --prefill-len '' --repeats 1", "--prefill-len"},
    {"bench verify -m {M} --draft oracle --accept-rate 0.5 --seed -1 --repeats 1", "--seed"},
};

// bench projection's flags are checked before the build's CUDA support, so
// they read the same with or without it.
const std::vector<Case> kProjectionCases = {
    {"bench projection --shape 99999999999x5120", "99999999999x5120"},
    {"bench projection --group-size 48", "--group-size"},
    {"bench projection --group-size -64", "--group-size"},
    {"bench projection --widths 0", "--widths"},
    {"bench projection --widths 65", "--widths"},
    {"bench projection --repeats 0", "--repeats"},
    {"bench projection --repeats -1", "--repeats"},
    {"bench projection --splits ''", "--splits"},
    {"bench projection --stream-per-sm 4", "--stream-per-sm"},
    {"bench projection --stream-per-sm -1", "--stream-per-sm"},
    {"bench projection --stream-per-sm ''", "--stream-per-sm"},
    {"bench projection --stream-stages 1", "--stream-stages"},
    {"bench projection --stream-stages 13", "--stream-stages"},
    {"bench projection --stream-stages x", "--stream-stages"},
};

// The files and directories the placeholders name, made once.
class CliBadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new test::TempDir();
    const fs::path r = root_->path;
    ASSERT_TRUE(fs::exists(kFixture)) << kFixture << " is committed; a missing fixture is a failure";
    fs::create_directories(r / "empty");
    fs::create_directories(r / "x.safetensors");
    std::ofstream(r / "plain.txt") << "not a model\n";
    ASSERT_EQ(::mkfifo((r / "fifo").c_str(), 0600), 0);
    fs::create_symlink(r / "nowhere", r / "dangling");
    auto model_with = [&](const std::string& name, const std::string& replaced, bool as_fifo) {
      const fs::path d = r / name;
      fs::create_directories(d);
      for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
        if (replaced != f && fs::exists(fs::path(kFixture) / f)) fs::copy_file(fs::path(kFixture) / f, d / f);
      if (as_fifo) {
        ASSERT_EQ(::mkfifo((d / replaced).c_str(), 0600), 0);
      } else {
        fs::create_directories(d / replaced);
      }
    };
    model_with("cfgdir", "config.json", false);
    model_with("cfgfifo", "config.json", true);
    model_with("stfifo", "model.safetensors", true);
    model_with("idxfifo", "model.safetensors.index.json", true);
    model_with("gendir", "generation_config.json", false);
  }
  static void TearDownTestSuite() {
    delete root_;
    root_ = nullptr;
  }

  static std::string expand(std::string s) {
    const fs::path r = root_->path;
    const std::vector<std::pair<std::string, std::string>> subs = {
        {"{M}", kFixture},
        {"{T}", r.string()},
        {"{DIR}", (r / "empty").string()},
        {"{STDIR}", (r / "x.safetensors").string()},
        {"{FILE}", (r / "plain.txt").string()},
        {"{FIFO}", (r / "fifo").string()},
        {"{DANGLE}", (r / "dangling").string()},
        {"{BAD8}", (r / "caf\xe9-\xff\xfe").string()},
        {"{CFGDIR}", (r / "cfgdir").string()},
        {"{CFGFIFO}", (r / "cfgfifo").string()},
        {"{STFIFO}", (r / "stfifo").string()},
        {"{IDXFIFO}", (r / "idxfifo").string()},
        {"{GENDIR}", (r / "gendir").string()},
    };
    for (const auto& [key, value] : subs)
      for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p + value.size()))
        s.replace(p, key.size(), value);
    return s;
  }

  static test::TempDir* root_;
};

test::TempDir* CliBadInput::root_ = nullptr;

void expect_each_one_error_line(const std::vector<Case>& cases, const std::function<std::string(std::string)>& expand) {
  for (const Case& c : cases) {
    const std::string args = expand(c.args);
    SCOPED_TRACE("nextn " + args);
    // timeout: a FIFO opened for reading waits for a writer forever.
    const test::CliResult r = run_cli(args, "timeout 60");
    EXPECT_EQ(r.code, 1) << r.err;
    const auto lines = r.err_lines();
    if (lines.size() != 1) {
      ADD_FAILURE() << lines.size() << " stderr lines:\n" << r.err;
      continue;
    }
    EXPECT_TRUE(lines[0].starts_with("error: ")) << lines[0];
    const std::string needle = expand(c.needle);
    EXPECT_NE(lines[0].find(needle), std::string::npos) << "expected '" << needle << "' in: " << lines[0];
  }
}

TEST_F(CliBadInput, EveryCaseIsOneErrorLineAndExitOne) {
  expect_each_one_error_line(kCases, expand);
  // Nothing was written where a case was refused.
  for (const char* out : {"q1", "q2", "q3", "mc"}) EXPECT_FALSE(fs::exists(root_->path / out)) << out;
}

TEST_F(CliBadInput, GenerateAndBenchNumbers) { expect_each_one_error_line(kGenerateAndBenchCases, expand); }

TEST_F(CliBadInput, ProjectionFlagsBeforeTheCudaCheck) { expect_each_one_error_line(kProjectionCases, expand); }

// An open-file limit too small for the connection cap: an explicit cap is
// refused by name; the default one is lowered to fit, with a note, and the
// server serves (SIGINT after 3 s drains and exits 0).
TEST_F(CliBadInput, ServeConnectionCapAgainstTheOpenFileLimit) {
  test::CliResult r = run_cli("serve --port 0 --max-connections 2048", "ulimit -n 300;");
  test::expect_one_error_line(r, "--max-connections 2048: the open-file limit is 300");
  r = run_cli("serve --port 0", "ulimit -n 300; timeout --preserve-status -s INT 3");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("the open-file limit (hard) holds 44 connections, not the default 2048"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("listening on"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nextn
