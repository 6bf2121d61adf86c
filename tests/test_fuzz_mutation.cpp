// A bounded, deterministic fuzz run for parse_safetensors_header that needs
// no libFuzzer: each seed in fuzz/corpus/safetensors gets thousands of seeded
// random mutations (bit flips, truncations, length-field edits, JSON token
// insertions). Every input must parse or throw nextn::Error, nothing else;
// under the ASan/UBSan build this also catches out-of-bounds reads and UB.
// scripts/fuzz.sh does the open-ended, coverage-guided version.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

namespace nextn {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

constexpr int kMutationsPerSeed = 20000;
const char* const kFile = "mutant.safetensors";

std::vector<std::pair<std::string, Bytes>> load_seeds() {
  std::vector<std::pair<std::string, Bytes>> seeds;
  fs::path dir = fs::path(NEXTN_SOURCE_DIR) / "fuzz" / "corpus" / "safetensors";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    Bytes b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    seeds.emplace_back(e.path().filename().string(), std::move(b));
  }
  std::sort(seeds.begin(), seeds.end());  // directory order is not deterministic
  return seeds;
}

uint64_t read_len(const Bytes& b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | (i < int(b.size()) ? b[i] : 0);
  return n;
}

void write_len(Bytes& b, uint64_t n) {
  if (b.size() < 8) b.resize(8);
  for (int i = 0; i < 8; ++i) b[i] = uint8_t(n >> (8 * i));
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  // Applies 1-4 random mutations in place.
  void mutate(Bytes& b) {
    int n = 1 + int(below(4));
    for (int i = 0; i < n; ++i) mutate_once(b);
  }

 private:
  uint64_t below(uint64_t n) { return n == 0 ? 0 : std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }

  // A position inside the JSON header when there is one, so edits mostly
  // exercise the parser rather than the length check.
  size_t header_pos(const Bytes& b) {
    uint64_t hlen = read_len(b);
    if (b.size() > 8 && hlen > 0 && hlen <= b.size() - 8 && below(4) != 0) return 8 + size_t(below(hlen + 1));
    return size_t(below(b.size() + 1));
  }

  // Keeps the length field in step with an edit inside the header, half the
  // time, so the JSON (not the length check) sees the change.
  void adjust_len(Bytes& b, size_t pos, int64_t delta) {
    uint64_t hlen = read_len(b);
    if (b.size() >= 8 && pos >= 8 && pos <= 8 + hlen && below(2) == 0) write_len(b, hlen + uint64_t(delta));
  }

  void mutate_once(Bytes& b) {
    static const char* const kTokens[] = {
        "{", "}", "[", "]", ",", ":", "\"", "\\", " ", "-1", "0", "1", "2", "4", "8", "1.5", "1e999", "-0",
        "18446744073709551615", "18446744073709551616", "9223372036854775807", "4294967296", "null", "true", "[]",
        "{}", "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "\"BF16\"", "\"F32\"", "\"U8\"",
        "\"F64\"", "\"BOOL\"", "\"x\"", "\"\\u0000\"", "\"\\ud800\"", "\xff", "\xc3\xa9", "[0,0]", "[0,8]", "[8,0]",
        "\"dtype\":\"F16\"", "\"shape\":[1]", "\"data_offsets\":[0,2]", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}"};
    switch (below(10)) {
      case 0: {  // bit flip
        if (b.empty()) break;
        size_t p = header_pos(b);
        if (p >= b.size()) p = b.size() - 1;
        b[p] ^= uint8_t(1u << below(8));
        break;
      }
      case 1: {  // byte set, biased to JSON punctuation
        if (b.empty()) break;
        static const uint8_t kInteresting[] = {0, 0xff, 0x7f, '"', '{', '}', '[', ']', ',', ':', '-', '0', '9', '.', 'e', ' '};
        size_t p = header_pos(b);
        if (p >= b.size()) p = b.size() - 1;
        b[p] = below(2) ? kInteresting[below(sizeof kInteresting)] : uint8_t(below(256));
        break;
      }
      case 2:  // truncate
        b.resize(size_t(below(b.size() + 1)));
        break;
      case 3: {  // length-field edit
        uint64_t hlen = read_len(b);
        uint64_t avail = b.size() >= 8 ? b.size() - 8 : 0;
        const uint64_t choices[] = {0,        1,        2,        avail,         avail + 1,      avail - 1,
                                    hlen + 1, hlen - 1, hlen + 8, hlen - 8,      uint64_t(-1),   uint64_t(1) << 63,
                                    100 << 20, (100 << 20) + 1, uint64_t(below(1u << 16)), uint64_t(rng_())};
        write_len(b, choices[below(sizeof choices / sizeof choices[0])]);
        break;
      }
      case 4:
      case 5: {  // token insertion
        std::string tok = kTokens[below(sizeof kTokens / sizeof kTokens[0])];
        size_t p = header_pos(b);
        b.insert(b.begin() + std::min(p, b.size()), tok.begin(), tok.end());
        adjust_len(b, p, int64_t(tok.size()));
        break;
      }
      case 6: {  // delete a range
        if (b.empty()) break;
        size_t p = header_pos(b);
        if (p >= b.size()) p = b.size() - 1;
        size_t n = std::min(size_t(1 + below(16)), b.size() - p);
        b.erase(b.begin() + p, b.begin() + p + n);
        adjust_len(b, p, -int64_t(n));
        break;
      }
      case 7: {  // duplicate a range (e.g. a whole entry, making duplicates or overlaps)
        if (b.empty()) break;
        size_t p = size_t(below(b.size()));
        size_t n = std::min(size_t(1 + below(64)), b.size() - p);
        Bytes chunk(b.begin() + p, b.begin() + p + n);
        size_t q = header_pos(b);
        b.insert(b.begin() + std::min(q, b.size()), chunk.begin(), chunk.end());
        adjust_len(b, q, int64_t(n));
        break;
      }
      case 8: {  // replace a run of digits with a different number
        std::vector<size_t> digits;
        for (size_t i = 8; i < b.size(); ++i)
          if (b[i] >= '0' && b[i] <= '9' && (b[i - 1] < '0' || b[i - 1] > '9')) digits.push_back(i);
        if (digits.empty()) break;
        size_t p = digits[below(digits.size())], e = p;
        while (e < b.size() && b[e] >= '0' && b[e] <= '9') ++e;
        static const char* const kNums[] = {"0", "1", "3", "7", "65536", "4294967295", "9223372036854775808",
                                            "18446744073709551615", "99999999999999999999999"};
        std::string num = below(2) ? kNums[below(sizeof kNums / sizeof kNums[0])] : std::to_string(below(300));
        b.erase(b.begin() + p, b.begin() + e);
        b.insert(b.begin() + p, num.begin(), num.end());
        adjust_len(b, p, int64_t(num.size()) - int64_t(e - p));
        break;
      }
      default: {  // append or drop data bytes
        if (below(2)) {
          size_t n = size_t(below(32));
          for (size_t i = 0; i < n; ++i) b.push_back(uint8_t(below(256)));
        } else if (!b.empty()) {
          b.resize(b.size() - std::min(b.size(), size_t(1 + below(8))));
        }
        break;
      }
    }
  }

  std::mt19937_64 rng_;
};

std::string hex_prefix(const Bytes& b) {
  std::string s;
  for (size_t i = 0; i < b.size() && i < 256; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02x", b[i]);
    s += buf;
  }
  return s;
}

TEST(FuzzMutation, SafetensorsHeaderOnlyThrowsError) {
  auto seeds = load_seeds();
  ASSERT_GE(seeds.size(), 4u) << "seed corpus missing: " << NEXTN_SOURCE_DIR << "/fuzz/corpus/safetensors";
  size_t parsed = 0, errors = 0, json_errors = 0;
  uint64_t seed_no = 0;
  for (const auto& [name, seed] : seeds) {
    Mutator m(0x5afe7e45u + seed_no++);
    for (int i = 0; i < kMutationsPerSeed; ++i) {
      Bytes b = seed;
      m.mutate(b);
      // An exact-size heap copy, so ASan flags any read past the end.
      std::unique_ptr<uint8_t[]> copy(new uint8_t[b.size() + (b.empty() ? 1 : 0)]);
      std::copy(b.begin(), b.end(), copy.get());
      try {
        SafetensorsHeader h = parse_safetensors_header(copy.get(), b.size(), kFile);
        ++parsed;
        // What parses must be consistent with the image.
        for (const auto& t : h.tensors) {
          ASSERT_LE(t.begin, t.end) << name << " #" << i;
          ASSERT_LE(h.data_offset + t.end, b.size()) << name << " #" << i;
        }
      } catch (const Error& e) {
        ++errors;
        std::string msg = e.what();
        ASSERT_EQ(msg.rfind(kFile, 0), 0u) << "message does not start with the file name: " << msg;
        ASSERT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
        if (msg.find("header length") == std::string::npos && msg.find("too short") == std::string::npos) ++json_errors;
      } catch (const std::exception& e) {
        FAIL() << "seed " << name << " mutation #" << i << " threw a non-Error exception: " << e.what()
               << "\ninput: " << hex_prefix(b);
      } catch (...) {
        FAIL() << "seed " << name << " mutation #" << i << " threw a non-std exception; input: " << hex_prefix(b);
      }
    }
  }
  // Sanity: the mutations reach past the length check into the JSON and
  // entry validation, and some still parse.
  EXPECT_GT(parsed, 0u);
  EXPECT_GT(json_errors, errors / 4);
  std::printf("[ stats    ] %zu inputs: %zu parsed, %zu errors (%zu past the length check)\n", parsed + errors,
              parsed, errors, json_errors);
}

}  // namespace
}  // namespace nextn
