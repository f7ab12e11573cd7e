// Internal-invariant failure: print file:line and abort (never used for user input).
#include "core/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace memcap {
[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "memcap: internal error at %s:%d: assertion '%s' failed: %s\n", file, line,
               expr, msg.c_str());
  std::abort();
}
}  // namespace memcap
