// safetensors reader/writer: round trips, shard discovery, misaligned data,
// and one test per way a file can be bad. Every error must be an Error whose
// one-line message names the file and, where there is one, the tensor.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "cli_util.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;

// An 8-byte LE length, the header text, then the data bytes.
std::string image(const std::string& header, const std::string& data = {}, std::optional<uint64_t> len = {}) {
  uint64_t n = len ? *len : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char(uint8_t(n >> (8 * i)));
  return out + header + data;
}

// Runs fn, which must throw nextn::Error with a one-line message containing
// every string in `parts`.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-Error exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "no exception thrown";
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "nextn_st_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Writes `bytes` as <dir>/<name> and expects opening it (as a file, and
  // through parse_safetensors_header) to fail naming the file and `parts`.
  void expect_bad(const std::string& bytes, std::initializer_list<std::string> parts,
                  const std::string& name = "bad.safetensors") {
    fs::path p = dir_ / name;
    test::write_file(p, bytes);
    std::vector<std::string> all(parts);
    all.push_back(name);
    auto check = [&](const std::function<void()>& fn) {
      try {
        fn();
        ADD_FAILURE() << "no exception for " << name;
      } catch (const Error& e) {
        std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        for (const auto& s : all) EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "non-Error exception: " << e.what();
      }
    };
    check([&] { TensorStore::open(p.string()); });
    check([&] {
      parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name);
    });
  }

  fs::path dir_;
};

TEST_F(Safetensors, RoundTrip) {
  std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 1e-30f, -0.0f, 7.0f};
  std::vector<uint16_t> bf16 = {0x3f80, 0xc000, 0x7f80, 0x0001};
  std::vector<int8_t> i8 = {-128, 0, 127};
  float scalar = 42.0f;
  fs::path p = dir_ / "rt.safetensors";
  write_safetensors(p.string(),
                    {{"z.weight", DType::F32, {2, 3}, f32.data(), f32.size() * 4},
                     {"a.bf16", DType::BF16, {4}, bf16.data(), bf16.size() * 2},
                     {"m.i8", DType::I8, {1, 3}, i8.data(), 3},
                     {"empty", DType::F16, {0, 5}, nullptr, 0},
                     {"scalar", DType::F32, {}, &scalar, 4}},
                    {{"format", "pt"}, {"note", "hi"}});

  // Header padded to a multiple of 8 with spaces, so data starts aligned.
  std::string raw = test::read_file(p);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = hlen << 8 | uint8_t(raw[i]);
  EXPECT_EQ(hlen % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + hlen + 24 + 8 + 3 + 4);

  TensorStore s = TensorStore::open(p.string());
  EXPECT_EQ(s.names(), (std::vector<std::string>{"a.bf16", "empty", "m.i8", "scalar", "z.weight"}));
  const TensorView& z = s.get("z.weight");
  EXPECT_EQ(z.dtype, DType::F32);
  EXPECT_EQ(z.shape_str(), "[2, 3]");
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.nbytes, 24u);
  ASSERT_NE(z.file, nullptr);
  EXPECT_EQ(*z.file, p.string());
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(load_float(DType::F32, z.data, i), f32[i]);
  EXPECT_EQ(std::memcmp(s.get("a.bf16").data, bf16.data(), 8), 0);
  EXPECT_EQ(std::memcmp(s.get("m.i8").data, i8.data(), 3), 0);
  EXPECT_EQ(s.get("empty").numel(), 0);
  EXPECT_EQ(s.get("empty").nbytes, 0u);
  EXPECT_EQ(s.get("scalar").shape_str(), "[]");
  EXPECT_EQ(s.get("scalar").numel(), 1);
  EXPECT_EQ(load_float(DType::F32, s.get("scalar").data, 0), 42.0f);
  EXPECT_EQ(s.find("nope"), nullptr);
  expect_error([&] { s.get("nope"); }, {p.string(), "missing tensor nope"});

  // Data is laid out in name order, contiguously.
  auto h = parse_safetensors_header(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), "rt");
  EXPECT_EQ(h.data_offset, 8 + hlen);
  uint64_t at = 0;
  for (const auto& e : h.tensors) {
    EXPECT_EQ(e.begin, at) << e.name;
    at = e.end;
  }
  EXPECT_EQ(h.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hi"}}));

  auto f = SafetensorsFile::open(p.string());
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->tensors().size(), 5u);
}

TEST_F(Safetensors, HeaderOrderKept) {
  std::string bytes = image(R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                            R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                            "xy");
  auto h = parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "f");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "b");
  EXPECT_EQ(h.tensors[1].name, "a");
}

TEST_F(Safetensors, EmptyHeaderIsValid) {
  std::string bytes = image("{}");
  auto h = parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "f");
  EXPECT_TRUE(h.tensors.empty());
  EXPECT_EQ(h.data_offset, 10u);
}

TEST_F(Safetensors, MisalignedDataReadCorrectly) {
  // Header length 13: the data section starts at byte 21, so F32 and BF16
  // values sit at odd addresses. Reads must go through memcpy.
  std::string header = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                       R"("h":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]}})";
  header.append((8 - header.size() % 8) % 8 + 5, ' ');  // == 5 mod 8
  ASSERT_NE(header.size() % 4, 0u);
  float vals[3] = {1.5f, -3.0f, 1e10f};
  uint16_t hv[2] = {f32_to_bf16(2.0f), f32_to_bf16(-0.5f)};
  std::string data(reinterpret_cast<const char*>(vals), 12);
  data.append(reinterpret_cast<const char*>(hv), 4);
  fs::path p = dir_ / "mis.safetensors";
  test::write_file(p, image(header, data));

  TensorStore s = TensorStore::open(p.string());
  const TensorView& w = s.get("w");
  EXPECT_NE(reinterpret_cast<uintptr_t>(w.data) % 4, 0u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(load_float(DType::F32, w.data, i), vals[i]);
  const TensorView& h = s.get("h");
  EXPECT_EQ(load_float(DType::BF16, h.data, 0), 2.0f);
  EXPECT_EQ(load_float(DType::BF16, h.data, 1), -0.5f);
}

// A directory of shards plus model.safetensors.index.json.
TEST_F(Safetensors, ShardedIndex) {
  std::vector<float> a = {1, 2}, b = {3, 4, 5};
  write_safetensors((dir_ / "model-00001-of-00002.safetensors").string(), {{"a", DType::F32, {2}, a.data(), 8}});
  write_safetensors((dir_ / "model-00002-of-00002.safetensors").string(),
                    {{"b", DType::F32, {3}, b.data(), 12}, {"c", DType::F32, {1}, a.data(), 4}});
  test::write_file(dir_ / "model.safetensors.index.json",
             R"({"metadata":{"total_size":24},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
             R"("b":"model-00002-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
  // A stray file the index does not name is ignored.
  test::write_file(dir_ / "stray.safetensors", "garbage");

  TensorStore s = TensorStore::open(dir_.string());
  EXPECT_EQ(s.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(load_float(DType::F32, s.get("b").data, 2), 5.0f);
  EXPECT_NE(s.get("a").file->find("model-00001-of-00002.safetensors"), std::string::npos);
  EXPECT_EQ(s.path(), dir_.string());
}

// The index decides what the checkpoint holds: a tensor a shard has but the
// index does not list is not loaded, and a tensor present in two shards is
// taken from the shard the index names (no "in both" error).
TEST_F(Safetensors, IndexIsAuthoritative) {
  std::vector<float> a1 = {1}, a2 = {2}, extra = {9};
  write_safetensors((dir_ / "s1.safetensors").string(),
                    {{"a", DType::F32, {1}, a1.data(), 4}, {"unlisted", DType::F32, {1}, extra.data(), 4}});
  write_safetensors((dir_ / "s2.safetensors").string(), {{"a", DType::F32, {1}, a2.data(), 4}});
  test::write_file(dir_ / "model.safetensors.index.json", R"({"weight_map":{"a":"s2.safetensors"}})");
  TensorStore s = TensorStore::open(dir_.string());
  EXPECT_EQ(s.names(), (std::vector<std::string>{"a"}));
  EXPECT_EQ(s.find("unlisted"), nullptr);
  EXPECT_EQ(load_float(DType::F32, s.get("a").data, 0), 2.0f);
  EXPECT_NE(s.get("a").file->find("s2.safetensors"), std::string::npos);
}

TEST_F(Safetensors, DirectoryWithModelSafetensors) {
  float x = 1;
  write_safetensors((dir_ / "model.safetensors").string(), {{"x", DType::F32, {1}, &x, 4}});
  test::write_file(dir_ / "other.safetensors", "garbage");  // not looked at
  EXPECT_EQ(TensorStore::open(dir_.string()).names(), (std::vector<std::string>{"x"}));
}

TEST_F(Safetensors, DirectoryOfLooseShards) {
  float x = 1;
  write_safetensors((dir_ / "b.safetensors").string(), {{"y", DType::F32, {1}, &x, 4}});
  write_safetensors((dir_ / "a.safetensors").string(), {{"x", DType::F32, {1}, &x, 4}});
  TensorStore s = TensorStore::open(dir_.string());
  EXPECT_EQ(s.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_NE(s.get("y").file->find("b.safetensors"), std::string::npos);
}

TEST_F(Safetensors, DuplicateAcrossShards) {
  float x = 1;
  write_safetensors((dir_ / "a.safetensors").string(), {{"dup.weight", DType::F32, {1}, &x, 4}});
  write_safetensors((dir_ / "b.safetensors").string(), {{"dup.weight", DType::F32, {1}, &x, 4}});
  expect_error([&] { TensorStore::open(dir_.string()); }, {"dup.weight", "a.safetensors", "b.safetensors"});
}

TEST_F(Safetensors, EmptyDirectoryAndMissingPath) {
  expect_error([&] { TensorStore::open(dir_.string()); }, {dir_.string()});
  expect_error([&] { TensorStore::open((dir_ / "nope").string()); }, {"nope"});
  expect_error([&] { SafetensorsFile::open((dir_ / "nope.safetensors").string()); }, {"nope.safetensors"});
}

TEST_F(Safetensors, IndexMissingFile) {
  test::write_file(dir_ / "model.safetensors.index.json", R"({"weight_map":{"lm_head.weight":"gone.safetensors"}})");
  expect_error([&] { TensorStore::open(dir_.string()); },
               {"model.safetensors.index.json", "lm_head.weight", "gone.safetensors"});
}

TEST_F(Safetensors, IndexTensorNotInShard) {
  float x = 1;
  write_safetensors((dir_ / "s1.safetensors").string(), {{"a", DType::F32, {1}, &x, 4}});
  test::write_file(dir_ / "model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","lost.bias":"s1.safetensors"}})");
  expect_error([&] { TensorStore::open(dir_.string()); }, {"model.safetensors.index.json", "lost.bias", "s1.safetensors"});
}

TEST_F(Safetensors, IndexBad) {
  fs::path ip = dir_ / "model.safetensors.index.json";
  auto bad = [&](const std::string& text, std::initializer_list<std::string> parts) {
    test::write_file(ip, text);
    std::vector<std::string> all(parts);
    all.push_back("model.safetensors.index.json");
    try {
      TensorStore::open(dir_.string());
      ADD_FAILURE() << "no exception for " << text;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& s : all) EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
    }
  };
  bad("not json", {"JSON"});
  bad("[1]", {"object"});
  bad(R"({"metadata":{}})", {"weight_map"});
  bad(R"({"weight_map":[]})", {"weight_map"});
  bad(R"({"weight_map":{"t.w":5}})", {"t.w"});
  bad(R"({"weight_map":{"t.w":"../escape.safetensors"}})", {"t.w", "../escape.safetensors"});
  bad(R"({"weight_map":{"t.w":"/abs.safetensors"}})", {"t.w"});
  bad(R"({"weight_map":{"t.w":"a","t.w":"b"}})", {"duplicate", "t.w"});
}

// ---- bad single files ----

const char* kGood = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST_F(Safetensors, BadTruncatedFile) {
  expect_bad("", {"0 bytes"});
  expect_bad(std::string("\x10\0\0", 3), {"3 bytes"});
  // Valid header, data cut short: the tensor's end is past the data section.
  expect_bad(image(kGood, "1234"), {"'t'", "past the data section"});
}

TEST_F(Safetensors, BadHeaderLengthBeyondFile) {
  expect_bad(image(kGood, std::string(8, '\0'), 1000), {"header length 1000"});
  expect_bad(image(kGood, std::string(8, '\0'), ~0ull), {"header length"});
  expect_bad(image(kGood, std::string(8, '\0'), 200ull << 20), {"header length"});
}

TEST_F(Safetensors, BadHeaderLengthTooSmall) {
  expect_bad(image("", "{}"), {"header length 0"});
  expect_bad(image("{", "}"), {"header length 1"});
}

TEST_F(Safetensors, BadNotJson) {
  expect_bad(image("hello, world"), {"JSON"});
  expect_bad(image(R"({"t":{"dtype":"F32")"), {"JSON"});
  // nlohmann treats NUL as end of input: bytes hidden after one must not pass.
  expect_bad(image(std::string("{}\0\0", 4)), {"NUL"});
  expect_bad(image(std::string("{}\0{\"x\":1}", 10)), {"NUL"});
}

TEST_F(Safetensors, BadNotObject) {
  expect_bad(image("[1, 2, 3]"), {"not an object"});
  expect_bad(image("\"str\""), {"not an object"});
  expect_bad(image(R"({"t":[1,2]})"), {"'t'", "not an object"});
}

TEST_F(Safetensors, BadMissingFields) {
  expect_bad(image(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", "12345678"), {"'t'", "dtype"});
  expect_bad(image(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", "12345678"), {"'t'", "shape"});
  expect_bad(image(R"({"t":{"dtype":"F32","shape":[2]}})", "12345678"), {"'t'", "data_offsets"});
}

TEST_F(Safetensors, BadUnknownDtype) {
  expect_bad(image(R"({"w.q":{"dtype":"F8_E9","shape":[2],"data_offsets":[0,2]}})", "12"), {"'w.q'", "F8_E9"});
  expect_bad(image(R"({"w.q":{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}})", "12"), {"'w.q'", "bf16"});
  expect_bad(image(R"({"w.q":{"dtype":7,"shape":[1],"data_offsets":[0,2]}})", "12"), {"'w.q'", "dtype"});
}

TEST_F(Safetensors, BadShape) {
  expect_bad(image(R"({"neg":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})"), {"'neg'", "shape"});
  expect_bad(image(R"({"flt":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "x"), {"'flt'", "shape"});
  expect_bad(image(R"({"str":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}})", "x"), {"'str'", "shape"});
  expect_bad(image(R"({"obj":{"dtype":"U8","shape":{"a":1},"data_offsets":[0,1]}})", "x"), {"'obj'", "shape"});
  expect_bad(image(R"({"big":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,1]}})", "x"),
             {"'big'", "shape"});
  // Each dimension fits, their product does not.
  expect_bad(image(R"({"ovf":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}})", "x"),
             {"'ovf'", "2^63"});
  // numel fits int64, bytes overflow uint64.
  expect_bad(image(R"({"ovb":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,1]}})", "x"),
             {"'ovb'", "2^64"});
}

TEST_F(Safetensors, BadOffsets) {
  expect_bad(image(R"({"oob":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", "1234"), {"'oob'", "end 8"});
  expect_bad(image(R"({"rev":{"dtype":"U8","shape":[0],"data_offsets":[3,1]}})", "1234"), {"'rev'", "begin 3 > end 1"});
  expect_bad(image(R"({"one":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "1"), {"'one'", "data_offsets"});
  expect_bad(image(R"({"neg":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "1"), {"'neg'", "data_offsets"});
  expect_bad(image(R"({"str":{"dtype":"U8","shape":[1],"data_offsets":"0,1"}})", "1"), {"'str'", "data_offsets"});
}

TEST_F(Safetensors, BadOverlap) {
  expect_bad(image(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                   R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                   "123456"),
             {"'a'", "'b'", "overlap"});
  // Identical spans overlap too.
  expect_bad(image(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                   R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                   "1234"),
             {"overlap"});
}

TEST_F(Safetensors, EmptyTensorInsideAnotherIsNoOverlap) {
  std::string bytes = image(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                            R"("e":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})",
                            "1234");
  EXPECT_NO_THROW(parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "f"));
}

TEST_F(Safetensors, BadByteSize) {
  std::string data(200, '\0');
  expect_bad(image(R"({"lm_head.weight":{"dtype":"BF16","shape":[10,6],"data_offsets":[0,100]}})", data),
             {"tensor 'lm_head.weight': data_offsets span 100 bytes, but BF16 [10, 6] needs 120"}, "model.safetensors");
  expect_bad(image(R"({"f":{"dtype":"F32","shape":[3],"data_offsets":[0,13]}})", data), {"'f'", "F32 [3] needs 12"});
}

TEST_F(Safetensors, BadDuplicateNames) {
  expect_bad(image(R"({"dup.w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                   R"("dup.w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                   "12"),
             {"duplicate", "dup.w"});
  // A duplicate key inside an entry is caught too.
  expect_bad(image(R"({"t":{"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]}})", "1"), {"duplicate", "dtype"});
}

TEST_F(Safetensors, BadMetadata) {
  expect_bad(image(R"({"__metadata__":{"format":1}})"), {"__metadata__", "format", "not a string"});
  expect_bad(image(R"({"__metadata__":["pt"]})"), {"__metadata__", "not an object"});
}

TEST_F(Safetensors, ControlCharsInNamesStayOneLine) {
  expect_bad(image(R"({"a\nb":{"dtype":"XX","shape":[1],"data_offsets":[0,1]}})", "1"), {"a\\x0ab"});
}

TEST(SafetensorsWrite, RejectsBadInput) {
  float x[2] = {1, 2};
  std::string p = (fs::temp_directory_path() / "nextn_st_write_bad.safetensors").string();
  expect_error([&] { write_safetensors(p, {{"w", DType::F32, {3}, x, 8}}); }, {p, "'w'", "needs 12"});
  expect_error([&] { write_safetensors(p, {{"w", DType::F32, {1}, x, 4}, {"w", DType::F32, {1}, x, 4}}); }, {p, "'w'"});
  expect_error([&] { write_safetensors(p, {{"w", DType::F32, {-1}, x, 4}}); }, {p, "'w'"});
  EXPECT_FALSE(fs::exists(p));
}

}  // namespace
}  // namespace nextn
