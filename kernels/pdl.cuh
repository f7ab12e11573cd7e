// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl may start while the kernel before it
// in the stream is still running, so its launch and block scheduling overlap that kernel's tail instead of
// following its completion. The contract, in every kernel launched this way (include from .cu files only):
//   1. pdl_launch_dependents() first: the next kernel may be scheduled once every block of this one has started;
//   2. before pdl_wait(), touch only data that no kernel of the step writes (inputs uploaded before the training:
//      x, the value table, the targets), since the kernel two back may still be running then;
//   3. pdl_wait() before any other read or any global write: it returns once the previous kernel has completed
//      and its writes are visible (and that kernel waited for its own predecessor the same way).
// Both are no-ops in a kernel launched the ordinary way, and before sm_90. Stream capture keeps the programmatic
// edges, so a captured training step keeps the overlap.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda_check.cuh"
#include "smem_limit.cuh"

namespace memcap::pdl {

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kern<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization allowed; the dynamic
// shared-memory limit raised first (smem_limit.cuh). Launch errors throw DeviceError naming `name`.
template <class... KArgs, class... Args>
void launch_pdl(void (*kern)(KArgs...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                const char* name, Args&&... args) {
  if (smem > 0) ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kern, std::forward<Args>(args)...);
  if (err != cudaSuccess) ::memcap::cuda_detail::throw_cuda(err, name, __FILE__, __LINE__);
}

}  // namespace memcap::pdl
