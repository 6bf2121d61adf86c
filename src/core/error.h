// One error type for bad input and usage. The CLI prints it as one
// `error: ...` line and exits 1; nothing below the CLI prints or exits.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace nextn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A benchmark that cannot attribute its arms refuses to print a table: exit 2.
class RefusedError : public Error {
 public:
  explicit RefusedError(const std::string& what) : Error(what) {}
};

// The device can no longer compute (a sticky CUDA error such as an illegal
// address): every later call on it fails too. A server that sees one stops
// taking work and says so on /health; only a new process recovers.
class DeviceFault : public Error {
 public:
  explicit DeviceFault(const std::string& what) : Error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace nextn
