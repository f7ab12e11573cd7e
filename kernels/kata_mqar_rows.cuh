// Row kernels' building blocks shared by the cores that hold T × T scores in memory (kata_mqar_gemm.cu,
// kata_mqar_psi_gemm.cu): one warp per score row, kWarps rows per block, fixed shuffle order (deterministic, no
// atomics), and the geometry of a group of sequences.
#pragma once
#include <cstdint>

namespace memcap::kata::mqar::cuda::rowk {

constexpr int kWarps = 8;  // rows per block of the row kernels

__device__ __forceinline__ std::int64_t warp_row() {
  return static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
}
template <class T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
  for (int w = 16; w >= 1; w /= 2) x += __shfl_xor_sync(0xffffffffu, x, w);
  return x;
}
template <class T>
__device__ __forceinline__ T warp_max(T x) {
#pragma unroll
  for (int w = 16; w >= 1; w /= 2) {
    const T y = __shfl_xor_sync(0xffffffffu, x, w);
    x = y > x ? y : x;
  }
  return x;
}
// Dot product of the dh-wide head rows a, b (one warp).
template <class T>
__device__ __forceinline__ T warp_dot(const T* a, const T* b, int dh) {
  T acc = T(0);
  for (int j = threadIdx.x % 32; j < dh; j += 32) acc += a[j] * b[j];
  return warp_sum(acc);
}

// Group geometry: rows r = (b·H + h)·T + t of the group (b < nb); the head row of X for r.
struct Rows {
  std::int64_t nb, H, T, dh;
  __device__ std::int64_t count() const { return nb * H * T; }
  __device__ std::int64_t head_row(std::int64_t r, std::int64_t ld) const {
    const std::int64_t t = r % T, bh = r / T, h = bh % H, b = bh / H;
    return (b * T + t) * ld + h * dh;
  }
};

inline unsigned row_blocks(std::int64_t rows) { return static_cast<unsigned>((rows + kWarps - 1) / kWarps); }

}  // namespace memcap::kata::mqar::cuda::rowk
