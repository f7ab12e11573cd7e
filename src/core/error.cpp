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

// Declared in kernels/cuda_check.cuh, which cannot include error.hpp (fmt 9 does not compile
// under nvcc -std=c++20): CUDA code throws the two user-facing error kinds through these.
namespace cuda_detail {
[[noreturn]] void throw_device_error(const std::string& message) { throw DeviceError(message); }
[[noreturn]] void throw_user_error(const std::string& message) { throw UserError(message); }
}  // namespace cuda_detail

}  // namespace memcap
