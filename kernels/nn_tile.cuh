// Block-level tile products for the fused nn kernels (include from .cu files only):
//   C[M,N] += Σ_k A(r,k) · B(c,k)   over k < K,
// with A and B read from shared memory through strides (Op: element (r,k) at p[r*rs + k*ks], so a
// transposed operand costs nothing). The whole block (8 warps, 2 x 4) computes one M x N tile; each
// thread holds a fixed set of C entries (coord() says which), so an epilogue can work on them in
// registers. Two kinds:
//   TileSimt<T>  exact fp32/fp64 FMA; lanes 4 x 8, each a (WTM/4) x (WTN/8) strided micro-tile;
//   TileTf32     tensor cores, mma.sync m16n8k8 TF32 with fp32 accumulation; operands must already be
//                TF32-rounded in shared memory (dev::to_operand<true>), M % 32 == 0, N % 32 == 0, K % 8 == 0.
// Both sum over k in ascending order within a thread (TF32: per mma k-block of 8), so results are
// deterministic run to run.
//
// Host side (end of file): the launch helpers the fused kernels share — the K-width class, one
// launch with a raised dynamic shared-memory limit, and the dispatch over (TF32, K width).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda_check.cuh"
#include "smem_limit.cuh"

namespace memcap::nn::cuda::tile {

constexpr int kWarpsM = 2, kWarpsN = 4;
constexpr int kThreads = 32 * kWarpsM * kWarpsN;  // 256

template <class T>
struct Op {
  const T* p;
  int rs, ks;
  __device__ __forceinline__ T operator()(int r, int k) const { return p[r * rs + k * ks]; }
};

template <class T, int M, int N>
struct TileSimt {
  static constexpr int WTM = M / kWarpsM, WTN = N / kWarpsN;
  static constexpr int TM = WTM / 4, TN = WTN / 8;
  static constexpr int kAcc = TM * TN;
  static_assert(M % (4 * kWarpsM) == 0 && N % (8 * kWarpsN) == 0, "SIMT tile shape");
  using Acc = T[kAcc];

  __device__ __forceinline__ static void coord(int e, int& r, int& c) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp / kWarpsN, wn = warp % kWarpsN;
    r = wm * WTM + (lane >> 3) + 4 * (e / TN);
    c = wn * WTN + (lane & 7) + 8 * (e % TN);
  }
  __device__ __forceinline__ static void zero(Acc& acc) {
#pragma unroll
    for (int e = 0; e < kAcc; ++e) acc[e] = T(0);
  }
  template <int K>
  __device__ __forceinline__ static void mma(Acc& acc, Op<T> A, Op<T> B) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = (warp / kWarpsN) * WTM + (lane >> 3), c0 = (warp % kWarpsN) * WTN + (lane & 7);
#pragma unroll 4
    for (int k = 0; k < K; ++k) {
      T a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = A(r0 + 4 * i, k);
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = B(c0 + 8 * j, k);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
    }
  }
};

__device__ __forceinline__ void mma_tf32_16x8x8(float& d0, float& d1, float& d2, float& d3, const std::uint32_t (&a)[4],
                                                std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int M, int N>
struct TileTf32 {
  static constexpr int WTM = M / kWarpsM, WTN = N / kWarpsN;
  static constexpr int FM = WTM / 16, FN = WTN / 8;
  static constexpr int kAcc = FM * FN * 4;
  static_assert(WTM % 16 == 0 && WTN % 8 == 0, "TF32 tile shape");
  using Acc = float[kAcc];

  // Accumulator e = (fm*FN + fn)*4 + q of fragment (fm, fn): m16n8 C layout, g = lane/4, t = lane%4:
  // q = 0: (g, 2t), 1: (g, 2t+1), 2: (g+8, 2t), 3: (g+8, 2t+1).
  __device__ __forceinline__ static void coord(int e, int& r, int& c) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp / kWarpsN, wn = warp % kWarpsN;
    const int q = e & 3, f = e >> 2, fm = f / FN, fn = f % FN;
    r = wm * WTM + fm * 16 + (lane >> 2) + ((q & 2) ? 8 : 0);
    c = wn * WTN + fn * 8 + 2 * (lane & 3) + (q & 1);
  }
  __device__ __forceinline__ static void zero(Acc& acc) {
#pragma unroll
    for (int e = 0; e < kAcc; ++e) acc[e] = 0.f;
  }
  template <int K>
  __device__ __forceinline__ static void mma(Acc& acc, Op<float> A, Op<float> B) {
    static_assert(K % 8 == 0, "TF32 k-block");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int r0 = (warp / kWarpsN) * WTM + g, c0 = (warp % kWarpsN) * WTN + g;
#pragma unroll 2
    for (int k0 = 0; k0 < K; k0 += 8) {
      std::uint32_t a[FM][4], b[FN][2];
      // A fragment (16 x 8, row): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4).
#pragma unroll
      for (int i = 0; i < FM; ++i) {
        const int r = r0 + 16 * i;
        a[i][0] = __float_as_uint(A(r, k0 + t));
        a[i][1] = __float_as_uint(A(r + 8, k0 + t));
        a[i][2] = __float_as_uint(A(r, k0 + t + 4));
        a[i][3] = __float_as_uint(A(r + 8, k0 + t + 4));
      }
      // B fragment (8 x 8, col): b0 (k = t, n = g), b1 (k = t+4, n = g).
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        const int c = c0 + 8 * j;
        b[j][0] = __float_as_uint(B(c, k0 + t));
        b[j][1] = __float_as_uint(B(c, k0 + t + 4));
      }
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) {
          const int o = (i * FN + j) * 4;
          mma_tf32_16x8x8(acc[o], acc[o + 1], acc[o + 2], acc[o + 3], a[i], b[j][0], b[j][1]);
        }
    }
  }
};

// Tile<T, TF32, M, N>: the TF32 tile for float when TF32, else the exact SIMT tile.
template <class T, bool TF32, int M, int N>
using Tile = std::conditional_t<TF32, TileTf32<M, N>, TileSimt<T, M, N>>;

// ---- host launch helpers ----------------------------------------------------------------------

// K-width class of the fused kernels' compile-time tile: 32, 64 or 128 (d ≤ 128 is checked by callers).
inline int dk_class(std::int64_t d) { return d <= 32 ? 32 : d <= 64 ? 64 : 128; }

// Launch kern<<<(gx, gy), kThreads, smem>>>(a), first raising its dynamic shared-memory limit to smem.
template <class Args>
void launch_dyn_smem(void (*kern)(Args), std::size_t smem, unsigned gx, unsigned gy, const Args& a,
                     cudaStream_t stream, const char* name) {
  ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
  kern<<<dim3(gx, gy), kThreads, smem, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) ::memcap::cuda_detail::throw_cuda(err, name, __FILE__, __LINE__);
}

// Call L<T, TF32, DK>::run(a, gx, gy, stream) for the runtime (tf32, dk); double never takes TF32
// (callers refuse tf32 for double data before this).
template <class T, template <class, bool, int> class L, class Args>
void dispatch_tf32_dk(const Args& a, bool tf32, int dk, unsigned gx, unsigned gy, cudaStream_t stream) {
  if constexpr (sizeof(T) == 4) {
    if (tf32) {
      if (dk == 32) return L<T, true, 32>::run(a, gx, gy, stream);
      if (dk == 64) return L<T, true, 64>::run(a, gx, gy, stream);
      return L<T, true, 128>::run(a, gx, gy, stream);
    }
  }
  if (dk == 32) return L<T, false, 32>::run(a, gx, gy, stream);
  if (dk == 64) return L<T, false, 64>::run(a, gx, gy, stream);
  return L<T, false, 128>::run(a, gx, gy, stream);
}

}  // namespace memcap::nn::cuda::tile
