// Chunked delta-rule mixer core on the GPU (kata_mqar_mixers.cuh, spec §2.11.4, §5.4): one block per (sequence,
// head) walks the chunks in order; the state S (n_ψ × dh) lives in global workspace and is streamed through shared
// memory in tiles of kFT features, ψ(q̂), ψ(k̂) of a tile are formed on the fly from the chunk's rows with the one
// device ψ (kernels/kata_feature_map.cuh). Per chunk (C × C and C × dh blocks in shared memory):
//   A_kk = strict tril(Ψk Ψkᵀ), A_qk = tril(Ψq Ψkᵀ), V' = V − Ψk S   (one pass over the feature tiles)
//   Tinv = Π_j (I + (−N)^{2^j}), N = diag(β) A_kk;  U = Tinv diag(β) V';  O = Ψq S + A_qk U;  S += Ψkᵀ U.
// Backward: the forward again, keeping every chunk's incoming state (workspace), then the reverse scan of §5.4
// carrying dS (workspace), writing dΨq, dΨk rows (workspace), then ψ's VJP per row (psi_vjp_row).
// CPU reference: delta_head_forward / delta_head_backward (src/kata/mqar_mixers.cpp), then FeatureMap::vjp.
#include "kata_feature_map.cuh"
#include "kata_mqar_common.cuh"

namespace memcap::kata::mqar::cuda {
namespace {

using namespace detail;
namespace kc = ::memcap::kata::cuda;

constexpr int kFT = 16;  // features per state tile

// Shared-memory plan (element counts) for chunk C, head width dh.
struct DeltaLayout {
  int C = 0, dh = 0, n = 0;
  __host__ __device__ int lds() const { return dh + 1; }
  __host__ __device__ int ldc() const { return C + 1; }
  __host__ __device__ int ldp() const { return kFT + 1; }
  __host__ __device__ std::size_t raw() const { return static_cast<std::size_t>(C) * lds(); }
  __host__ __device__ std::size_t cc() const { return static_cast<std::size_t>(C) * ldc(); }
  __host__ __device__ std::size_t cd() const { return static_cast<std::size_t>(C) * dh; }
  __host__ __device__ std::size_t fd() const { return static_cast<std::size_t>(kFT) * dh; }
  __host__ __device__ std::size_t cp() const { return static_cast<std::size_t>(C) * ldp(); }
  __host__ __device__ std::size_t elems() const { return 2 * raw() + 5 * cc() + 5 * cd() + 2 * fd() + 2 * cp() + 3 * C; }
};

template <class T>
struct DeltaSmem {
  T *sQ, *sK, *sAkk, *sAqk, *sR, *sP, *sTmp, *sV, *sdO, *sU, *sX, *sdW, *sS, *sdS, *sPq, *sPk, *sAuxQ, *sAuxK, *sBeta;
  __device__ DeltaSmem(T* base, const DeltaLayout& L) {
    T* p = base;
    auto take = [&](std::size_t n) {
      T* r = p;
      p += n;
      return r;
    };
    sQ = take(L.raw());
    sK = take(L.raw());
    sAkk = take(L.cc());
    sAqk = take(L.cc());
    sR = take(L.cc());
    sP = take(L.cc());
    sTmp = take(L.cc());
    sV = take(L.cd());
    sdO = take(L.cd());
    sU = take(L.cd());
    sX = take(L.cd());
    sdW = take(L.cd());
    sS = take(L.fd());
    sdS = take(L.fd());
    sPq = take(L.cp());
    sPk = take(L.cp());
    sAuxQ = take(L.C);
    sAuxK = take(L.C);
    sBeta = take(L.C);
  }
};

struct DeltaArgs {
  kc::DeviceMap dm;
  HeadShape s;
  DeltaLayout L;
  std::int64_t ld, ldo, ldd;
};

// Load chunk rows [t0, t0 + len): q̂, k̂ (padded rows), v, β, ψ aux; optionally dO. Rows >= len are zero.
template <class T, MapKind K>
__device__ void load_chunk(const DeltaSmem<T>& m, const DeltaArgs& a, const HeadIndex& hi, const T* q, const T* k,
                           const T* v, const T* beta, const T* dout, std::int64_t t0, int len) {
  const int C = a.L.C, dh = a.L.dh, lds = a.L.lds();
  for (int e = threadIdx.x; e < C * dh; e += kThreads) {
    const int t = e / dh, c = e - t * dh;
    const bool ok = t < len;
    const std::int64_t tt = t0 + t;
    m.sQ[t * lds + c] = ok ? q[hi.row(tt, a.ld) + c] : T(0);
    m.sK[t * lds + c] = ok ? k[hi.row(tt, a.ld) + c] : T(0);
    m.sV[t * dh + c] = ok ? v[hi.row(tt, a.ld) + c] : T(0);
    if (dout) m.sdO[t * dh + c] = ok ? dout[hi.row(tt, a.ldo) + c] : T(0);
  }
  if (threadIdx.x < C) m.sBeta[threadIdx.x] = static_cast<int>(threadIdx.x) < len ? beta[hi.beta(t0 + threadIdx.x)] : T(0);
  __syncthreads();
  if (threadIdx.x < C) {
    m.sAuxQ[threadIdx.x] = kc::psi_aux<K, T>(a.dm, m.sQ + threadIdx.x * lds);
    m.sAuxK[threadIdx.x] = kc::psi_aux<K, T>(a.dm, m.sK + threadIdx.x * lds);
  }
  __syncthreads();
}

// ψ tile of features [f0, f0 + kFT) for the chunk rows (0 past len or n_ψ); with_q: Ψq too.
template <class T, MapKind K>
__device__ void form_psi(const DeltaSmem<T>& m, const DeltaArgs& a, int f0, int len, bool with_q) {
  const int C = a.L.C, lds = a.L.lds(), ldp = a.L.ldp(), n = a.L.n;
  for (int e = threadIdx.x; e < C * kFT; e += kThreads) {
    const int t = e / kFT, f = e - t * kFT, fi = f0 + f;
    const bool ok = t < len && fi < n;
    m.sPk[t * ldp + f] = ok ? kc::psi_value<K, T>(a.dm, m.sK + t * lds, fi, m.sAuxK[t]) : T(0);
    if (with_q) m.sPq[t * ldp + f] = ok ? kc::psi_value<K, T>(a.dm, m.sQ + t * lds, fi, m.sAuxQ[t]) : T(0);
  }
}

// Load rows [f0, f0 + kFT) of an n × dh state into a kFT × dh tile (0 past n).
template <class T>
__device__ void load_state_tile(T* dst, const T* S, int f0, const DeltaLayout& L) {
  for (int e = threadIdx.x; e < kFT * L.dh; e += kThreads) {
    const int f = e / L.dh;
    dst[e] = f0 + f < L.n ? S[static_cast<std::size_t>(f0) * L.dh + e] : T(0);
  }
}

// Pass 1 of a chunk: V' = V − Ψk S (in sV), A_kk (strict lower), A_qk (lower incl. diagonal); optionally
// O = Ψq S (into sdO's slot `o_acc`) and Ψk dS (into sX).
template <class T, MapKind K>
__device__ void chunk_pass1(const DeltaSmem<T>& m, const DeltaArgs& a, const T* S, const T* dS, T* o_acc, int len) {
  const DeltaLayout& L = a.L;
  const int C = L.C, dh = L.dh, ldc = L.ldc(), ldp = L.ldp();
  for (int e = threadIdx.x; e < C * C; e += kThreads) {
    const int t = e / C, s = e - t * C;
    m.sAkk[t * ldc + s] = T(0);
    m.sAqk[t * ldc + s] = T(0);
  }
  for (int e = threadIdx.x; e < C * dh; e += kThreads) {
    if (o_acc) o_acc[e] = T(0);
    if (dS) m.sX[e] = T(0);
  }
  for (int f0 = 0; f0 < L.n; f0 += kFT) {
    __syncthreads();
    load_state_tile(m.sS, S, f0, L);
    if (dS) load_state_tile(m.sdS, dS, f0, L);
    form_psi<T, K>(m, a, f0, len, true);
    __syncthreads();
    for (int e = threadIdx.x; e < C * dh; e += kThreads) {
      const int t = e / dh, c = e - t * dh;
      const T* pk = m.sPk + t * ldp;
      const T* pq = m.sPq + t * ldp;
      T vp = T(0), o = T(0), x = T(0);
#pragma unroll
      for (int f = 0; f < kFT; ++f) {
        const T sv = m.sS[f * dh + c];
        vp += pk[f] * sv;
        o += pq[f] * sv;
        if (dS) x += pk[f] * m.sdS[f * dh + c];
      }
      m.sV[e] -= vp;
      if (o_acc) o_acc[e] += o;
      if (dS) m.sX[e] += x;
    }
    for (int e = threadIdx.x; e < C * C; e += kThreads) {
      const int t = e / C, s = e - t * C;
      if (s > t) continue;
      const T* pk = m.sPk + s * ldp;
      T kk = T(0), qk = T(0);
#pragma unroll
      for (int f = 0; f < kFT; ++f) {
        kk += m.sPk[t * ldp + f] * pk[f];
        qk += m.sPq[t * ldp + f] * pk[f];
      }
      if (s < t) m.sAkk[t * ldc + s] += kk;
      m.sAqk[t * ldc + s] += qk;
    }
  }
  __syncthreads();
}

// out = A · B for C×C matrices with row stride ldc (out must not alias A or B); plus_a: out = A + A · B.
template <class T>
__device__ void mm_cc(T* out, const T* A, const T* B, int C, int ldc, bool plus_a) {
  for (int e = threadIdx.x; e < C * C; e += kThreads) {
    const int i = e / C, j = e - i * C;
    T acc = plus_a ? A[i * ldc + j] : T(0);
    for (int k = 0; k < C; ++k) acc += A[i * ldc + k] * B[k * ldc + j];
    out[i * ldc + j] = acc;
  }
}
template <class T>
__device__ void copy_cc(T* dst, const T* src, int C, int ldc) {
  for (int e = threadIdx.x; e < C * C; e += kThreads) {
    const int i = e / C, j = e - i * C;
    dst[i * ldc + j] = src[i * ldc + j];
  }
}

// Tinv (in sR) by Neumann doubling, then U = Tinv diag(β) V' (in sU). Uses sP, sTmp.
template <class T>
__device__ void chunk_inverse_u(const DeltaSmem<T>& m, const DeltaLayout& L, int len) {
  const int C = L.C, dh = L.dh, ldc = L.ldc();
  for (int e = threadIdx.x; e < C * C; e += kThreads) {
    const int t = e / C, s = e - t * C;
    m.sP[t * ldc + s] = s < t ? -m.sBeta[t] * m.sAkk[t * ldc + s] : T(0);
    m.sR[t * ldc + s] = t == s ? T(1) : T(0);
  }
  __syncthreads();
  for (int p = 1; p < len; p *= 2) {
    mm_cc(m.sTmp, m.sR, m.sP, C, ldc, true);  // R (I + P)
    __syncthreads();
    copy_cc(m.sR, m.sTmp, C, ldc);
    __syncthreads();
    if (2 * p < len) {
      mm_cc(m.sTmp, m.sP, m.sP, C, ldc, false);
      __syncthreads();
      copy_cc(m.sP, m.sTmp, C, ldc);
      __syncthreads();
    }
  }
  for (int e = threadIdx.x; e < C * dh; e += kThreads) {
    const int t = e / dh, c = e - t * dh;
    T u = T(0);
    for (int s = 0; s < C; ++s) u += m.sR[t * ldc + s] * m.sBeta[s] * m.sV[s * dh + c];
    m.sU[e] = u;
  }
  __syncthreads();
}

// S_out = S_in + Ψkᵀ U (tile by tile; S_out may equal S_in).
template <class T, MapKind K>
__device__ void chunk_state_update(const DeltaSmem<T>& m, const DeltaArgs& a, const T* Sin, T* Sout, int len) {
  const DeltaLayout& L = a.L;
  const int C = L.C, dh = L.dh, ldp = L.ldp();
  for (int f0 = 0; f0 < L.n; f0 += kFT) {
    __syncthreads();
    load_state_tile(m.sS, Sin, f0, L);
    form_psi<T, K>(m, a, f0, len, false);
    __syncthreads();
    for (int e = threadIdx.x; e < kFT * dh; e += kThreads) {
      const int f = e / dh, c = e - f * dh;
      if (f0 + f >= L.n) continue;
      T x = m.sS[e];
      for (int t = 0; t < C; ++t) x += m.sPk[t * ldp + f] * m.sU[t * dh + c];
      Sout[static_cast<std::size_t>(f0) * dh + e] = x;
    }
  }
  __syncthreads();
}

template <class T>
__device__ void zero_state(T* S, const DeltaLayout& L) {
  for (std::size_t e = threadIdx.x; e < static_cast<std::size_t>(L.n) * L.dh; e += kThreads) S[e] = T(0);
  __syncthreads();
}

template <class T, MapKind K>
__global__ void __launch_bounds__(kThreads) delta_fwd_kernel(T* __restrict__ o, const T* __restrict__ q,
                                                             const T* __restrict__ k, const T* __restrict__ v,
                                                             const T* __restrict__ beta, T* __restrict__ state,
                                                             DeltaArgs a) {
  extern __shared__ unsigned char smem_raw[];
  const DeltaSmem<T> m(reinterpret_cast<T*>(smem_raw), a.L);
  const HeadIndex hi(blockIdx.x, a.s);
  const int C = a.L.C, dh = a.L.dh, ldc = a.L.ldc();
  T* S = state + static_cast<std::size_t>(blockIdx.x) * a.L.n * dh;
  zero_state(S, a.L);
  for (std::int64_t t0 = 0; t0 < hi.T; t0 += C) {
    const int len = static_cast<int>(hi.T - t0 < C ? hi.T - t0 : C);
    __syncthreads();
    load_chunk<T, K>(m, a, hi, q, k, v, beta, nullptr, t0, len);
    chunk_pass1<T, K>(m, a, S, nullptr, m.sdO, len);
    chunk_inverse_u(m, a.L, len);
    for (int e = threadIdx.x; e < len * dh; e += kThreads) {
      const int t = e / dh, c = e - t * dh;
      T x = m.sdO[e];
      for (int s = 0; s <= t; ++s) x += m.sAqk[t * ldc + s] * m.sU[s * dh + c];
      o[hi.row(t0 + t, a.ldo) + c] = x;
    }
    chunk_state_update<T, K>(m, a, S, S, len);
  }
}

// Backward, one block per head: (1) chunk states forward; (2) reverse scan writing dv, dβ, dΨq, dΨk.
template <class T, MapKind K>
__global__ void __launch_bounds__(kThreads) delta_bwd_kernel(T* __restrict__ dv, T* __restrict__ dbeta,
                                                             T* __restrict__ dpsi_q, T* __restrict__ dpsi_k,
                                                             const T* __restrict__ dout, const T* __restrict__ q,
                                                             const T* __restrict__ k, const T* __restrict__ v,
                                                             const T* __restrict__ beta, T* __restrict__ states,
                                                             T* __restrict__ dstate, DeltaArgs a) {
  extern __shared__ unsigned char smem_raw[];
  const DeltaSmem<T> m(reinterpret_cast<T*>(smem_raw), a.L);
  const HeadIndex hi(blockIdx.x, a.s);
  const int C = a.L.C, dh = a.L.dh, ldc = a.L.ldc(), ldp = a.L.ldp(), n = a.L.n;
  const std::int64_t nc = (hi.T + C - 1) / C;
  const std::size_t nd = static_cast<std::size_t>(n) * dh;
  T* St = states + static_cast<std::size_t>(blockIdx.x) * nc * nd;
  T* dS = dstate + static_cast<std::size_t>(blockIdx.x) * nd;
  T* gq = dpsi_q + static_cast<std::size_t>(blockIdx.x) * hi.T * n;
  T* gk = dpsi_k + static_cast<std::size_t>(blockIdx.x) * hi.T * n;
  zero_state(St, a.L);
  zero_state(dS, a.L);
  for (std::int64_t i = 0; i + 1 < nc; ++i) {
    const std::int64_t t0 = i * C;
    const int len = static_cast<int>(hi.T - t0 < C ? hi.T - t0 : C);
    __syncthreads();
    load_chunk<T, K>(m, a, hi, q, k, v, beta, nullptr, t0, len);
    chunk_pass1<T, K>(m, a, St + i * nd, nullptr, nullptr, len);
    chunk_inverse_u(m, a.L, len);
    chunk_state_update<T, K>(m, a, St + i * nd, St + (i + 1) * nd, len);
  }
  for (std::int64_t i = nc - 1; i >= 0; --i) {
    const std::int64_t t0 = i * C;
    const int len = static_cast<int>(hi.T - t0 < C ? hi.T - t0 : C);
    const T* S = St + i * nd;
    __syncthreads();
    load_chunk<T, K>(m, a, hi, q, k, v, beta, dout, t0, len);
    chunk_pass1<T, K>(m, a, S, dS, nullptr, len);  // sV = V', sX = Ψk dS_+
    chunk_inverse_u(m, a.L, len);                  // sR = Tinv, sU = U
    // dA_qk = tril(dO Uᵀ) (sP);  dU = tril(A_qk)ᵀ dO + Ψk dS_+ (sX, in place)
    for (int e = threadIdx.x; e < C * C; e += kThreads) {
      const int t = e / C, s = e - t * C;
      T x = T(0);
      if (s <= t)
        for (int c = 0; c < dh; ++c) x += m.sdO[t * dh + c] * m.sU[s * dh + c];
      m.sP[t * ldc + s] = x;
    }
    for (int e = threadIdx.x; e < C * dh; e += kThreads) {
      const int t = e / dh, c = e - t * dh;
      T x = m.sX[e];
      for (int s = t; s < C; ++s) x += m.sAqk[s * ldc + t] * m.sdO[s * dh + c];
      m.sX[e] = x;
    }
    __syncthreads();
    // dTinv = dU (diag(β) V')ᵀ (sTmp);  dW = Tinvᵀ dU (sdW)
    for (int e = threadIdx.x; e < C * C; e += kThreads) {
      const int t = e / C, s = e - t * C;
      T x = T(0);
      for (int c = 0; c < dh; ++c) x += m.sX[t * dh + c] * m.sV[s * dh + c];
      m.sTmp[t * ldc + s] = x * m.sBeta[s];
    }
    for (int e = threadIdx.x; e < C * dh; e += kThreads) {
      const int t = e / dh, c = e - t * dh;
      T x = T(0);
      for (int s = 0; s < C; ++s) x += m.sR[s * ldc + t] * m.sX[s * dh + c];
      m.sdW[e] = x;
    }
    __syncthreads();
    // dN = −Tinvᵀ dTinv Tinvᵀ, strictly lower: Tinvᵀ dTinv into sAqk (A_qk is consumed), then dN into sTmp.
    for (int e = threadIdx.x; e < C * C; e += kThreads) {
      const int t = e / C, s = e - t * C;
      T x = T(0);
      for (int r = 0; r < C; ++r) x += m.sR[r * ldc + t] * m.sTmp[r * ldc + s];
      m.sAqk[t * ldc + s] = x;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < C * C; e += kThreads) {
      const int t = e / C, s = e - t * C;
      T x = T(0);
      if (s < t)
        for (int r = 0; r < C; ++r) x -= m.sAqk[t * ldc + r] * m.sR[s * ldc + r];
      m.sTmp[t * ldc + s] = x;
    }
    __syncthreads();
    // dv = diag(β) dW;  dβ = rowsum(dW ⊙ V') + rowsum(dN ⊙ strict tril(A_kk))
    for (int e = threadIdx.x; e < len * dh; e += kThreads) {
      const int t = e / dh, c = e - t * dh;
      dv[hi.row(t0 + t, a.ldd) + c] = m.sBeta[t] * m.sdW[e];
    }
    if (threadIdx.x < len) {
      const int t = threadIdx.x;
      T x = T(0);
      for (int c = 0; c < dh; ++c) x += m.sdW[t * dh + c] * m.sV[t * dh + c];
      T y = T(0);
      for (int s = 0; s < t; ++s) y += m.sTmp[t * ldc + s] * m.sAkk[t * ldc + s];
      dbeta[hi.beta(t0 + t)] = x + y;
    }
    // Feature tiles: dΨq, dΨk rows and dS_in = dS_+ + Ψqᵀ dO − Ψkᵀ dV'.
    for (int f0 = 0; f0 < n; f0 += kFT) {
      __syncthreads();
      load_state_tile(m.sS, S, f0, a.L);
      load_state_tile(m.sdS, dS, f0, a.L);
      form_psi<T, K>(m, a, f0, len, true);
      __syncthreads();
      for (int e = threadIdx.x; e < len * kFT; e += kThreads) {
        const int t = e / kFT, f = e - t * kFT, fi = f0 + f;
        if (fi >= n) continue;
        const T bt = m.sBeta[t];
        T xq = T(0), xk = T(0);
        for (int c = 0; c < dh; ++c) {
          const T sv = m.sS[f * dh + c];
          xq += m.sdO[t * dh + c] * sv;
          xk += m.sU[t * dh + c] * m.sdS[f * dh + c] - bt * m.sdW[t * dh + c] * sv;
        }
        for (int s = 0; s < C; ++s) {
          const T pk = m.sPk[s * ldp + f];
          xq += m.sP[t * ldc + s] * pk;
          xk += (bt * m.sTmp[t * ldc + s] + m.sBeta[s] * m.sTmp[s * ldc + t]) * pk + m.sP[s * ldc + t] * m.sPq[s * ldp + f];
        }
        const std::size_t row = static_cast<std::size_t>(t0 + t) * n + fi;
        gq[row] = xq;
        gk[row] = xk;
      }
      for (int e = threadIdx.x; e < kFT * dh; e += kThreads) {
        const int f = e / dh, c = e - f * dh;
        if (f0 + f >= n) continue;
        T x = m.sdS[e];
        for (int t = 0; t < C; ++t)
          x += m.sPq[t * ldp + f] * m.sdO[t * dh + c] - m.sPk[t * ldp + f] * m.sBeta[t] * m.sdW[t * dh + c];
        dS[static_cast<std::size_t>(f0) * dh + e] = x;
      }
    }
  }
}

// dX rows = J_ψ(X)ᵀ dΨ rows (psi_vjp_row), one thread per (head, token), for q̂ (y = 0) and k̂ (y = 1).
template <class T, MapKind K>
__global__ void delta_psi_vjp_kernel(T* __restrict__ dq, T* __restrict__ dk, const T* __restrict__ dpsi_q,
                                     const T* __restrict__ dpsi_k, const T* __restrict__ q, const T* __restrict__ k,
                                     DeltaArgs a) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.s.B * a.s.H * a.s.T) return;
  const HeadIndex hi(i / a.s.T, a.s);
  const std::int64_t t = i % a.s.T;
  const bool is_k = blockIdx.y == 1;
  const T* x = (is_k ? k : q) + hi.row(t, a.ld);
  const T* g = (is_k ? dpsi_k : dpsi_q) + static_cast<std::size_t>(i) * a.L.n;
  T gx[128];
  kc::psi_vjp_row<K, T>(a.dm, x, g, gx);
  T* out = (is_k ? dk : dq) + hi.row(t, a.ldd);
  for (int c = 0; c < a.L.dh; ++c) out[c] = gx[c];
}

DeltaArgs delta_args(const MapParams& map, const HeadShape& s, std::int64_t chunk, const char* what) {
  check_heads(s, what);
  if (map.kind == MapKind::Softmax || map.kind == MapKind::EvenDegree)
    cuda_detail::throw_user_error(std::string(what) + ": the feature map has no finite ψ (use m<g>, sigma<g>, orthant, lorentz, linear)");
  if (map.d != s.dh)
    cuda_detail::throw_user_error(std::string(what) + ": feature map built for d = " + std::to_string(map.d) +
                                  " but the head has width " + std::to_string(s.dh));
  if (chunk < 1 || chunk > kThreads)
    cuda_detail::throw_user_error(std::string(what) + ": chunk size " + std::to_string(chunk) + " must be in [1, 256]");
  DeltaArgs a;
  a.dm = kc::device_map(map);
  a.s = s;
  a.L.C = static_cast<int>(chunk);
  a.L.dh = static_cast<int>(s.dh);
  a.L.n = static_cast<int>(map.n_features);
  return a;
}

template <class T>
std::size_t delta_smem_bytes(const DeltaLayout& L, const char* what) {
  const std::size_t bytes = L.elems() * sizeof(T);
  check_smem(bytes, what);  // e.g. chunk 64 at d_head 64 needs 216 KB in float
  return bytes;
}

}  // namespace

std::size_t delta_heads_forward_workspace_bytes(const MapParams& map, const HeadShape& s, std::int64_t,
                                                std::size_t elem) {
  return static_cast<std::size_t>(s.B * s.H) * static_cast<std::size_t>(map.n_features) * s.dh * elem;  // S
}

std::size_t delta_heads_backward_workspace_bytes(const MapParams& map, const HeadShape& s, std::int64_t chunk,
                                                 std::size_t elem) {
  const std::size_t heads = static_cast<std::size_t>(s.B * s.H), n = static_cast<std::size_t>(map.n_features);
  const std::size_t nc = chunk > 0 ? static_cast<std::size_t>((s.T + chunk - 1) / chunk) : 0;
  // chunk states + dS + dΨq + dΨk
  return heads * (nc * n * s.dh + n * s.dh + 2 * static_cast<std::size_t>(s.T) * n) * elem;
}

template <class T>
void delta_heads_forward(T* o, std::int64_t ldo, const MapParams& map, const T* q, const T* k, const T* v,
                         std::int64_t ldqkv, const T* beta, const HeadShape& s, std::int64_t chunk, void* workspace,
                         cudaStream_t stream) {
  DeltaArgs a = delta_args(map, s, chunk, "delta_heads_forward");
  if (s.B == 0 || s.T == 0) return;
  a.ld = ldqkv;
  a.ldo = ldo;
  a.ldd = 0;
  const std::size_t bytes = delta_smem_bytes<T>(a.L, "delta_heads_forward");
  kc::with_map_kind(map.kind, [&](auto kind) {
    auto kern = delta_fwd_kernel<T, decltype(kind)::value>;
    allow_smem(kern, bytes);
    kern<<<static_cast<unsigned>(s.B * s.H), kThreads, bytes, stream>>>(o, q, k, v, beta, static_cast<T*>(workspace), a);
    MEMCAP_CUDA_CHECK_LAUNCH("delta_fwd_kernel");
  });
}

template <class T>
void delta_heads_backward(T* dq, T* dk, T* dv, std::int64_t lddqkv, T* dbeta, const T* dout, std::int64_t ldo,
                          const MapParams& map, const T* q, const T* k, const T* v, std::int64_t ldqkv, const T* beta,
                          const HeadShape& s, std::int64_t chunk, void* workspace, cudaStream_t stream) {
  DeltaArgs a = delta_args(map, s, chunk, "delta_heads_backward");
  if (s.B == 0 || s.T == 0) return;
  a.ld = ldqkv;
  a.ldo = ldo;
  a.ldd = lddqkv;
  const std::size_t heads = static_cast<std::size_t>(s.B * s.H), n = static_cast<std::size_t>(a.L.n);
  const std::size_t nc = static_cast<std::size_t>((s.T + chunk - 1) / chunk);
  T* states = static_cast<T*>(workspace);
  T* dstate = states + heads * nc * n * s.dh;
  T* dpsi_q = dstate + heads * n * s.dh;
  T* dpsi_k = dpsi_q + heads * static_cast<std::size_t>(s.T) * n;
  const std::size_t bytes = delta_smem_bytes<T>(a.L, "delta_heads_backward");
  kc::with_map_kind(map.kind, [&](auto kind) {
    constexpr MapKind K = decltype(kind)::value;
    auto kern = delta_bwd_kernel<T, K>;
    allow_smem(kern, bytes);
    kern<<<static_cast<unsigned>(heads), kThreads, bytes, stream>>>(dv, dbeta, dpsi_q, dpsi_k, dout, q, k, v, beta,
                                                                      states, dstate, a);
    MEMCAP_CUDA_CHECK_LAUNCH("delta_bwd_kernel");
    const std::int64_t rows = s.B * s.H * s.T;
    delta_psi_vjp_kernel<T, K><<<dim3(static_cast<unsigned>((rows + 127) / 128), 2), 128, 0, stream>>>(
        dq, dk, dpsi_q, dpsi_k, q, k, a);
    MEMCAP_CUDA_CHECK_LAUNCH("delta_psi_vjp_kernel");
  });
}

#define MEMCAP_MQAR_DELTA(T)                                                                                         \
  template void delta_heads_forward<T>(T*, std::int64_t, const MapParams&, const T*, const T*, const T*,               \
                                       std::int64_t, const T*, const HeadShape&, std::int64_t, void*, cudaStream_t);  \
  template void delta_heads_backward<T>(T*, T*, T*, std::int64_t, T*, const T*, std::int64_t, const MapParams&,        \
                                        const T*, const T*, const T*, std::int64_t, const T*, const HeadShape&,        \
                                        std::int64_t, void*, cudaStream_t);
MEMCAP_MQAR_DELTA(float)
MEMCAP_MQAR_DELTA(double)
#undef MEMCAP_MQAR_DELTA

}  // namespace memcap::kata::mqar::cuda
