// Length limits of the MQAR mixer-core variants, shared by the host-side variant rules (mqar_model.cpp) and the
// CUDA cores (kernels/kata_mqar_gemm.cuh); no dependencies, so both a CPU-only build and nvcc include it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace memcap::kata {

// The gemm variant's delta-rule core solves each whole sequence in kernel space (one T × T system per head);
// longer sequences run the chunked core. 512 covers the training lengths (spec §4.1: T <= 256) and the shortest
// evaluation slice.
inline constexpr std::int64_t kDeltaGemmMaxT = 512;
// Shared memory of its triangular solves ((T + T·d_head) elements of one head).
inline constexpr std::size_t kDeltaGemmMaxSmem = 200 * 1024;

}  // namespace memcap::kata
