#include "io/config_json.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace nextn::config_json {

ConfigFiles read_config_files(const std::string& dir) {
  namespace fs = std::filesystem;
  auto read = [](const fs::path& p, std::string& out) {
    std::ifstream f(p, std::ios::binary);
    if (!f) return false;
    std::ostringstream ss;
    ss << f.rdbuf();
    out = ss.str();
    return true;
  };
  ConfigFiles files;
  const fs::path cfg = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(cfg, ec) || !read(cfg, files.config)) fail("{}: cannot read config.json", dir);
  files.config_path = cfg.string();
  const fs::path gen = fs::path(dir) / "generation_config.json";
  if (fs::exists(gen, ec) && !fs::is_regular_file(gen, ec)) fail("{}: not a regular file", gen.string());
  if (fs::is_regular_file(gen, ec)) {
    std::string text;
    if (!read(gen, text)) fail("{}: cannot read", gen.string());
    files.generation = std::move(text);
    files.generation_path = gen.string();
  }
  return files;
}

}  // namespace nextn::config_json
