#include "tokenizer/model_tokenizer.h"

#include <filesystem>

#include "core/error.h"

namespace nextn::tok {

std::string tokenizer_path(const std::string& model_dir) {
  return (std::filesystem::path(model_dir) / "tokenizer.json").string();
}

Tokenizer load_model_tokenizer(const std::string& model_dir, const std::string& why) {
  const std::string path = tokenizer_path(model_dir);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("{}: not found ({} needs the model's tokenizer)", path, why);
  return Tokenizer::load(path);
}

std::optional<Tokenizer> load_model_tokenizer_if_present(const std::string& model_dir) {
  const std::string path = tokenizer_path(model_dir);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  return Tokenizer::load(path);
}

}  // namespace nextn::tok
