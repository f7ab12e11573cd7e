// Philox normal fills and NaN poisoning of device buffers (bf16 or fp32).
#include <cuda_bf16.h>

#include <cmath>

#include "core/rng.hpp"
#include "cuda_check.cuh"
#include "kata_attention_fill.cuh"

namespace memcap::kata::cuda {
namespace {

template <class T>
__global__ void fill_normal_kernel(T* dst, std::int64_t n, std::uint64_t seed, std::uint64_t stream, float scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = scale * static_cast<float>(rng::normal(seed, stream, static_cast<std::uint64_t>(i)));
    if constexpr (sizeof(T) == 2)
      dst[i] = __float2bfloat16(x);
    else
      dst[i] = x;
  }
}

template <class T>
__global__ void fill_nan_kernel(T* dst, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (sizeof(T) == 2)
      dst[i] = __float2bfloat16(NAN);
    else
      dst[i] = NAN;
  }
}

unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65536 ? (b < 1 ? 1 : b) : 65536);
}

}  // namespace

void fill_normal(void* dst, gpu::DType dtype, std::int64_t n, std::uint64_t seed, std::uint64_t stream, float scale,
                 cudaStream_t s) {
  if (dtype == gpu::DType::bf16)
    fill_normal_kernel<<<blocks_for(n), 256, 0, s>>>(static_cast<__nv_bfloat16*>(dst), n, seed, stream, scale);
  else
    fill_normal_kernel<<<blocks_for(n), 256, 0, s>>>(static_cast<float*>(dst), n, seed, stream, scale);
  MEMCAP_CUDA_CHECK_LAUNCH("fill_normal_kernel");
}

void fill_nan(void* dst, gpu::DType dtype, std::int64_t n, cudaStream_t s) {
  if (dtype == gpu::DType::bf16)
    fill_nan_kernel<<<blocks_for(n), 256, 0, s>>>(static_cast<__nv_bfloat16*>(dst), n);
  else
    fill_nan_kernel<<<blocks_for(n), 256, 0, s>>>(static_cast<float*>(dst), n);
  MEMCAP_CUDA_CHECK_LAUNCH("fill_nan_kernel");
}

}  // namespace memcap::kata::cuda
