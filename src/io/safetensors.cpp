#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace nextn {

namespace fs = std::filesystem;
// ordered_json keeps header order, which SafetensorsHeader::tensors promises.
using json = nlohmann::ordered_json;

namespace {

// Headers are a few hundred KB even for huge models; anything past this is
// a corrupt length field, not a header worth allocating for.
constexpr uint64_t kMaxHeaderLen = 100ull << 20;

// Names come from untrusted files: keep messages one line and bounded.
std::string printable(std::string_view s) {
  constexpr size_t kMax = 200;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += char(c);
  }
  if (s.size() > kMax) out += "...";
  return out;
}

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Parses JSON text into `out`, or returns an error description. Duplicate
// keys in any object are an error: nlohmann silently keeps the last one,
// which would let two tensors (or two "dtype"s) shadow each other.
std::optional<std::string> parse_json_strict(const char* begin, const char* end, json& out) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::optional<std::string> dup;
  auto cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start: keys.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && parsed.is_string() && !keys.back().insert(parsed.get_ref<const std::string&>()).second &&
            !dup)
          dup = parsed.get<std::string>();
        break;
      default: break;
    }
    return true;
  };
  // nlohmann stops at a NUL as if at end of input, which would let bytes
  // after it go unchecked. Valid JSON never holds a raw NUL.
  if (const void* nul = std::memchr(begin, 0, size_t(end - begin)))
    return fmt::format("invalid JSON: NUL byte at offset {}", static_cast<const char*>(nul) - begin);
  try {
    out = json::parse(begin, end, cb, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    // nlohmann messages are one line: "[json.exception.parse_error.101] parse error at line 1, ..."
    std::string msg = e.what();
    if (auto p = msg.find("] "); msg.starts_with("[json.exception") && p != std::string::npos) msg = msg.substr(p + 2);
    return "invalid JSON: " + printable(msg);
  }
  if (dup) return fmt::format("duplicate key '{}'", printable(*dup));
  return std::nullopt;
}

// A JSON integer as uint64, or nullopt (negative, float, non-number).
std::optional<uint64_t> as_u64(const json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v >= 0) return uint64_t(v);
  }
  return std::nullopt;
}

TensorEntry parse_entry(const std::string& file, const std::string& name, const json& v, uint64_t data_size) {
  std::string where = fmt::format("{}: tensor '{}'", file, printable(name));
  if (!v.is_object()) fail("{}: entry is a JSON {}, not an object", where, v.type_name());
  TensorEntry e;
  e.name = name;

  auto dt = v.find("dtype");
  if (dt == v.end()) fail("{}: missing \"dtype\"", where);
  if (!dt->is_string()) fail("{}: \"dtype\" is a JSON {}, not a string", where, dt->type_name());
  auto t = dtype_from_name(dt->get_ref<const std::string&>());
  if (!t) fail("{}: unknown dtype '{}'", where, printable(dt->get_ref<const std::string&>()));
  e.dtype = *t;

  auto sh = v.find("shape");
  if (sh == v.end()) fail("{}: missing \"shape\"", where);
  if (!sh->is_array()) fail("{}: \"shape\" is a JSON {}, not an array", where, sh->type_name());
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    auto n = as_u64(d);
    if (!n || *n > uint64_t(INT64_MAX)) fail("{}: shape {} has a dimension that is not a non-negative integer", where, printable(sh->dump()));
    if (*n != 0 && numel > uint64_t(INT64_MAX) / *n) fail("{}: shape {} has more than 2^63 elements", where, printable(sh->dump()));
    numel *= *n;
    e.shape.push_back(int64_t(*n));
  }

  auto off = v.find("data_offsets");
  if (off == v.end()) fail("{}: missing \"data_offsets\"", where);
  if (!off->is_array() || off->size() != 2) fail("{}: \"data_offsets\" must be [begin, end], got {}", where, printable(off->dump()));
  auto b = as_u64((*off)[0]), en = as_u64((*off)[1]);
  if (!b || !en) fail("{}: data_offsets {} are not non-negative integers", where, printable(off->dump()));
  e.begin = *b;
  e.end = *en;
  if (e.begin > e.end) fail("{}: data_offsets begin {} > end {}", where, e.begin, e.end);
  if (e.end > data_size)
    fail("{}: data_offsets end {} is past the data section ({} bytes); file truncated?", where, e.end, data_size);

  size_t esize = dtype_size(e.dtype);
  uint64_t span = e.end - e.begin;
  bool overflow = numel > UINT64_MAX / esize;
  if (overflow || span != numel * esize) {
    std::string need = overflow ? "more than 2^64" : fmt::format("{}", numel * esize);
    fail("{}: data_offsets span {} bytes, but {} {} needs {}", where, span, dtype_name(e.dtype), shape_string(e.shape), need);
  }
  return e;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated at parse time not to overflow
  return n;
}

std::string TensorView::shape_str() const { return shape_string(shape); }

SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t size, const std::string& file) {
  if (size < 8) fail("{}: file is {} bytes, too short for the 8-byte header length; truncated?", file, size);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = hlen << 8 | bytes[i];  // little-endian, byte by byte
  if (hlen < 2) fail("{}: header length {} is too small for a JSON object", file, hlen);
  if (hlen > kMaxHeaderLen) fail("{}: header length {} exceeds the {} byte limit; not a safetensors file?", file, hlen, kMaxHeaderLen);
  if (hlen > size - 8) fail("{}: header length {} runs past the end of the file ({} bytes); truncated?", file, hlen, size);

  SafetensorsHeader h;
  h.data_offset = 8 + hlen;
  const uint64_t data_size = size - h.data_offset;

  json j;
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  if (auto err = parse_json_strict(text, text + hlen, j)) fail("{}: header: {}", file, *err);
  if (!j.is_object()) fail("{}: header is a JSON {}, not an object", file, j.type_name());

  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail("{}: \"__metadata__\" is a JSON {}, not an object", file, it->type_name());
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          fail("{}: \"__metadata__\" value for '{}' is a JSON {}, not a string", file, printable(m.key()), m->type_name());
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(file, it.key(), *it, data_size));
  }

  // No two tensors may share bytes. Empty tensors own no bytes, so skip them.
  std::vector<const TensorEntry*> spans;
  for (const auto& e : h.tensors)
    if (e.end > e.begin) spans.push_back(&e);
  std::sort(spans.begin(), spans.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i]->begin < spans[i - 1]->end)
      fail("{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", file, printable(spans[i]->name),
           spans[i]->begin, spans[i]->end, printable(spans[i - 1]->name), spans[i - 1]->begin, spans[i - 1]->end);
  return h;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (fstat rejects it next).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  size_t size = size_t(st.st_size);
  if (size < 8) {  // mmap of 0 bytes fails; report it as the parser would
    ::close(fd);
    fail("{}: file is {} bytes, too short for the 8-byte header length; truncated?", path, size);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) fail("{}: mmap failed: {}", path, std::strerror(map_errno));

  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = map;  // owned from here: the destructor unmaps even if parsing throws
  f->map_size_ = size;
  const auto* base = static_cast<const uint8_t*>(map);
  SafetensorsHeader h = parse_safetensors_header(base, size, path);
  f->metadata_ = std::move(h.metadata);
  for (auto& e : h.tensors) {
    TensorView v;
    v.name = e.name;
    v.dtype = e.dtype;
    v.shape = std::move(e.shape);
    v.data = base + h.data_offset + e.begin;
    v.nbytes = size_t(e.end - e.begin);
    v.file = &f->path_;  // stable: *f lives on the heap
    f->tensors_.emplace(e.name, std::move(v));
  }
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

namespace {

// Reads model.safetensors.index.json, opens the shards it names and maps
// each listed tensor to its view in the listed shard. The index is
// authoritative (as in transformers): a tensor a shard holds but the index
// does not list is not part of the checkpoint.
void open_indexed(const fs::path& dir, const fs::path& index_path, std::vector<std::unique_ptr<SafetensorsFile>>& files,
                  std::map<std::string, const TensorView*>& index) {
  const std::string ip = index_path.string();
  std::error_code ec;
  if (!fs::is_regular_file(index_path, ec)) fail("{}: not a regular file", ip);  // a FIFO would block the read
  std::ifstream in(index_path, std::ios::binary);
  if (!in) fail("{}: cannot open", ip);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail("{}: read error", ip);
  json j;
  if (auto err = parse_json_strict(text.data(), text.data() + text.size(), j)) fail("{}: {}", ip, *err);
  if (!j.is_object()) fail("{}: is a JSON {}, not an object", ip, j.type_name());
  auto wm = j.find("weight_map");
  if (wm == j.end()) fail("{}: missing \"weight_map\"", ip);
  if (!wm->is_object()) fail("{}: \"weight_map\" is a JSON {}, not an object", ip, wm->type_name());

  std::map<std::string, SafetensorsFile*> shards;  // file name as listed -> opened file
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    const std::string tensor = printable(it.key());
    if (!it->is_string()) fail("{}: tensor '{}': shard is a JSON {}, not a string", ip, tensor, it->type_name());
    const std::string& shard = it->get_ref<const std::string&>();
    fs::path rel(shard);
    // Shards live next to the index: refuse paths that would escape the directory.
    bool escapes = shard.empty() || rel.is_absolute() ||
                   std::any_of(rel.begin(), rel.end(), [](const fs::path& c) { return c == ".."; });
    if (escapes) fail("{}: tensor '{}': shard '{}' is not a file name inside {}", ip, tensor, printable(shard), dir.string());
    auto found = shards.find(shard);
    if (found == shards.end()) {
      fs::path sp = dir / rel;
      std::error_code ec;
      if (!fs::is_regular_file(sp, ec))
        fail("{}: tensor '{}' is mapped to '{}', which does not exist", ip, tensor, printable(shard));
      files.push_back(SafetensorsFile::open(sp.string()));
      found = shards.emplace(shard, files.back().get()).first;
    }
    auto view = found->second->tensors().find(it.key());
    if (view == found->second->tensors().end())
      fail("{}: tensor '{}' is mapped to '{}', which does not contain it", ip, tensor, printable(shard));
    index.emplace(it.key(), &view->second);
  }
}

}  // namespace

TensorStore TensorStore::open(const std::string& path) {
  TensorStore s;
  s.path_ = path;
  std::error_code ec;
  fs::path p(path);
  if (fs::is_directory(p, ec)) {
    fs::path index = p / "model.safetensors.index.json";
    fs::path single = p / "model.safetensors";
    if (fs::exists(index, ec)) {
      open_indexed(p, index, s.files_, s.index_);
      return s;
    } else if (fs::exists(single, ec)) {
      s.files_.push_back(SafetensorsFile::open(single.string()));
    } else {
      std::vector<fs::path> found;
      for (const auto& de : fs::directory_iterator(p, ec))
        if (de.path().extension() == ".safetensors") found.push_back(de.path());
      if (ec) fail("{}: cannot list directory: {}", path, ec.message());
      if (found.empty()) fail("{}: no model.safetensors.index.json, model.safetensors or *.safetensors", path);
      std::sort(found.begin(), found.end());
      for (const auto& f : found) s.files_.push_back(SafetensorsFile::open(f.string()));
    }
  } else if (fs::exists(p, ec)) {
    s.files_.push_back(SafetensorsFile::open(path));
  } else {
    fail("{}: no such file or directory", path);
  }

  for (const auto& f : s.files_)
    for (const auto& [name, view] : f->tensors()) {
      auto [it, inserted] = s.index_.emplace(name, &view);
      if (!inserted)
        fail("{}: tensor '{}' is in both {} and {}", path, printable(name), *it->second->file, f->path());
    }
  return s;
}

TensorStore TensorStore::in_memory(const std::string& label, std::vector<TensorView> views,
                                   std::shared_ptr<const void> memory) {
  TensorStore s;
  s.path_ = label;
  s.label_ = std::make_shared<const std::string>(label);
  s.memory_ = std::move(memory);
  s.views_ = std::move(views);  // not resized again: index_ points into it
  for (TensorView& v : s.views_) {
    v.file = s.label_.get();
    if (!s.index_.emplace(v.name, &v).second) fail("{}: tensor '{}' given twice", label, printable(v.name));
  }
  return s;
}

const TensorView* TensorStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& TensorStore::get(const std::string& name) const {
  if (const TensorView* v = find(name)) return *v;
  fail("{}: missing tensor {}", path_, printable(name));
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, v] : index_) out.push_back(name);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });

  nlohmann::json header = nlohmann::json::object();  // sorted keys
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TensorToWrite& t = *sorted[i];
    if (t.name == "__metadata__") fail("{}: tensor name '__metadata__' is reserved", path);
    if (i > 0 && sorted[i - 1]->name == t.name) fail("{}: tensor '{}' written twice", path, printable(t.name));
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail("{}: tensor '{}': negative dimension in shape {}", path, printable(t.name), shape_string(t.shape));
      if (d != 0 && numel > uint64_t(INT64_MAX) / uint64_t(d))
        fail("{}: tensor '{}': shape {} is too large", path, printable(t.name), shape_string(t.shape));
      numel *= uint64_t(d);
    }
    if (numel * dtype_size(t.dtype) != t.nbytes)
      fail("{}: tensor '{}': {} bytes given, but {} {} needs {}", path, printable(t.name), t.nbytes, dtype_name(t.dtype),
           shape_string(t.shape), numel * dtype_size(t.dtype));
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  // json::object keys sort like std::string, so data order == name order.
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not UTF-8
    fail("{}: cannot encode header: {}", path, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-aligned

  // Write beside the target and rename, so a failed write never leaves a
  // truncated file under the real name.
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("{}: cannot create: {}", tmp, std::strerror(errno));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const auto* t : sorted)
      if (t->nbytes) out.write(static_cast<const char*>(t->data), std::streamsize(t->nbytes));
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      fail("{}: write failed", tmp);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) fail("{}: cannot rename to {}: {}", tmp, path, ec.message());
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace nextn
