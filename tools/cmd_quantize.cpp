// nextn quantize: rewrite a checkpoint as MLX affine (Qwen3.5: the mlx-community
// layout; Gemma 4 target or assistant: its stored names).
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "io/quantize.h"

namespace nextn::cli {

void register_quantize(CLI::App& app) {
  struct Opts {
    std::string model, out;
    int bits = 4, group = 64;
  };
  auto opts = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("quantize", "Quantize a checkpoint to MLX affine (bits 4/8, group 32/64/128)");
  cmd->add_option("-m,--model", opts->model, "Input checkpoint directory (Qwen3.5 or Gemma 4, HF or mlx layout, dense weights)");
  cmd->add_option("-o,--output", opts->out, "Output directory (created; must not hold safetensors)");
  cmd->add_option("--bits", opts->bits, "Bits per weight: 4 or 8 (default 4)");
  cmd->add_option("--group-size", opts->group, "Quantization group size: 32, 64 or 128 (default 64)");
  cmd->callback([opts] {
    if (opts->model.empty()) fail("quantize: -m/--model is required");
    if (opts->out.empty()) fail("quantize: -o/--output is required");
    if (opts->bits != 4 && opts->bits != 8) fail("quantize: --bits {} is not supported (supported: 4, 8)", opts->bits);
    if (opts->group != 32 && opts->group != 64 && opts->group != 128)
      fail("quantize: --group-size {} is not supported (supported: 32, 64, 128)", opts->group);
    const QuantizeReport r = quantize_checkpoint(opts->model, opts->out, {opts->bits, opts->group});
    std::printf("quantized %d matrices to %d-bit affine, group %d; %d norms shifted to 1+w; %d tensors kept as stored; "
                "%d dropped\n",
                r.quantized, opts->bits, opts->group, r.shifted_norms, r.kept, r.dropped);
    if (!r.unquantizable.empty()) {
      std::printf("kept dense, input size not a multiple of %d: %zu matrices", opts->group, r.unquantizable.size());
      for (size_t i = 0; i < r.unquantizable.size() && i < 4; ++i)
        std::printf("%s %s", i ? "," : ":", r.unquantizable[i].c_str());
      std::printf("%s\n", r.unquantizable.size() > 4 ? ", ..." : "");
    }
    std::printf("wrote %s (%.1f MiB)\n", r.out_file.c_str(), double(r.bytes_out) / (1024.0 * 1024.0));
    for (const auto& f : r.copied_files) std::printf("copied %s\n", f.c_str());
  });
}

}  // namespace nextn::cli
