// The tokenizer of a model directory: DIR/tokenizer.json.
#pragma once
#include <optional>
#include <string>

#include "tokenizer/tokenizer.h"

namespace nextn::tok {

std::string tokenizer_path(const std::string& model_dir);
// Loads DIR/tokenizer.json; a missing file is an error naming it and `why`
// (what needed the tokenizer, e.g. "--prompt").
Tokenizer load_model_tokenizer(const std::string& model_dir, const std::string& why);
// Loads DIR/tokenizer.json when it exists (a present but invalid file is still an error).
std::optional<Tokenizer> load_model_tokenizer_if_present(const std::string& model_dir);

}  // namespace nextn::tok
