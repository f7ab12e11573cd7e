// Checked CUDA calls: every runtime call and every launch goes through these macros, which turn
// a CUDA error into memcap::DeviceError (exit code 5) naming the call, file and line.
// Host-only header (usable from .cu and .cpp files built with CUDA on). It does not include
// core/error.hpp: fmt 9 does not compile under nvcc -std=c++20, so the throwing is done by
// functions defined in src/core/error.cpp (compiled by the host compiler).
#pragma once
#include <cuda_runtime_api.h>

#include <string>

namespace memcap::cuda_detail {
// Throw memcap::DeviceError / memcap::UserError with this message.
[[noreturn]] void throw_device_error(const std::string& message);
[[noreturn]] void throw_user_error(const std::string& message);

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* what, const char* file, int line) {
  throw_device_error(std::string("CUDA error in ") + what + " at " + file + ":" + std::to_string(line) + ": " +
                     cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}
}  // namespace memcap::cuda_detail

// MEMCAP_CUDA_CHECK(cudaMalloc(&p, n));
#define MEMCAP_CUDA_CHECK(call)                                                          \
  do {                                                                                   \
    cudaError_t memcap_err_ = (call);                                                    \
    if (memcap_err_ != cudaSuccess)                                                      \
      ::memcap::cuda_detail::throw_cuda(memcap_err_, #call, __FILE__, __LINE__);          \
  } while (0)

// After every kernel launch: catches bad launch configurations (and, asynchronously, earlier faults).
#define MEMCAP_CUDA_CHECK_LAUNCH(name)                                                   \
  do {                                                                                   \
    cudaError_t memcap_err_ = cudaGetLastError();                                        \
    if (memcap_err_ != cudaSuccess)                                                      \
      ::memcap::cuda_detail::throw_cuda(memcap_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)
