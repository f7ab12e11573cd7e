// The dynamic shared-memory limit of a kernel, raised in one place. cudaFuncSetAttribute's
// MaxDynamicSharedMemorySize belongs to the function (per device), shared by every host thread of the process:
// when a sweep runs several trainings at once, one thread setting a smaller limit for its shape between another
// thread's setting and launch made that launch fail (cudaErrorInvalidValue). Here the limit only ever grows,
// under one lock, so a launch never sees a value below what its own call asked for. Host only; no stream work,
// so it is safe before or inside a CUDA-graph capture. Defined in src/core/gpu.cpp.
#pragma once
#include <cstddef>

namespace memcap::cuda_detail {
// Raise `func`'s dynamic shared-memory limit on the current device to at least `bytes` (DeviceError, exit 5,
// when the device refuses it).
void raise_dynamic_smem(const void* func, std::size_t bytes);
template <class... A>
void raise_dynamic_smem(void (*kern)(A...), std::size_t bytes) {
  raise_dynamic_smem(reinterpret_cast<const void*>(kern), bytes);
}
}  // namespace memcap::cuda_detail
