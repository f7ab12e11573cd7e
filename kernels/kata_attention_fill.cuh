// Device-side buffer fills for KATA attention tests and benchmarks: Philox normal numbers
// (core/rng.hpp, same numbers as the CPU for the same (seed, stream, index)) and NaN poisoning.
#pragma once
#include <cstdint>

#include "kata_attention_launch.cuh"

namespace memcap::kata::cuda {

// dst[i] = scale * rng::normal(seed, stream, i), i < n, rounded to dtype.
void fill_normal(void* dst, gpu::DType dtype, std::int64_t n, std::uint64_t seed, std::uint64_t stream, float scale,
                 cudaStream_t s);
// dst[i] = NaN, i < n (so an output the kernel never wrote cannot pass a test).
void fill_nan(void* dst, gpu::DType dtype, std::int64_t n, cudaStream_t s);

}  // namespace memcap::kata::cuda
