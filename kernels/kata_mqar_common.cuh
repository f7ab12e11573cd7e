// Shared device helpers of the MQAR mixer cores (kata_mqar_softmax.cu, kata_mqar_kata.cu, kata_mqar_delta.cu):
// head addressing of the [B·T, ld] token rows, the 32-row tile geometry (256 threads = 32 rows × 8 lanes,
// lane g owns columns g, g+8, ...), exact exp/log per element type, and the dynamic shared-memory opt-in.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda_check.cuh"
#include "smem_limit.cuh"
#include "kata_mqar_mixers.cuh"

namespace memcap::kata::mqar::cuda::detail {

constexpr int kRows = 32;      // token rows per tile (query tile = key tile)
constexpr int kLanes = 8;      // threads per row
constexpr int kThreads = kRows * kLanes;
constexpr int kSP = kRows + 1;  // row stride of the kRows × kRows score tiles in shared memory

// Shared layout: [kRows][dh+1] tiles (rows padded by one element against bank conflicts).
__host__ __device__ __forceinline__ std::size_t tile_elems(int dh) { return static_cast<std::size_t>(kRows) * (dh + 1); }

// Per-thread column count ceil(dh / 8) of the dispatched instantiation (dh <= 128).
inline int column_slots(std::int64_t dh) { return dh <= 16 ? 2 : dh <= 32 ? 4 : dh <= 64 ? 8 : 16; }

inline void check_heads(const HeadShape& s, const char* what) {
  if (s.B < 0 || s.T < 0 || s.H < 1 || s.dh < 1 || s.dh > 128)
    cuda_detail::throw_user_error(std::string(what) + ": head shape needs H >= 1 and 1 <= d_head <= 128 (got H = " +
                                  std::to_string(s.H) + ", d_head = " + std::to_string(s.dh) + ")");
}

// Dispatch NC = column_slots(dh) to f(std::integral_constant<int, NC>{}).
template <class F>
void with_column_slots(std::int64_t dh, F&& f) {
  switch (column_slots(dh)) {
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: f(std::integral_constant<int, 16>{}); break;
  }
}

// Refuse (UserError) a launch whose shared-memory plan exceeds what one block may opt in to.
inline void check_smem(std::size_t bytes, const char* what) {
  int dev = 0, max_optin = 0;
  MEMCAP_CUDA_CHECK(cudaGetDevice(&dev));
  MEMCAP_CUDA_CHECK(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (bytes > static_cast<std::size_t>(max_optin))
    cuda_detail::throw_user_error(std::string(what) + ": this head width and element type need " +
                                  std::to_string(bytes) + " bytes of shared memory per block (the GPU allows " +
                                  std::to_string(max_optin) + "); use a smaller d_head or chunk, or float");
}

// Raise a kernel's dynamic shared-memory limit once per size class (host only; no stream work, so safe
// before or inside a CUDA-graph capture).
template <class Kernel>
void allow_smem(Kernel k, std::size_t bytes, const char* what = "mixer kernel") {
  check_smem(bytes, what);
  if (bytes > 48 * 1024)
    ::memcap::cuda_detail::raise_dynamic_smem(k, bytes);
}

template <class T>
__device__ __forceinline__ T ex(T x) {
  if constexpr (std::is_same_v<T, float>) return expf(x);
  else return exp(x);
}
template <class T>
__device__ __forceinline__ T lg(T x) {
  if constexpr (std::is_same_v<T, float>) return logf(x);
  else return log(x);
}
template <class T>
__device__ __forceinline__ T neg_inf() {
  if constexpr (std::is_same_v<T, float>) return -__int_as_float(0x7f800000);
  else return -__longlong_as_double(0x7ff0000000000000LL);
}

// Sum over the 8 lanes of one row (lanes 8r..8r+7 of a warp).
template <class T>
__device__ __forceinline__ T row_sum(T x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  x += __shfl_xor_sync(0xffffffffu, x, 4);
  return x;
}
template <class T>
__device__ __forceinline__ T row_max(T x) {
#pragma unroll
  for (int w = 1; w < kLanes; w *= 2) {
    const T y = __shfl_xor_sync(0xffffffffu, x, w);  // every lane shuffles (no divergent shuffle)
    x = y > x ? y : x;
  }
  return x;
}

// Head (b, h) of block index bh: element (t, j) of X is X[(b·T + t)·ld + h·dh + j].
struct HeadIndex {
  std::int64_t b, h, bh, T, H, dh;
  __device__ HeadIndex(std::int64_t bh_, const HeadShape& s) : b(bh_ / s.H), h(bh_ % s.H), bh(bh_), T(s.T), H(s.H), dh(s.dh) {}
  __device__ std::int64_t row(std::int64_t t, std::int64_t ld) const { return (b * T + t) * ld + h * dh; }
  __device__ std::int64_t stat(std::int64_t t) const { return bh * T + t; }      // lse / den [B, H, T]
  __device__ std::int64_t beta(std::int64_t t) const { return (b * T + t) * H + h; }  // β [B·T, H]
};

// Load a kRows × dh tile of rows [t0, t0 + kRows) into smem (row stride lds); rows past T are zero.
template <class T>
__device__ __forceinline__ void load_tile(T* dst, int lds, const T* src, std::int64_t ld, const HeadIndex& hi,
                                          std::int64_t t0, int dh) {
  for (int e = threadIdx.x; e < kRows * dh; e += kThreads) {
    const int r = e / dh, c = e - r * dh;
    const std::int64_t t = t0 + r;
    dst[r * lds + c] = t < hi.T ? src[hi.row(t, ld) + c] : T(0);
  }
}

}  // namespace memcap::kata::mqar::cuda::detail
