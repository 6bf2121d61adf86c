// Runs the built `nextn` binary and captures exit code, stdout and stderr.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace nextn::test {

struct CliResult {
  int code = -1;
  std::string out, err;
  // stderr lines (without the trailing newline).
  std::vector<std::string> err_lines() const {
    std::vector<std::string> lines;
    std::istringstream s(err);
    for (std::string l; std::getline(s, l);) lines.push_back(l);
    return lines;
  }
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Writes `bytes` to `path`, replacing it; its parent directories are made.
inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

// Whether a python3 that imports json runs here (the scripts' tests skip without one).
inline bool python3_available() { return std::system("python3 -c 'import json' >/dev/null 2>&1") == 0; }

// A shell command line (sh), the whole line's standard output and error
// captured apart; `cmd` is used as-is (quote it yourself).
inline CliResult run_shell(const std::string& cmd) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("nextn-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "out").string(), err = (dir / "err").string();
  const int status = std::system(("{ " + cmd + "\n} >" + out + " 2>" + err).c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  std::filesystem::remove_all(dir);
  return r;
}

// `args` is appended to the binary path as-is (quote it yourself).
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  return run_shell(env + " " + NEXTN_BINARY + " " + args);
}

// A fresh temporary directory, removed by the destructor.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("nextn-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string str() const { return path.string(); }
};

// The command failed with `code` and printed exactly one `error: ` line containing `needle`.
inline void expect_one_error_line(const CliResult& r, const std::string& needle, int code = 1) {
  EXPECT_EQ(r.code, code) << r.out << r.err;
  const auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(needle), std::string::npos) << "expected '" << needle << "' in: " << lines[0];
}

// `call` throws an Error whose message is one line containing `needle`.
template <class Call>
void expect_error_naming(Call&& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << "expected '" << needle << "' in: " << m;
  }
}

}  // namespace nextn::test
