// safetensors reader: mmap'd files, every header field validated, errors
// naming the file and the tensor. A TensorStore is one checkpoint: a single
// file, or shards listed by model.safetensors.index.json.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace nextn {

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // may be misaligned: read with load_unaligned / load_float
  size_t nbytes = 0;
  const std::string* file = nullptr;  // the file it lives in, for error messages

  int64_t numel() const;
  std::string shape_str() const;  // "[248320, 5120]"
};

struct TensorEntry {  // a parsed header entry, before it is tied to mapped bytes
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // in header order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
};

// Validates a whole file image (the 8-byte length, the JSON, every entry
// against the file size). `file` is used in messages only. Throws Error.
// Exposed for the fuzz target and the tests.
SafetensorsHeader parse_safetensors_header(const uint8_t* bytes, size_t size, const std::string& file);

class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);  // throws Error
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

class TensorStore {
 public:
  // `path` is a directory (model.safetensors, or model.safetensors.index.json
  // and its shards, or else every *.safetensors in it) or one .safetensors file.
  static TensorStore open(const std::string& path);  // throws Error
  // Tensors held in memory, no file behind them (a checkpoint generated for a
  // benchmark, io/synthetic.h): the views point into `memory`, which the
  // store keeps alive; `label` stands for the path in messages. Throws Error
  // for a name given twice.
  static TensorStore in_memory(const std::string& label, std::vector<TensorView> views,
                               std::shared_ptr<const void> memory);

  const TensorView* find(const std::string& name) const;  // nullptr if absent
  const TensorView& get(const std::string& name) const;   // throws "error: <dir>: missing tensor <name>"
  std::vector<std::string> names() const;                 // sorted
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  // in_memory: the views (their `file` points at *label_) and their bytes.
  std::vector<TensorView> views_;
  std::shared_ptr<const std::string> label_;
  std::shared_ptr<const void> memory_;
  std::map<std::string, const TensorView*> index_;
};

// Writes tensors as one safetensors file (used by quantize, make-checkpoint
// and the tests). Data pointers must stay valid during the call.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t nbytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// "[d0, d1, ...]": a tensor shape as the error messages write it.
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace nextn
