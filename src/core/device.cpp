// Device resolution (see device.hpp). The only place that asks the CUDA runtime about GPUs.
#include "core/device.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace memcap {

const char* to_string(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

bool cuda_available(std::string* why) {
#ifdef MEMCAP_HAVE_CUDA
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = fmt::format("no usable NVIDIA GPU or driver (CUDA runtime: {})", cudaGetErrorString(err));
    cudaGetLastError();
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device is visible";
    return false;
  }
  return true;
#else
  if (why) *why = "this build of memcap has no CUDA support (configured with MEMCAP_ENABLE_CUDA=OFF)";
  return false;
#endif
}

DeviceInfo resolve_device(const std::string& request) {
  if (request != "auto" && request != "cpu" && request != "cuda")
    throw UserError(fmt::format("--device must be auto, cpu or cuda (got '{}')", request));
  DeviceInfo info;
  if (request == "cpu") {
    info.reason = "requested";
    return info;
  }
  std::string why;
  const bool have = cuda_available(&why);
  if (!have) {
    if (request == "cuda")
      throw DeviceError(fmt::format("--device cuda was requested but {}; use --device cpu", why));
    info.reason = fmt::format("auto: no GPU ({}), using cpu", why);
    return info;
  }
#ifdef MEMCAP_HAVE_CUDA
  int dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, dev);
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  info.device = Device::cuda;
  info.name = prop.name;
  info.compute_capability = fmt::format("{}.{}", prop.major, prop.minor);
  info.cuda_version = fmt::format("{}.{}", rt / 1000, (rt % 1000) / 10);
  info.reason = request == "auto" ? fmt::format("auto: using GPU {}", info.name) : "requested";
#endif
  return info;
}

}  // namespace memcap
