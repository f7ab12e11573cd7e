// Fused float32 operator of the data-dependent CG (see mlp_cg.cuh, "fused operator"). The operator
//   Op(P) = (Π ⊙ (W0ᵀ Gv W0 (Π ⊙ (P Kᵀ)))) K + λ P
// chains two products through an m x F Hadamard factor; the cuBLAS form writes and re-reads four m x F
// tensors an iteration. Here each half is one kernel that keeps its m x F tile in shared memory:
//   first:  t1 = W0ᵀ·(Π ⊙ (P Kᵀ))            (d x F; blocks over key tiles x row-chunk splits)
//   second: out = (Π ⊙ (W0 t2)) K + λ P       (m x d; blocks over row chunks x key-tile splits)
// with t2 = Gv t1 (d x d x F, cuBLAS) in between. Both are 64 x 64 shared-memory tiles, 256 threads,
// register tiles of 4 x 4 (4 x 8 at d > 64), float accumulation in a fixed order; the splits write
// partial sums that one elementwise pass adds in split order, so a run is bitwise reproducible.
// Three forms (CgFusedKind): plain (SIMT FMAs), prefetch (the same arithmetic, the next Π tile read during the
// current one) and tf32x3 (the same tiling on mma.sync tensor cores in error-compensated 3xTF32, operand tiles
// double-buffered with cp.async; the default of the variant table in src/mlp/cg_cuda.cpp at d <= 64).
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda_check.cuh"
#include "smem_limit.cuh"
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

// ---- 3xTF32 tensor-core form (CgFusedKind::tf32x3) ----------------------------------------------------
// The same two kernels with every 64-deep product on mma.sync m16n8k8 TF32 tensor cores in the error-
// compensated 3xTF32 form: x = big + small with big = tf32(x), small = tf32(x − big), and a·b ≈ a_s·b_b +
// a_b·b_s + a_b·b_b (the small·small term, ~2⁻²² relative, dropped), float32 accumulation. The result is a
// float32-accurate operator (host float64 check in tests/gpu/test_mlp_construct_cuda.cpp), not bitwise equal
// to the SIMT form. Warps: 8, each a 16 x 32 piece of the 64 x 64 Hadamard tile; Π is read straight from
// global memory into the accumulator layout (no shared copy), the next tile's during the current products.
// Shared layouts: k-major operands with a row stride ≡ 8 (mod 32) and m-major ones with ≡ 4 (mod 32), so
// the fragment loads are free of bank conflicts.
constexpr int kLdK = kT + 8;  // 72: k-major 64-wide tile

__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void split_tf32(float x, unsigned& big, unsigned& small) {
  big = to_tf32(x);
  small = to_tf32(x - __uint_as_float(big));
}
__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// acc[mt][nt] (16 x 8 accumulator tiles at rows m0 + 16 mt, cols n0 + 8 nt) += Σ_{k < K} A(m, k) B(k, n), K a
// multiple of 8. A(m, k) = As[k·lda + m] (AK: k-major) or As[m·lda + k]; B(k, n) = Bs[k·ldb + n].
// Accumulator element e of a tile is at row g + 8·(e / 2), col 2·t + e % 2 (g = lane / 4, t = lane % 4).
template <int MT, int NT, bool AK>
__device__ __forceinline__ void warp_mac_3xtf32(float (&acc)[MT][NT][4], const float* As, int lda,
                                                const float* Bs, int ldb, int K, int m0, int n0, int lane) {
  const int g = lane >> 2, t = lane & 3;
  auto A = [&](int m, int k) { return AK ? As[k * lda + m] : As[m * lda + k]; };
#pragma unroll 2
  for (int k0 = 0; k0 < K; k0 += 8) {
    unsigned ab[MT][4], as[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int m = m0 + 16 * mt + g;
      split_tf32(A(m, k0 + t), ab[mt][0], as[mt][0]);
      split_tf32(A(m + 8, k0 + t), ab[mt][1], as[mt][1]);
      split_tf32(A(m, k0 + t + 4), ab[mt][2], as[mt][2]);
      split_tf32(A(m + 8, k0 + t + 4), ab[mt][3], as[mt][3]);
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int n = n0 + 8 * nt + g;
      unsigned b0b, b0s, b1b, b1s;
      split_tf32(Bs[(k0 + t) * ldb + n], b0b, b0s);
      split_tf32(Bs[(k0 + t + 4) * ldb + n], b1b, b1s);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_tf32(acc[mt][nt], as[mt], b0b, b1b);
        mma_tf32(acc[mt][nt], ab[mt], b0s, b1s);
        mma_tf32(acc[mt][nt], ab[mt], b0b, b1b);
      }
    }
  }
}

// Asynchronous 4-byte global -> shared copy (zero-filled when !valid; src must still be a global address).
__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Π at the accumulator positions of a warp's 16 x 32 piece (rows r0 + rw.., keys i0 + cw..), zero outside.
__device__ __forceinline__ void load_pi_frag(float (&pi)[4][4], const float* __restrict__ Pi, int m, int F, int r0,
                                             int i0, int rw, int cw, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = r0 + rw + g + 8 * (e >> 1), i = i0 + cw + 8 * nt + 2 * t + (e & 1);
      pi[nt][e] = (r < m && i < F) ? __ldg(Pi + static_cast<long long>(i) * m + r) : 0.f;
    }
}

// Ps / Ws (first) and Ts / KTs (second) are double-buffered: the next chunk's copies (cp.async) are in flight
// during the current chunk's products.
template <int DP>
constexpr int first_tc_smem_floats() {
  return DP * kLdK /*Ks*/ + 2 * DP * kLdK /*Ps x2*/ + 2 * kT * (DP + 8) /*Ws x2*/ + kT * kLdK /*Ss*/;
}
template <int DP>
constexpr int second_tc_smem_floats() {
  return DP * kLdK /*Wb*/ + 2 * DP * kLdK /*Ts x2*/ + kT * (kT + 4) /*Us*/ + 2 * kT * (DP + 8) /*KTs x2*/;
}

// As first_kernel: part[(split·F + i)·d + a] = Σ_r W0t[a + r d] Π[r + i m] Σ_j P[r + j m] K[i + j F].
template <int DP>
__global__ void __launch_bounds__(kThreads)
    first_tc_kernel(int m, int d, int F, const float* __restrict__ P, const float* __restrict__ Pi,
                    const float* __restrict__ K, const float* __restrict__ W0t, float* __restrict__ part) {
  extern __shared__ float4 smem4[];
  float* Ks = reinterpret_cast<float*>(smem4);  // [j][i]  key tile (k-major B of S)
  float* Ps = Ks + DP * kLdK;                   // 2 x [j][r]  P chunk (k-major A of S)
  float* Ws = Ps + 2 * DP * kLdK;               // 2 x [r][a]  W0ᵀ chunk (k-major A of t1)
  float* Ss = Ws + 2 * kT * (DP + 8);           // [r][i]  S = Π ⊙ (P Kᵀ) (k-major B of t1)
  constexpr int MT = DP / 64;                   // t1 rows per warp: 16·MT
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const int g = lane >> 2, tq = lane & 3;
  const int i0 = blockIdx.x * kT;
  const int chunks = (m + kT - 1) / kT;
  int cb, ce;
  split_range(chunks, gridDim.y, blockIdx.y, cb, ce);
  const int dk = (d + 7) / 8 * 8;
  const int rw = 16 * (w >> 1), cw = 32 * (w & 1);  // the warp's piece of S (rows, keys)
  const int aw = 16 * MT * (w >> 1);                // the warp's rows of t1

  // Chunk c's P and W0ᵀ rows into buffer b (zero outside m x d).
  auto issue = [&](int c, int b) {
    const int r0 = c * kT;
    float* Pb = Ps + b * DP * kLdK;
    float* Wb = Ws + b * kT * (DP + 8);
    for (int idx = t; idx < DP * kT; idx += kThreads) {
      const int j = idx / kT, r = idx % kT;
      const bool ok = j < d && r0 + r < m;
      cp_async4(Pb + j * kLdK + r, ok ? P + static_cast<long long>(j) * m + r0 + r : P, ok);
    }
    for (int idx = t; idx < kT * DP; idx += kThreads) {
      const int r = idx / DP, a = idx % DP;
      const bool ok = a < d && r0 + r < m;
      cp_async4(Wb + r * (DP + 8) + a, ok ? W0t + static_cast<long long>(r0 + r) * d + a : W0t, ok);
    }
  };
  if (cb < ce) issue(cb, 0);
  cp_async_commit();
  for (int idx = t; idx < DP * kT; idx += kThreads) {
    const int j = idx / kT, i = idx % kT;
    Ks[j * kLdK + i] = (j < d && i0 + i < F) ? K[static_cast<long long>(j) * F + i0 + i] : 0.f;
  }
  float acc[MT][4][4] = {};
  float pin[4][4], pic[4][4];
  if (cb < ce) load_pi_frag(pin, Pi, m, F, cb * kT, i0, rw, cw, lane);

  for (int c = cb; c < ce; ++c) {
    const int buf = (c - cb) & 1;
    __syncthreads();  // the other buffer (chunk c − 1) and Ss are no longer read
    if (c + 1 < ce) issue(c + 1, buf ^ 1);
    cp_async_commit();
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) pic[nt][e] = pin[nt][e];
    if (c + 1 < ce) load_pi_frag(pin, Pi, m, F, (c + 1) * kT, i0, rw, cw, lane);  // in flight during the products
    cp_async_wait<1>();  // chunk c's copies (all but the newest group) have landed
    __syncthreads();
    float sacc[1][4][4] = {};
    warp_mac_3xtf32<1, 4, true>(sacc, Ps + buf * DP * kLdK, kLdK, Ks, kLdK, dk, rw, cw, lane);  // S = P Kᵀ
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int col = cw + 8 * nt + 2 * tq;
      *reinterpret_cast<float2*>(Ss + (rw + g) * kLdK + col) =
          make_float2(sacc[0][nt][0] * pic[nt][0], sacc[0][nt][1] * pic[nt][1]);
      *reinterpret_cast<float2*>(Ss + (rw + g + 8) * kLdK + col) =
          make_float2(sacc[0][nt][2] * pic[nt][2], sacc[0][nt][3] * pic[nt][3]);
    }
    __syncthreads();
    // t1(a, i) += Σ_r W0t(a, r) S(r, i)
    warp_mac_3xtf32<MT, 4, true>(acc, Ws + buf * kT * (DP + 8), DP + 8, Ss, kLdK, kT, aw, cw, lane);
  }
  cp_async_wait<0>();
  float* out = part + static_cast<long long>(blockIdx.y) * F * d;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int a = aw + 16 * mt + g + 8 * (e >> 1), i = i0 + cw + 8 * nt + 2 * tq + (e & 1);
        if (a < d && i < F) out[static_cast<long long>(i) * d + a] = acc[mt][nt][e];
      }
}

// As second_kernel: part[split·m·d + r + j m] = Σ_i Π[r + i m] (Σ_b W0t[b + r d] t2T[i + b F]) KT[j + i d].
template <int DP>
__global__ void __launch_bounds__(kThreads)
    second_tc_kernel(int m, int d, int F, const float* __restrict__ Pi, const float* __restrict__ KT,
                     const float* __restrict__ W0t, const float* __restrict__ t2T, float* __restrict__ part) {
  extern __shared__ float4 smem4[];
  float* Wb = reinterpret_cast<float*>(smem4);  // [b][r]  W0 rows of this chunk (k-major A of U)
  float* Ts = Wb + DP * kLdK;                   // 2 x [b][i]  t2 tile (k-major B of U)
  float* Us = Ts + 2 * DP * kLdK;               // [r][i]  U = Π ⊙ (W0 t2) (m-major A of out)
  float* KTs = Us + kT * (kT + 4);              // 2 x [i][j]  key tile (k-major B of out)
  constexpr int NT = DP / 16;                   // out columns per warp: 8·NT = DP / 2
  const int t = threadIdx.x, lane = t & 31, w = t >> 5;
  const int g = lane >> 2, tq = lane & 3;
  const int r0 = blockIdx.x * kT;
  const int tiles = (F + kT - 1) / kT;
  int tb, te;
  split_range(tiles, gridDim.y, blockIdx.y, tb, te);
  const int dk = (d + 7) / 8 * 8;
  const int rw = 16 * (w >> 1), cw = 32 * (w & 1);  // the warp's piece of U (rows, keys)
  const int jw = (DP / 2) * (w & 1);                // the warp's columns of out (rows: rw)

  // Key tile `tile`'s t2 columns and key rows into buffer b (zero outside F x d).
  auto issue = [&](int tile, int b) {
    const int i0 = tile * kT;
    float* Tb = Ts + b * DP * kLdK;
    float* Kb = KTs + b * kT * (DP + 8);
    for (int idx = t; idx < DP * kT; idx += kThreads) {
      const int bb = idx / kT, i = idx % kT;
      const bool ok = bb < d && i0 + i < F;
      cp_async4(Tb + bb * kLdK + i, ok ? t2T + static_cast<long long>(bb) * F + i0 + i : t2T, ok);
    }
    for (int idx = t; idx < kT * DP; idx += kThreads) {
      const int i = idx / DP, j = idx % DP;
      const bool ok = j < d && i0 + i < F;
      cp_async4(Kb + i * (DP + 8) + j, ok ? KT + static_cast<long long>(i0 + i) * d + j : KT, ok);
    }
  };
  if (tb < te) issue(tb, 0);
  cp_async_commit();
  for (int idx = t; idx < kT * DP; idx += kThreads) {
    const int r = idx / DP, b = idx % DP;
    Wb[b * kLdK + r] = (b < d && r0 + r < m) ? W0t[static_cast<long long>(r0 + r) * d + b] : 0.f;
  }
  float acc[1][NT][4] = {};
  float pin[4][4], pic[4][4];
  if (tb < te) load_pi_frag(pin, Pi, m, F, r0, tb * kT, rw, cw, lane);

  for (int tile = tb; tile < te; ++tile) {
    const int buf = (tile - tb) & 1;
    __syncthreads();  // the other buffer (tile − 1) and Us are no longer read
    if (tile + 1 < te) issue(tile + 1, buf ^ 1);
    cp_async_commit();
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) pic[nt][e] = pin[nt][e];
    if (tile + 1 < te) load_pi_frag(pin, Pi, m, F, r0, (tile + 1) * kT, rw, cw, lane);  // in flight during the products
    cp_async_wait<1>();  // tile's copies have landed
    __syncthreads();
    float u[1][4][4] = {};
    warp_mac_3xtf32<1, 4, true>(u, Wb, kLdK, Ts + buf * DP * kLdK, kLdK, dk, rw, cw, lane);  // U = W0ᵀ-rows · t2
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int col = cw + 8 * nt + 2 * tq;
      *reinterpret_cast<float2*>(Us + (rw + g) * (kT + 4) + col) =
          make_float2(u[0][nt][0] * pic[nt][0], u[0][nt][1] * pic[nt][1]);
      *reinterpret_cast<float2*>(Us + (rw + g + 8) * (kT + 4) + col) =
          make_float2(u[0][nt][2] * pic[nt][2], u[0][nt][3] * pic[nt][3]);
    }
    __syncthreads();
    // out(r, j) += Σ_i U(r, i) K(i, j)
    warp_mac_3xtf32<1, NT, false>(acc, Us, kT + 4, KTs + buf * kT * (DP + 8), DP + 8, kT, rw, jw, lane);
  }
  cp_async_wait<0>();
  float* out = part + static_cast<long long>(blockIdx.y) * m * d;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = r0 + rw + g + 8 * (e >> 1), j = jw + 8 * nt + 2 * tq + (e & 1);
      if (r < m && j < d) out[static_cast<long long>(j) * m + r] = acc[0][nt][e];
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

// The kernel and its dynamic shared memory of each form.
template <int DP>
auto first_kernel_of(CgFusedKind k) {
  return k == CgFusedKind::tf32x3 ? first_tc_kernel<DP>
         : k == CgFusedKind::prefetch ? first_kernel<DP, true>
                                      : first_kernel<DP, false>;
}
template <int DP>
int first_smem_bytes(CgFusedKind k) {
  return (k == CgFusedKind::tf32x3 ? first_tc_smem_floats<DP>() : first_smem_floats<DP>()) *
         static_cast<int>(sizeof(float));
}
template <int DP>
auto second_kernel_of(CgFusedKind k) {
  return k == CgFusedKind::tf32x3 ? second_tc_kernel<DP>
         : k == CgFusedKind::prefetch ? second_kernel<DP, true>
                                      : second_kernel<DP, false>;
}
template <int DP>
int second_smem_bytes(CgFusedKind k) {
  return (k == CgFusedKind::tf32x3 ? second_tc_smem_floats<DP>() : second_smem_floats<DP>()) *
         static_cast<int>(sizeof(float));
}

template <int DP>
void first_impl(cudaStream_t s, CgFusedKind kind, int m, int d, int F, const float* P, const float* Pi,
                const float* K, const float* W0t, float* ws, float* t1) {
  const int tiles = (F + kT - 1) / kT, chunks = (m + kT - 1) / kT;
  const auto kern = first_kernel_of<DP>(kind);
  const int bytes = first_smem_bytes<DP>(kind);
  ::memcap::cuda_detail::raise_dynamic_smem(kern, bytes);
  int resident = 0;  // SIMT form: 2 at d <= 64 (87 KB of shared memory a block), 1 at d <= 128 (138 KB) on an H200
  MEMCAP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kern, kThreads, bytes));
  const int splits = splits_for(tiles, resident, chunks);
  kern<<<dim3(tiles, splits), kThreads, bytes, s>>>(m, d, F, P, Pi, K, W0t, ws);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg fused first");
  const long long n = static_cast<long long>(F) * d;
  sum_splits_kernel<<<elem_grid(n), 256, 0, s>>>(n, splits, ws, nullptr, 0.f, t1);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg fused first sum");
}

template <int DP>
void second_impl(cudaStream_t s, CgFusedKind kind, int m, int d, int F, const float* P, const float* Pi,
                 const float* KT, const float* W0t, const float* t2T, double ridge, float* ws, float* out) {
  const int tiles = (F + kT - 1) / kT, chunks = (m + kT - 1) / kT;
  const auto kern = second_kernel_of<DP>(kind);
  const int bytes = second_smem_bytes<DP>(kind);
  ::memcap::cuda_detail::raise_dynamic_smem(kern, bytes);
  int resident = 0;
  MEMCAP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kern, kThreads, bytes));
  const int splits = splits_for(chunks, resident, tiles);
  kern<<<dim3(chunks, splits), kThreads, bytes, s>>>(m, d, F, Pi, KT, W0t, t2T, ws);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg fused second");
  const long long n = static_cast<long long>(m) * d;
  sum_splits_kernel<<<elem_grid(n), 256, 0, s>>>(n, splits, ws, P, static_cast<float>(ridge), out);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg fused second sum");
}

}  // namespace

bool cg_fused_fits(std::int64_t d, CgFusedKind kind) {
  int dev = 0, optin = 0;
  MEMCAP_CUDA_CHECK(cudaGetDevice(&dev));
  MEMCAP_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int need = d <= 64 ? std::max(first_smem_bytes<64>(kind), second_smem_bytes<64>(kind))
                           : std::max(first_smem_bytes<128>(kind), second_smem_bytes<128>(kind));
  return need <= optin;
}

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
                    const float* K, const float* W0t, float* ws, float* t1, CgFusedKind kind) {
  if (d <= 64)
    first_impl<64>(s, kind, int(m), int(d), int(F), P, Pi, K, W0t, ws, t1);
  else
    first_impl<128>(s, kind, int(m), int(d), int(F), P, Pi, K, W0t, ws, t1);
}

void cg_fused_second(cudaStream_t s, std::int64_t m, std::int64_t d, std::int64_t F, const float* P, const float* Pi,
                     const float* KT, const float* W0t, const float* t2T, double ridge, float* ws, float* out,
                     CgFusedKind kind) {
  if (d <= 64)
    second_impl<64>(s, kind, int(m), int(d), int(F), P, Pi, KT, W0t, t2T, ridge, ws, out);
  else
    second_impl<128>(s, kind, int(m), int(d), int(F), P, Pi, KT, W0t, t2T, ridge, ws, out);
}

}  // namespace memcap::mlp::cuda
