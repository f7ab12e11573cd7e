// Causal softmax mixer core on the GPU (kata_mqar_mixers.cuh), FlashAttention-2 shaped: the forward keeps the
// row log-sum-exp; the backward forms D_t = rowsum(dO ⊙ O), then one block per key tile accumulates dK, dV and
// one block per query tile accumulates dQ, both recomputing P = exp(q kᵀ·scale − lse) tile by tile (a fixed
// reduction order: deterministic, no atomics, nothing T×T in global memory). CPU reference:
// softmax_head_forward / softmax_head_backward (src/kata/mqar_mixers.cpp).
#include "kata_mqar_common.cuh"

namespace memcap::kata::mqar::cuda {
namespace {

using namespace detail;

template <class T, int NC>
__global__ void __launch_bounds__(kThreads) softmax_fwd_kernel(T* __restrict__ o, std::int64_t ldo, T* __restrict__ lse,
                                                               const T* __restrict__ q, const T* __restrict__ k,
                                                               const T* __restrict__ v, std::int64_t ld, HeadShape s,
                                                               T scale) {
  extern __shared__ unsigned char smem_raw[];
  const int dh = static_cast<int>(s.dh), lds = dh + 1;
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + tile_elems(dh);
  T* sV = sK + tile_elems(dh);
  T* sP = sV + tile_elems(dh);
  const HeadIndex hi(blockIdx.x, s);
  const int r = threadIdx.x / kLanes, g = threadIdx.x % kLanes;
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.y) * kRows, t = q0 + r;
  load_tile(sQ, lds, q, ld, hi, q0, dh);
  T acc[NC];
#pragma unroll
  for (int u = 0; u < NC; ++u) acc[u] = T(0);
  T m = neg_inf<T>(), l = T(0);
  for (std::int64_t k0 = 0; k0 <= q0; k0 += kRows) {
    __syncthreads();
    load_tile(sK, lds, k, ld, hi, k0, dh);
    load_tile(sV, lds, v, ld, hi, k0, dh);
    __syncthreads();
    T sc[4];
    T mx = neg_inf<T>();
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = g + kLanes * u;
      const std::int64_t sk = k0 + j;
      T d = T(0);
      for (int c = 0; c < dh; ++c) d += sQ[r * lds + c] * sK[j * lds + c];
      sc[u] = (sk <= t && t < hi.T) ? d * scale : neg_inf<T>();
      mx = sc[u] > mx ? sc[u] : mx;
    }
    mx = row_max(mx);
    const T mnew = mx > m ? mx : m;
    T psum = T(0);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const T p = sc[u] == neg_inf<T>() ? T(0) : ex(sc[u] - mnew);
      sP[r * kSP + g + kLanes * u] = p;
      psum += p;
    }
    psum = row_sum(psum);
    const T alpha = m == neg_inf<T>() ? T(0) : ex(m - mnew);
    if (mnew != neg_inf<T>()) {
      l = l * alpha + psum;
      m = mnew;
#pragma unroll
      for (int u = 0; u < NC; ++u) acc[u] *= alpha;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < NC; ++u) {
      const int c = g + kLanes * u;
      if (c < dh) {
        T a = acc[u];
        for (int j = 0; j < kRows; ++j) a += sP[r * kSP + j] * sV[j * lds + c];
        acc[u] = a;
      }
    }
  }
  if (t < hi.T) {
    const T inv = T(1) / l;
#pragma unroll
    for (int u = 0; u < NC; ++u) {
      const int c = g + kLanes * u;
      if (c < dh) o[hi.row(t, ldo) + c] = acc[u] * inv;
    }
    if (g == 0) lse[hi.stat(t)] = m + lg(l);
  }
}

// D_t = Σ_c dO[t,c] O[t,c], one thread per (head, token).
template <class T>
__global__ void softmax_rowdot_kernel(T* __restrict__ D, const T* __restrict__ dout, const T* __restrict__ o,
                                      std::int64_t ldo, HeadShape s) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.B * s.H * s.T) return;
  const HeadIndex hi(i / s.T, s);
  const std::int64_t t = i % s.T, base = hi.row(t, ldo);
  T d = T(0);
  for (int c = 0; c < s.dh; ++c) d += dout[base + c] * o[base + c];
  D[i] = d;
}

// P[tq][j] and dS[tq][j] of query row r of the tile at q0 against key row j of the tile at k0 (thread (r, g) does
// j = g + 8u); writes sP / sdS (either may be null).
template <class T>
__device__ __forceinline__ void softmax_ps(T* sP, T* sdS, const T* sQ, const T* sdO, const T* sK, const T* sV, int lds,
                                           int dh, int r, int g, std::int64_t q0, std::int64_t k0, std::int64_t Tn,
                                           T lse_r, T D_r, T scale) {
  const std::int64_t t = q0 + r;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int j = g + kLanes * u;
    const std::int64_t sk = k0 + j;
    T p = T(0), ds = T(0);
    if (sk <= t && t < Tn) {
      T d = T(0), dp = T(0);
      for (int c = 0; c < dh; ++c) {
        d += sQ[r * lds + c] * sK[j * lds + c];
        dp += sdO[r * lds + c] * sV[j * lds + c];
      }
      p = ex(d * scale - lse_r);
      ds = p * (dp - D_r);
    }
    if (sP) sP[r * kSP + j] = p;
    sdS[r * kSP + j] = ds;
  }
}

template <class T, int NC>
__global__ void __launch_bounds__(kThreads) softmax_dkdv_kernel(T* __restrict__ dk, T* __restrict__ dv, std::int64_t ldd,
                                                                const T* __restrict__ dout, std::int64_t ldo,
                                                                const T* __restrict__ q, const T* __restrict__ k,
                                                                const T* __restrict__ v, std::int64_t ld,
                                                                const T* __restrict__ lse, const T* __restrict__ D,
                                                                HeadShape s, T scale) {
  extern __shared__ unsigned char smem_raw[];
  const int dh = static_cast<int>(s.dh), lds = dh + 1;
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + tile_elems(dh);
  T* sQ = sV + tile_elems(dh);
  T* sdO = sQ + tile_elems(dh);
  T* sP = sdO + tile_elems(dh);
  T* sdS = sP + kRows * kSP;
  T* sL = sdS + kRows * kSP;
  T* sD = sL + kRows;
  const HeadIndex hi(blockIdx.x, s);
  const int r = threadIdx.x / kLanes, g = threadIdx.x % kLanes;
  const std::int64_t k0 = static_cast<std::int64_t>(blockIdx.y) * kRows;
  load_tile(sK, lds, k, ld, hi, k0, dh);
  load_tile(sV, lds, v, ld, hi, k0, dh);
  T ak[NC], av[NC];
#pragma unroll
  for (int u = 0; u < NC; ++u) ak[u] = av[u] = T(0);
  for (std::int64_t q0 = k0; q0 < hi.T; q0 += kRows) {
    __syncthreads();
    load_tile(sQ, lds, q, ld, hi, q0, dh);
    load_tile(sdO, lds, dout, ldo, hi, q0, dh);
    if (threadIdx.x < kRows) {
      const std::int64_t t = q0 + threadIdx.x;
      sL[threadIdx.x] = t < hi.T ? lse[hi.stat(t)] : T(0);
      sD[threadIdx.x] = t < hi.T ? D[hi.stat(t)] : T(0);
    }
    __syncthreads();
    softmax_ps(sP, sdS, sQ, sdO, sK, sV, lds, dh, r, g, q0, k0, hi.T, sL[r], sD[r], scale);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < NC; ++u) {
      const int c = g + kLanes * u;
      if (c < dh) {
        T a = av[u], b = ak[u];
        for (int i = 0; i < kRows; ++i) {
          a += sP[i * kSP + r] * sdO[i * lds + c];
          b += sdS[i * kSP + r] * sQ[i * lds + c];
        }
        av[u] = a;
        ak[u] = b;
      }
    }
  }
  const std::int64_t sk = k0 + r;
  if (sk < hi.T) {
#pragma unroll
    for (int u = 0; u < NC; ++u) {
      const int c = g + kLanes * u;
      if (c < dh) {
        dk[hi.row(sk, ldd) + c] = ak[u] * scale;
        dv[hi.row(sk, ldd) + c] = av[u];
      }
    }
  }
}

template <class T, int NC>
__global__ void __launch_bounds__(kThreads) softmax_dq_kernel(T* __restrict__ dq, std::int64_t ldd, const T* __restrict__ dout,
                                                              std::int64_t ldo, const T* __restrict__ q,
                                                              const T* __restrict__ k, const T* __restrict__ v,
                                                              std::int64_t ld, const T* __restrict__ lse,
                                                              const T* __restrict__ D, HeadShape s, T scale) {
  extern __shared__ unsigned char smem_raw[];
  const int dh = static_cast<int>(s.dh), lds = dh + 1;
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sdO = sQ + tile_elems(dh);
  T* sK = sdO + tile_elems(dh);
  T* sV = sK + tile_elems(dh);
  T* sdS = sV + tile_elems(dh);
  const HeadIndex hi(blockIdx.x, s);
  const int r = threadIdx.x / kLanes, g = threadIdx.x % kLanes;
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.y) * kRows, t = q0 + r;
  load_tile(sQ, lds, q, ld, hi, q0, dh);
  load_tile(sdO, lds, dout, ldo, hi, q0, dh);
  const T L = t < hi.T ? lse[hi.stat(t)] : T(0), Dr = t < hi.T ? D[hi.stat(t)] : T(0);
  T aq[NC];
#pragma unroll
  for (int u = 0; u < NC; ++u) aq[u] = T(0);
  for (std::int64_t k0 = 0; k0 <= q0; k0 += kRows) {
    __syncthreads();
    load_tile(sK, lds, k, ld, hi, k0, dh);
    load_tile(sV, lds, v, ld, hi, k0, dh);
    __syncthreads();
    softmax_ps<T>(nullptr, sdS, sQ, sdO, sK, sV, lds, dh, r, g, q0, k0, hi.T, L, Dr, scale);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < NC; ++u) {
      const int c = g + kLanes * u;
      if (c < dh) {
        T a = aq[u];
        for (int j = 0; j < kRows; ++j) a += sdS[r * kSP + j] * sK[j * lds + c];
        aq[u] = a;
      }
    }
  }
  if (t < hi.T) {
#pragma unroll
    for (int u = 0; u < NC; ++u) {
      const int c = g + kLanes * u;
      if (c < dh) dq[hi.row(t, ldd) + c] = aq[u] * scale;
    }
  }
}

dim3 tile_grid(const HeadShape& s) {
  return dim3(static_cast<unsigned>(s.B * s.H), static_cast<unsigned>((s.T + kRows - 1) / kRows));
}

}  // namespace

template <class T>
void softmax_heads_forward(T* o, std::int64_t ldo, T* lse, const T* q, const T* k, const T* v, std::int64_t ldqkv,
                           const HeadShape& s, double scale, cudaStream_t stream) {
  check_heads(s, "softmax_heads_forward");
  if (s.B == 0 || s.T == 0) return;
  const std::size_t bytes = (3 * tile_elems(static_cast<int>(s.dh)) + kRows * kSP) * sizeof(T);
  with_column_slots(s.dh, [&](auto nc) {
    auto kern = softmax_fwd_kernel<T, decltype(nc)::value>;
    allow_smem(kern, bytes, "softmax_heads_forward");
    kern<<<tile_grid(s), kThreads, bytes, stream>>>(o, ldo, lse, q, k, v, ldqkv, s, static_cast<T>(scale));
    MEMCAP_CUDA_CHECK_LAUNCH("softmax_fwd_kernel");
  });
}

std::size_t softmax_heads_backward_workspace_bytes(const HeadShape& s, std::size_t elem) {
  return static_cast<std::size_t>(s.B * s.H * s.T) * elem;  // D_t
}

template <class T>
void softmax_heads_backward(T* dq, T* dk, T* dv, std::int64_t lddqkv, const T* dout, const T* o, std::int64_t ldo,
                            const T* q, const T* k, const T* v, std::int64_t ldqkv, const T* lse, const HeadShape& s,
                            double scale, void* workspace, cudaStream_t stream) {
  check_heads(s, "softmax_heads_backward");
  if (s.B == 0 || s.T == 0) return;
  T* D = static_cast<T*>(workspace);
  const std::int64_t rows = s.B * s.H * s.T;
  softmax_rowdot_kernel<T><<<static_cast<unsigned>((rows + 255) / 256), 256, 0, stream>>>(D, dout, o, ldo, s);
  MEMCAP_CUDA_CHECK_LAUNCH("softmax_rowdot_kernel");
  const int dh = static_cast<int>(s.dh);
  const T sc = static_cast<T>(scale);
  with_column_slots(s.dh, [&](auto nc) {
    constexpr int NC = decltype(nc)::value;
    const std::size_t b1 = (4 * tile_elems(dh) + 2 * kRows * kSP + 2 * kRows) * sizeof(T);
    auto k1 = softmax_dkdv_kernel<T, NC>;
    allow_smem(k1, b1, "softmax_heads_backward");
    k1<<<tile_grid(s), kThreads, b1, stream>>>(dk, dv, lddqkv, dout, ldo, q, k, v, ldqkv, lse, D, s, sc);
    MEMCAP_CUDA_CHECK_LAUNCH("softmax_dkdv_kernel");
    const std::size_t b2 = (4 * tile_elems(dh) + kRows * kSP) * sizeof(T);
    auto k2 = softmax_dq_kernel<T, NC>;
    allow_smem(k2, b2, "softmax_heads_backward");
    k2<<<tile_grid(s), kThreads, b2, stream>>>(dq, lddqkv, dout, ldo, q, k, v, ldqkv, lse, D, s, sc);
    MEMCAP_CUDA_CHECK_LAUNCH("softmax_dq_kernel");
  });
}

#define MEMCAP_MQAR_SOFTMAX(T)                                                                                       \
  template void softmax_heads_forward<T>(T*, std::int64_t, T*, const T*, const T*, const T*, std::int64_t,            \
                                         const HeadShape&, double, cudaStream_t);                                     \
  template void softmax_heads_backward<T>(T*, T*, T*, std::int64_t, const T*, const T*, std::int64_t, const T*,      \
                                          const T*, const T*, std::int64_t, const T*, const HeadShape&, double, void*, \
                                          cudaStream_t);
MEMCAP_MQAR_SOFTMAX(float)
MEMCAP_MQAR_SOFTMAX(double)
#undef MEMCAP_MQAR_SOFTMAX

}  // namespace memcap::kata::mqar::cuda
