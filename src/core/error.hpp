// Two error tiers used across memcap.
// UserError and its kinds: bad input a researcher can fix (flags, shapes, files, NaNs);
// each app's main maps them to documented exit codes. MEMCAP_ASSERT: internal invariants, aborts.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace memcap {

// Exit codes (documented in docs/cli.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,   // a bug: unexpected exception
  kExitUsage = 2,      // bad flags / bad values / bad shapes
  kExitIo = 3,         // unreadable, missing or malformed files; unwritable output
  kExitNumeric = 4,    // a numerical failure the user can act on (singular system, NaN result)
  kExitDevice = 5,     // --device cuda without a usable GPU, CUDA runtime errors
  kExitInterrupted = 130,
};

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what, int code = kExitUsage)
      : std::runtime_error(what), code_(code) {}
  int exit_code() const noexcept { return code_; }

 private:
  int code_;
};

struct IoError : UserError {
  explicit IoError(const std::string& what) : UserError(what, kExitIo) {}
};
struct NumericError : UserError {
  explicit NumericError(const std::string& what) : UserError(what, kExitNumeric) {}
};
struct DeviceError : UserError {
  explicit DeviceError(const std::string& what) : UserError(what, kExitDevice) {}
};

// Throw UserError(fmt::format(...)) unless cond holds.
template <typename... Args>
inline void require(bool cond, fmt::format_string<Args...> f, Args&&... args) {
  if (!cond) throw UserError(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace memcap

#define MEMCAP_ASSERT(cond, msg)                                             \
  do {                                                                       \
    if (!(cond)) ::memcap::assert_fail(#cond, __FILE__, __LINE__, (msg));    \
  } while (0)
