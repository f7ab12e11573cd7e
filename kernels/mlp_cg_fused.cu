// Fused float32 operator of the data-dependent CG (see mlp_cg.cuh, "fused operator"). The operator
//   Op(P) = (Π ⊙ (W0ᵀ Gv W0 (Π ⊙ (P Kᵀ)))) K + λ P
// chains two products through an m x F Hadamard factor; the cuBLAS form writes and re-reads four m x F
// tensors an iteration. Here each half is one kernel that keeps its m x F tile in shared memory:
//   first:  t1 = W0ᵀ·(Π ⊙ (P Kᵀ))            (d x F; blocks over key tiles x row-chunk splits)
//   second: out = (Π ⊙ (W0 t2)) K + λ P       (m x d; blocks over row chunks x key-tile splits)
// with t2 = Gv t1 (d x d x F, cuBLAS) in between. Both are 64 x 64 shared-memory tiles, 256 threads,
// register tiles of 4 x 4 (4 x 8 at d > 64), float accumulation in a fixed order; the splits write
// partial sums that one elementwise pass adds in split order, so a run is bitwise reproducible.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda_check.cuh"
#include "mlp_cg.cuh"

namespace memcap::mlp::cuda {
namespace {

constexpr int kT = 64;         // rows (of m) and keys per tile
constexpr int kLd = kT + 4;    // padded row of a 64-wide tile (float4-aligned)
constexpr int kThreads = 256;  // 16 x 16 threads

// acc (TM x TN) += Σ_k A[k][ty*TM ..] ⊗ B[k][tx*TN ..]  (both k-major in shared memory, float4 rows)
template <int TM, int TN>
__device__ __forceinline__ void tile_mac(float (&acc)[TM][TN], const float* A, int lda, const float* B, int ldb,
                                         int K, int ty, int tx) {
#pragma unroll 4
  for (int k = 0; k < K; ++k) {
    float a[TM], b[TN];
#pragma unroll
    for (int q = 0; q < TM / 4; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(A + k * lda + ty * TM + 4 * q);
      a[4 * q] = v.x, a[4 * q + 1] = v.y, a[4 * q + 2] = v.z, a[4 * q + 3] = v.w;
    }
#pragma unroll
    for (int q = 0; q < TN / 4; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(B + k * ldb + tx * TN + 4 * q);
      b[4 * q] = v.x, b[4 * q + 1] = v.y, b[4 * q + 2] = v.z, b[4 * q + 3] = v.w;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// Split s of n items into `parts` contiguous ranges.
__device__ __forceinline__ void split_range(int n, int parts, int s, int& b, int& e) {
  b = static_cast<int>(static_cast<long long>(n) * s / parts);
  e = static_cast<int>(static_cast<long long>(n) * (s + 1) / parts);
}

// The 64 x 64 tile of Π (m x F, column-major) at rows r0.., keys i0.., into shared memory as Pis[i][r]. PF:
// through registers (fetch during the previous tile's products, stash after the barrier); else straight.
// Thread t holds elements idx = t + q·kThreads, at (i, r) = (idx / kT, idx % kT), in both forms.
template <bool PF>
struct PiTile {
  static constexpr int kN = kT * kT / kThreads;
  float reg[PF ? kN : 1];
  __device__ __forceinline__ static float at(const float* Pi, int m, int F, int r0, int i0, int i, int r) {
    return (i0 + i < F && r0 + r < m) ? Pi[static_cast<long long>(i0 + i) * m + r0 + r] : 0.f;
  }
  __device__ __forceinline__ void fetch(const float* Pi, int m, int F, int r0, int i0, int t) {
#pragma unroll
    for (int q = 0; q < kN; ++q) {
      const int idx = t + q * kThreads;
      reg[q] = at(Pi, m, F, r0, i0, idx / kT, idx % kT);
    }
  }
  // Writes the tile of (r0, i0) into Pis: the registers of the last fetch (PF) or a direct load.
  __device__ __forceinline__ void store(float* Pis, const float* Pi, int m, int F, int r0, int i0, int t) const {
    if constexpr (PF) {
#pragma unroll
      for (int q = 0; q < kN; ++q) {
        const int idx = t + q * kThreads;
        Pis[(idx / kT) * kLd + idx % kT] = reg[q];
      }
    } else {
      for (int idx = t; idx < kT * kT; idx += kThreads)
        Pis[(idx / kT) * kLd + idx % kT] = at(Pi, m, F, r0, i0, idx / kT, idx % kT);
    }
  }
};

// Shared-memory floats of each kernel for padded width DP.
template <int DP>
constexpr int first_smem_floats() {
  return DP * kLd /*Ks*/ + DP * kLd /*Ps*/ + kT * kLd /*Pis*/ + kT * (DP + 4) /*Ws*/ + kT * kLd /*Ss*/;
}
template <int DP>
constexpr int second_smem_floats() {
  return DP * kLd /*Wb*/ + DP * kLd /*Ts*/ + kT * kLd /*Pis*/ + kT * (DP + 4) /*KTs*/ + kT * kLd /*Us*/;
}

// part[(split·F + i)·d + a] = Σ_{r in split's chunks} W0t[a + r d] Π[r + i m] Σ_j P[r + j m] K[i + j F]
// PF (prefetch): the next chunk's Π tile — the one operand streamed from DRAM (m x F, read once an
// operator; P, W0ᵀ, t2 and K are small and stay in L2) — is read into registers while this chunk is computed
// and stored to shared memory after the barrier. The arithmetic, and so the result bit for bit, is the same.
template <int DP, bool PF>
__global__ void __launch_bounds__(kThreads)
    first_kernel(int m, int d, int F, const float* __restrict__ P, const float* __restrict__ Pi,
                 const float* __restrict__ K, const float* __restrict__ W0t, float* __restrict__ part) {
  extern __shared__ float4 smem4[];
  float* Ks = reinterpret_cast<float*>(smem4);  // [j][i]  key tile
  float* Ps = Ks + DP * kLd;                    // [j][r]  P chunk
  float* Pis = Ps + DP * kLd;                   // [i][r]  Π tile
  float* Ws = Pis + kT * kLd;                   // [r][a]  W0ᵀ chunk (W0t column block)
  float* Ss = Ws + kT * (DP + 4);               // [r][i]  S = Π ⊙ (P Kᵀ)
  constexpr int TM = DP / 16;
  const int t = threadIdx.x, ty = t / 16, tx = t % 16;
  const int i0 = blockIdx.x * kT;
  const int chunks = (m + kT - 1) / kT;
  int cb, ce;
  split_range(chunks, gridDim.y, blockIdx.y, cb, ce);
  const int dk = (d + 3) / 4 * 4;  // k extent of the first product (zero padded to a float4)

  for (int idx = t; idx < DP * kT; idx += kThreads) {
    const int j = idx / kT, i = idx % kT;
    Ks[j * kLd + i] = (j < d && i0 + i < F) ? K[static_cast<long long>(j) * F + i0 + i] : 0.f;
  }
  float acc[TM][4];
#pragma unroll
  for (int a = 0; a < TM; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) acc[a][b] = 0.f;

  PiTile<PF> pit;
  if constexpr (PF)
    if (cb < ce) pit.fetch(Pi, m, F, cb * kT, i0, t);

  for (int c = cb; c < ce; ++c) {
    const int r0 = c * kT;
    __syncthreads();  // previous chunk's Ss / Ws reads are done
    for (int idx = t; idx < DP * kT; idx += kThreads) {
      const int j = idx / kT, r = idx % kT;
      Ps[j * kLd + r] = (j < d && r0 + r < m) ? P[static_cast<long long>(j) * m + r0 + r] : 0.f;
    }
    pit.store(Pis, Pi, m, F, r0, i0, t);
    for (int idx = t; idx < kT * DP; idx += kThreads) {
      const int r = idx / DP, a = idx % DP;
      Ws[r * (DP + 4) + a] = (a < d && r0 + r < m) ? W0t[static_cast<long long>(r0 + r) * d + a] : 0.f;
    }
    __syncthreads();
    if constexpr (PF)
      if (c + 1 < ce) pit.fetch(Pi, m, F, (c + 1) * kT, i0, t);  // in flight during this chunk's products
    float s[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) s[a][b] = 0.f;
    tile_mac<4, 4>(s, Ps, kLd, Ks, kLd, dk, ty, tx);  // s[r][i] = Σ_j P(r, j) K(i, j)
#pragma unroll
    for (int ci = 0; ci < 4; ++ci) {
      const float4 pi = *reinterpret_cast<const float4*>(Pis + (tx * 4 + ci) * kLd + ty * 4);
      s[0][ci] *= pi.x, s[1][ci] *= pi.y, s[2][ci] *= pi.z, s[3][ci] *= pi.w;
    }
#pragma unroll
    for (int ri = 0; ri < 4; ++ri)
      *reinterpret_cast<float4*>(Ss + (ty * 4 + ri) * kLd + tx * 4) =
          make_float4(s[ri][0], s[ri][1], s[ri][2], s[ri][3]);
    __syncthreads();
    tile_mac<TM, 4>(acc, Ws, DP + 4, Ss, kLd, kT, ty, tx);  // acc[a][i] += Σ_r W0t(a, r) S(r, i)
  }
  float* out = part + static_cast<long long>(blockIdx.y) * F * d;
#pragma unroll
  for (int ci = 0; ci < 4; ++ci) {
    const int i = i0 + tx * 4 + ci;
    if (i >= F) continue;
#pragma unroll
    for (int a = 0; a < TM; ++a) {
      const int row = ty * TM + a;
      if (row < d) out[static_cast<long long>(i) * d + row] = acc[a][ci];
    }
  }
}

// part[split·m·d + r + j m] = Σ_{i in split's key tiles} Π[r + i m] (Σ_b W0t[b + r d] t2T[i + b F]) KT[j + i d]
template <int DP, bool PF>
__global__ void __launch_bounds__(kThreads)
    second_kernel(int m, int d, int F, const float* __restrict__ Pi, const float* __restrict__ KT,
                  const float* __restrict__ W0t, const float* __restrict__ t2T, float* __restrict__ part) {
  extern __shared__ float4 smem4[];
  float* Wb = reinterpret_cast<float*>(smem4);  // [b][r]  W0 rows of this chunk
  float* Ts = Wb + DP * kLd;                    // [b][i]  t2 tile
  float* Pis = Ts + DP * kLd;                   // [i][r]  Π tile
  float* KTs = Pis + kT * kLd;                  // [i][j]  key tile, row-major
  float* Us = KTs + kT * (DP + 4);              // [i][r]  U = Π ⊙ (W0 t2)
  constexpr int TN = DP / 16;
  const int t = threadIdx.x, ty = t / 16, tx = t % 16;
  const int r0 = blockIdx.x * kT;
  const int tiles = (F + kT - 1) / kT;
  int tb, te;
  split_range(tiles, gridDim.y, blockIdx.y, tb, te);
  const int dk = (d + 3) / 4 * 4;

  for (int idx = t; idx < kT * DP; idx += kThreads) {
    const int r = idx / DP, b = idx % DP;
    Wb[b * kLd + r] = (b < d && r0 + r < m) ? W0t[static_cast<long long>(r0 + r) * d + b] : 0.f;
  }
  float acc[4][TN];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < TN; ++b) acc[a][b] = 0.f;

  PiTile<PF> pit;
  if constexpr (PF)
    if (tb < te) pit.fetch(Pi, m, F, r0, tb * kT, t);

  for (int tile = tb; tile < te; ++tile) {
    const int i0 = tile * kT;
    __syncthreads();  // previous tile's Us / KTs reads are done
    for (int idx = t; idx < DP * kT; idx += kThreads) {
      const int b = idx / kT, i = idx % kT;
      Ts[b * kLd + i] = (b < d && i0 + i < F) ? t2T[static_cast<long long>(b) * F + i0 + i] : 0.f;
    }
    pit.store(Pis, Pi, m, F, r0, i0, t);
    for (int idx = t; idx < kT * DP; idx += kThreads) {
      const int i = idx / DP, j = idx % DP;
      KTs[i * (DP + 4) + j] = (j < d && i0 + i < F) ? KT[static_cast<long long>(i0 + i) * d + j] : 0.f;
    }
    __syncthreads();
    if constexpr (PF)
      if (tile + 1 < te) pit.fetch(Pi, m, F, r0, (tile + 1) * kT, t);  // in flight during this tile's products
    float u[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) u[a][b] = 0.f;
    tile_mac<4, 4>(u, Wb, kLd, Ts, kLd, dk, ty, tx);  // u[r][i] = Σ_b W0t(b, r) t2(b, i)
#pragma unroll
    for (int ci = 0; ci < 4; ++ci) {
      const float4 pi = *reinterpret_cast<const float4*>(Pis + (tx * 4 + ci) * kLd + ty * 4);
      u[0][ci] *= pi.x, u[1][ci] *= pi.y, u[2][ci] *= pi.z, u[3][ci] *= pi.w;
      *reinterpret_cast<float4*>(Us + (tx * 4 + ci) * kLd + ty * 4) =
          make_float4(u[0][ci], u[1][ci], u[2][ci], u[3][ci]);
    }
    __syncthreads();
    tile_mac<4, TN>(acc, Us, kLd, KTs, DP + 4, kT, ty, tx);  // acc[r][j] += Σ_i U(r, i) K(i, j)
  }
  float* out = part + static_cast<long long>(blockIdx.y) * m * d;
#pragma unroll
  for (int ri = 0; ri < 4; ++ri) {
    const int r = r0 + ty * 4 + ri;
    if (r >= m) continue;
#pragma unroll
    for (int b = 0; b < TN; ++b) {
      const int j = tx * TN + b;
      if (j < d) out[static_cast<long long>(j) * m + r] = acc[ri][b];
    }
  }
}

// dst[k] = Σ_s part[s n + k] (+ ridge src[k]), s in order.
__global__ void sum_splits_kernel(long long n, int splits, const float* __restrict__ part,
                                  const float* __restrict__ src, float ridge, float* __restrict__ dst) {
  for (long long k = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    float v = part[k];
    for (int s = 1; s < splits; ++s) v += part[s * n + k];
    if (src) v = __fadd_rn(v, __fmul_rn(ridge, src[k]));
    dst[k] = v;
  }
}

// KT[i d + j] = K[i + j F]
__global__ void transpose_kernel(int F, int d, const float* __restrict__ K, float* __restrict__ KT) {
  for (long long k = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; k < static_cast<long long>(F) * d;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long i = k / d, j = k % d;
    KT[k] = K[j * F + i];
  }
}

unsigned elem_grid(long long n) {
  return static_cast<unsigned>(std::max<long long>(1, std::min<long long>((n + 255) / 256, 4096)));
}

int sm_count() {
  int dev = 0, n = 0;
  MEMCAP_CUDA_CHECK(cudaGetDevice(&dev));
  MEMCAP_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return std::max(n, 1);
}

// Splits so that the grid fills the resident blocks of every multiprocessor in ONE wave (floor, not ceil: a
// second, partly filled wave doubles the time; at d <= 64, two resident blocks, m = 2047, F = 4096, a search's
// probes took 7.82 s with the ceil and 5.72 s with the floor); at most kMaxSplits and never more than the items.
constexpr int kMaxSplits = 16;
int splits_for(int blocks, int resident_per_sm, int items) {
  const int want = std::max(1, resident_per_sm) * sm_count() / blocks;
  return std::max(1, std::min({want, items, kMaxSplits}));
}

template <int DP, bool PF>
void first_impl(cudaStream_t s, int m, int d, int F, const float* P, const float* Pi, const float* K, const float* W0t,
                float* ws, float* t1) {
  const int tiles = (F + kT - 1) / kT, chunks = (m + kT - 1) / kT;
  const int bytes = first_smem_floats<DP>() * static_cast<int>(sizeof(float));
  MEMCAP_CUDA_CHECK(cudaFuncSetAttribute(first_kernel<DP, PF>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  int resident = 0;  // 2 at d <= 64 (87 KB of shared memory a block), 1 at d <= 128 (138 KB) on an H200
  MEMCAP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, first_kernel<DP, PF>, kThreads, bytes));
  const int splits = splits_for(tiles, resident, chunks);
  first_kernel<DP, PF><<<dim3(tiles, splits), kThreads, bytes, s>>>(m, d, F, P, Pi, K, W0t, ws);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg fused first");
  const long long n = static_cast<long long>(F) * d;
  sum_splits_kernel<<<elem_grid(n), 256, 0, s>>>(n, splits, ws, nullptr, 0.f, t1);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg fused first sum");
}

template <int DP, bool PF>
void second_impl(cudaStream_t s, int m, int d, int F, const float* P, const float* Pi, const float* KT,
                 const float* W0t, const float* t2T, double ridge, float* ws, float* out) {
  const int tiles = (F + kT - 1) / kT, chunks = (m + kT - 1) / kT;
  const int bytes = second_smem_floats<DP>() * static_cast<int>(sizeof(float));
  MEMCAP_CUDA_CHECK(cudaFuncSetAttribute(second_kernel<DP, PF>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  int resident = 0;
  MEMCAP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, second_kernel<DP, PF>, kThreads, bytes));
  const int splits = splits_for(chunks, resident, tiles);
  second_kernel<DP, PF><<<dim3(chunks, splits), kThreads, bytes, s>>>(m, d, F, Pi, KT, W0t, t2T, ws);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg fused second");
  const long long n = static_cast<long long>(m) * d;
  sum_splits_kernel<<<elem_grid(n), 256, 0, s>>>(n, splits, ws, P, static_cast<float>(ridge), out);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg fused second sum");
}

}  // namespace

bool cg_fused_supported(std::int64_t m, std::int64_t d, std::int64_t F) {
  return d >= 1 && d <= kCgFusedMaxDim && m >= 1 && F >= 1 && m < (std::int64_t(1) << 31) / kCgFusedMaxDim &&
         F < (std::int64_t(1) << 31) / kCgFusedMaxDim;
}

std::int64_t cg_fused_workspace_floats(std::int64_t m, std::int64_t d, std::int64_t F) {
  // Both kernels' split partials for any device (at most kMaxSplits splits, never more than the items).
  const std::int64_t tiles = (F + kT - 1) / kT, chunks = (m + kT - 1) / kT;
  const std::int64_t s1 = std::min<std::int64_t>(chunks, kMaxSplits), s2 = std::min<std::int64_t>(tiles, kMaxSplits);
  return std::max(s1 * F * d, s2 * m * d);
}

void cg_fused_transpose_keys(cudaStream_t s, std::int64_t F, std::int64_t d, const float* K, float* KT) {
  if (F * d == 0) return;
  transpose_kernel<<<elem_grid(F * d), 256, 0, s>>>(static_cast<int>(F), static_cast<int>(d), K, KT);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg fused transpose");
}

void cg_fused_first(cudaStream_t s, std::int64_t m, std::int64_t d, std::int64_t F, const float* P, const float* Pi,
                    const float* K, const float* W0t, float* ws, float* t1, bool prefetch) {
  const int mi = int(m), di = int(d), Fi = int(F);
  if (d <= 64) {
    if (prefetch) first_impl<64, true>(s, mi, di, Fi, P, Pi, K, W0t, ws, t1);
    else first_impl<64, false>(s, mi, di, Fi, P, Pi, K, W0t, ws, t1);
  } else {
    if (prefetch) first_impl<128, true>(s, mi, di, Fi, P, Pi, K, W0t, ws, t1);
    else first_impl<128, false>(s, mi, di, Fi, P, Pi, K, W0t, ws, t1);
  }
}

void cg_fused_second(cudaStream_t s, std::int64_t m, std::int64_t d, std::int64_t F, const float* P, const float* Pi,
                     const float* KT, const float* W0t, const float* t2T, double ridge, float* ws, float* out,
                     bool prefetch) {
  const int mi = int(m), di = int(d), Fi = int(F);
  if (d <= 64) {
    if (prefetch) second_impl<64, true>(s, mi, di, Fi, P, Pi, KT, W0t, t2T, ridge, ws, out);
    else second_impl<64, false>(s, mi, di, Fi, P, Pi, KT, W0t, t2T, ridge, ws, out);
  } else {
    if (prefetch) second_impl<128, true>(s, mi, di, Fi, P, Pi, KT, W0t, t2T, ridge, ws, out);
    else second_impl<128, false>(s, mi, di, Fi, P, Pi, KT, W0t, t2T, ridge, ws, out);
  }
}

}  // namespace memcap::mlp::cuda
