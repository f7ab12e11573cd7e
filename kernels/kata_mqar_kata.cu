// Normalized causal KATA mixer core, quadratic form, on the GPU (kata_mqar_mixers.cuh). A_ts = <ψ(q_t), ψ(k_s)>:
// M_g / Σ_g by the closed form of spec §2.7 on raw q, k (no ψ formed, as cone_kernel on the CPU), the other maps
// through ψ and its VJP from kernels/kata_feature_map.cuh (the one device ψ). Forward: one block per query tile
// streams key tiles (num and den in registers). Backward: dnum = dO/den, dden = −(dO·o)/den per row (workspace),
// then one block per key tile (dV = Aᵀ dnum, dK) and one per query tile (dQ), recomputing A and
// dA = tril(dnum Vᵀ + dden 1ᵀ) tile by tile, then the kernel VJP; fixed reduction order, no atomics.
// CPU reference: kata_head_forward / kata_head_backward, cone_kernel / cone_kernel_vjp (src/kata/mqar_mixers.cpp).
#include "kata_feature_map.cuh"
#include "kata_mqar_common.cuh"

namespace memcap::kata::mqar::cuda {
namespace {

using namespace detail;
namespace kc = ::memcap::kata::cuda;

constexpr bool is_psd_kind(MapKind K) { return K == MapKind::BlockPsd || K == MapKind::SumPsd; }

// Closed-form constants (§2.7): A = c² Σ_pairs (q_a·k_b)² + εc(‖q‖² + ‖k‖²) + ε² m (·g for M_g).
template <class T>
struct PsdConst {
  int g, m;
  bool sum;
  T c2, ec, cst;
  __device__ explicit PsdConst(const kc::DeviceMap& dm) {
    sum = dm.kind == MapKind::SumPsd;
    g = dm.g;
    m = dm.m;
    const T eps = kc::map_eps<T>(dm), c = sum ? kc::map_scale<T>(dm) : T(1);
    c2 = c * c;
    ec = eps * c;
    cst = eps * eps * T(m) * (sum ? T(1) : T(g));
  }
  __device__ int pairs() const { return sum ? g * g : g; }
  __device__ void pair(int p, int& a, int& b) const {
    if (sum) {
      a = p / g;
      b = p % g;
    } else {
      a = b = p;
    }
  }
};

// Block dot q_a · k_b of smem rows.
template <class T>
__device__ __forceinline__ T block_dot(const T* xq, const T* xk, int a, int b, int m) {
  T d = T(0);
  for (int c = 0; c < m; ++c) d += xq[a * m + c] * xk[b * m + c];
  return d;
}

// Kernel value A(q_r, k_j) from smem rows: closed form (PSD; nq, nk = squared norms) or <ψq, ψk> (pq, pk rows).
template <MapKind K, class T>
__device__ __forceinline__ T kernel_value(const PsdConst<T>& pc, const T* xq, const T* xk, T nq, T nk, const T* pq,
                                          const T* pk, int np) {
  if constexpr (is_psd_kind(K)) {
    T a = T(0);
    for (int p = 0; p < pc.pairs(); ++p) {
      int ia, ib;
      pc.pair(p, ia, ib);
      const T G = block_dot(xq, xk, ia, ib, pc.m);
      a += G * G;
    }
    return pc.c2 * a + pc.ec * (nq + nk) + pc.cst;
  } else {
    T a = T(0);
    for (int f = 0; f < np; ++f) a += pq[f] * pk[f];
    return a;
  }
}

// Per-row side data of a kRows tile held in smem: squared norms (PSD) or ψ rows (the other maps).
template <MapKind K, class T>
__device__ void tile_side(T* sN, T* sP, int ldp, T* sAux, const T* sX, int lds, const kc::DeviceMap& dm, int dh) {
  if constexpr (is_psd_kind(K)) {
    if (threadIdx.x < kRows) {
      const T* x = sX + threadIdx.x * lds;
      T n = T(0);
      for (int c = 0; c < dh; ++c) n += x[c] * x[c];
      sN[threadIdx.x] = n;
    }
  } else {
    if (threadIdx.x < kRows) sAux[threadIdx.x] = kc::psi_aux<K, T>(dm, sX + threadIdx.x * lds);
    __syncthreads();
    const int np = dm.n_features;
    for (int e = threadIdx.x; e < kRows * np; e += kThreads) {
      const int r = e / np, f = e - r * np;
      sP[r * ldp + f] = kc::psi_value<K, T>(dm, sX + r * lds, f, sAux[r]);
    }
  }
}

// Shared-memory plan of the KATA kernels: `tiles` dh-wide tiles, `scores` kRows×kRows tiles, and per-row side
// data (norms, or two ψ tiles + aux + one gradient tile of width n_ψ).
struct KataSmem {
  int dh, np, ldp;
  bool psd;
  __host__ __device__ std::size_t psi_elems() const { return psd ? 0 : static_cast<std::size_t>(kRows) * ldp; }
  template <class T>
  std::size_t bytes(int tiles, int scores) const {
    return (tiles * tile_elems(dh) + scores * kRows * kSP + 4 * kRows + 3 * psi_elems()) * sizeof(T);
  }
};

template <class T, int NC, MapKind K>
__global__ void __launch_bounds__(kThreads) kata_fwd_kernel(T* __restrict__ o, std::int64_t ldo, T* __restrict__ den,
                                                            kc::DeviceMap dm, const T* __restrict__ q,
                                                            const T* __restrict__ k, const T* __restrict__ v,
                                                            std::int64_t ld, HeadShape s, KataSmem L) {
  extern __shared__ unsigned char smem_raw[];
  const int dh = L.dh, lds = dh + 1, np = L.np, ldp = L.ldp;
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + tile_elems(dh);
  T* sV = sK + tile_elems(dh);
  T* sA = sV + tile_elems(dh);
  T* sNq = sA + kRows * kSP;
  T* sNk = sNq + kRows;
  T* sAux = sNk + kRows;
  T* sPq = sAux + 2 * kRows;
  T* sPk = sPq + L.psi_elems();
  const PsdConst<T> pc(dm);
  const HeadIndex hi(blockIdx.x, s);
  const int r = threadIdx.x / kLanes, g = threadIdx.x % kLanes;
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.y) * kRows, t = q0 + r;
  load_tile(sQ, lds, q, ld, hi, q0, dh);
  __syncthreads();
  tile_side<K>(sNq, sPq, ldp, sAux, sQ, lds, dm, dh);
  T acc[NC];
#pragma unroll
  for (int u = 0; u < NC; ++u) acc[u] = T(0);
  T dsum = T(0);
  for (std::int64_t k0 = 0; k0 <= q0; k0 += kRows) {
    __syncthreads();
    load_tile(sK, lds, k, ld, hi, k0, dh);
    load_tile(sV, lds, v, ld, hi, k0, dh);
    __syncthreads();
    tile_side<K>(sNk, sPk, ldp, sAux + kRows, sK, lds, dm, dh);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = g + kLanes * u;
      T a = T(0);
      if (k0 + j <= t && t < hi.T)
        a = kernel_value<K>(pc, sQ + r * lds, sK + j * lds, sNq[r], sNk[j], sPq + r * ldp, sPk + j * ldp, np);
      sA[r * kSP + j] = a;
      dsum += a;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < NC; ++u) {
      const int c = g + kLanes * u;
      if (c < dh) {
        T a = acc[u];
        for (int j = 0; j < kRows; ++j) a += sA[r * kSP + j] * sV[j * lds + c];
        acc[u] = a;
      }
    }
  }
  dsum = row_sum(dsum);
  if (t < hi.T) {
    const bool ok = dsum != T(0);
#pragma unroll
    for (int u = 0; u < NC; ++u) {
      const int c = g + kLanes * u;
      if (c < dh) o[hi.row(t, ldo) + c] = ok ? acc[u] / dsum : T(0);
    }
    if (g == 0) den[hi.stat(t)] = dsum;
  }
}

// dden_t = −(dO_t · o_t) / den_t (0 where den_t = 0), one thread per (head, token).
template <class T>
__global__ void kata_dden_kernel(T* __restrict__ dden, const T* __restrict__ dout, const T* __restrict__ o,
                                 std::int64_t ldo, const T* __restrict__ den, HeadShape s) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.B * s.H * s.T) return;
  const HeadIndex hi(i / s.T, s);
  const std::int64_t t = i % s.T, base = hi.row(t, ldo);
  const T dn = den[i];
  T d = T(0);
  for (int c = 0; c < s.dh; ++c) d += dout[base + c] * o[base + c];
  dden[i] = dn != T(0) ? -d / dn : T(0);
}

// dnum tile: rows of dO / den (0 where den = 0 or past T).
template <class T>
__device__ __forceinline__ void load_dnum(T* dst, int lds, const T* dout, std::int64_t ldo, const T* den,
                                          const HeadIndex& hi, std::int64_t t0, int dh) {
  for (int e = threadIdx.x; e < kRows * dh; e += kThreads) {
    const int r = e / dh, c = e - r * dh;
    const std::int64_t t = t0 + r;
    T x = T(0);
    if (t < hi.T) {
      const T dn = den[hi.stat(t)];
      x = dn != T(0) ? dout[hi.row(t, ldo) + c] / dn : T(0);
    }
    dst[r * lds + c] = x;
  }
}

// Write a kRows × dh result tile (from registers of thread (r, g)) or, for the ψ maps, chain the ψ gradient
// rows sG through psi_vjp_row first. x: the raw input rows of the tile (smem), out: global gradient rows.
template <class T, int NC, MapKind K>
__device__ void finish_grad(T* __restrict__ out, std::int64_t ldd, const HeadIndex& hi, std::int64_t t0, const T* acc,
                            const T* gpsi, T* sG, T* sOut, int ldp, const T* sX, int lds, const kc::DeviceMap& dm,
                            int dh, int np, T eps_coef, T rowsum) {
  const int r = threadIdx.x / kLanes, g = threadIdx.x % kLanes;
  const std::int64_t t = t0 + r;
  if constexpr (is_psd_kind(K)) {
    if (t < hi.T) {
#pragma unroll
      for (int u = 0; u < NC; ++u) {
        const int c = g + kLanes * u;
        if (c < dh) out[hi.row(t, ldd) + c] = acc[u] + eps_coef * rowsum * sX[r * lds + c];
      }
    }
  } else {
#pragma unroll
    for (int u = 0; u < NC + 1; ++u) {
      const int f = g + kLanes * u;
      if (f < np) sG[r * ldp + f] = gpsi[u];
    }
    __syncthreads();
    if (threadIdx.x < kRows)
      kc::psi_vjp_row<K, T>(dm, sX + threadIdx.x * lds, sG + threadIdx.x * ldp, sOut + threadIdx.x * lds);
    __syncthreads();
    if (t < hi.T) {
#pragma unroll
      for (int u = 0; u < NC; ++u) {
        const int c = g + kLanes * u;
        if (c < dh) out[hi.row(t, ldd) + c] = sOut[r * lds + c];
      }
    }
  }
}

template <class T, int NC, MapKind K>
__global__ void __launch_bounds__(kThreads) kata_dkdv_kernel(T* __restrict__ dk, T* __restrict__ dv, std::int64_t ldd,
                                                             const T* __restrict__ dout, std::int64_t ldo,
                                                             kc::DeviceMap dm, const T* __restrict__ q,
                                                             const T* __restrict__ k, const T* __restrict__ v,
                                                             std::int64_t ld, const T* __restrict__ den,
                                                             const T* __restrict__ dden, HeadShape s, KataSmem L) {
  extern __shared__ unsigned char smem_raw[];
  const int dh = L.dh, lds = dh + 1, np = L.np, ldp = L.ldp;
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + tile_elems(dh);
  T* sQ = sV + tile_elems(dh);
  T* sDn = sQ + tile_elems(dh);
  T* sA = sDn + tile_elems(dh);
  T* sdA = sA + kRows * kSP;
  T* sW = sdA + kRows * kSP;
  T* sNq = sW + kRows * kSP;
  T* sNk = sNq + kRows;
  T* sAux = sNk + kRows;  // 2 kRows: query tile, key tile
  T* sPq = sAux + 2 * kRows;
  T* sPk = sPq + L.psi_elems();
  T* sG = sPk + L.psi_elems();
  T* sdd = sAux;  // the query tile's dden (the ψ aux of the query tile is consumed before it is overwritten)
  const PsdConst<T> pc(dm);
  const HeadIndex hi(blockIdx.x, s);
  const int r = threadIdx.x / kLanes, g = threadIdx.x % kLanes;
  const std::int64_t k0 = static_cast<std::int64_t>(blockIdx.y) * kRows;
  load_tile(sK, lds, k, ld, hi, k0, dh);
  load_tile(sV, lds, v, ld, hi, k0, dh);
  __syncthreads();
  tile_side<K>(sNk, sPk, ldp, sAux + kRows, sK, lds, dm, dh);
  T ak[NC], av[NC], gk[NC + 1];
#pragma unroll
  for (int u = 0; u < NC; ++u) ak[u] = av[u] = T(0);
#pragma unroll
  for (int u = 0; u < NC + 1; ++u) gk[u] = T(0);
  T cs = T(0);  // Σ_t dA[t][r] (the ε term of the PSD closed form)
  for (std::int64_t q0 = k0; q0 < hi.T; q0 += kRows) {
    __syncthreads();
    load_tile(sQ, lds, q, ld, hi, q0, dh);
    load_dnum(sDn, lds, dout, ldo, den, hi, q0, dh);
    __syncthreads();
    tile_side<K>(sNq, sPq, ldp, sAux, sQ, lds, dm, dh);
    __syncthreads();
    if (threadIdx.x < kRows) {
      const std::int64_t t = q0 + threadIdx.x;
      sdd[threadIdx.x] = t < hi.T ? dden[hi.stat(t)] : T(0);
    }
    __syncthreads();
    const std::int64_t t = q0 + r;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = g + kLanes * u;
      T a = T(0), da = T(0);
      if (k0 + j <= t && t < hi.T) {
        a = kernel_value<K>(pc, sQ + r * lds, sK + j * lds, sNq[r], sNk[j], sPq + r * ldp, sPk + j * ldp, np);
        for (int c = 0; c < dh; ++c) da += sDn[r * lds + c] * sV[j * lds + c];
        da += sdd[r];
      }
      sA[r * kSP + j] = a;
      sdA[r * kSP + j] = da;
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < NC; ++u) {
      const int c = g + kLanes * u;
      if (c < dh) {
        T a = av[u];
        for (int i = 0; i < kRows; ++i) a += sA[i * kSP + r] * sDn[i * lds + c];
        av[u] = a;
      }
    }
    if constexpr (is_psd_kind(K)) {
      for (int i = 0; i < kRows; ++i) cs += sdA[i * kSP + r];
      for (int p = 0; p < pc.pairs(); ++p) {
        int ia, ib;
        pc.pair(p, ia, ib);
        __syncthreads();
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int j = g + kLanes * u;
          sW[r * kSP + j] = T(2) * pc.c2 * sdA[r * kSP + j] * block_dot(sQ + r * lds, sK + j * lds, ia, ib, pc.m);
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < NC; ++u) {
          const int c = g + kLanes * u;
          if (c < dh && c / pc.m == ib) {
            const int cq = c - ib * pc.m + ia * pc.m;
            T a = ak[u];
            for (int i = 0; i < kRows; ++i) a += sW[i * kSP + r] * sQ[i * lds + cq];
            ak[u] = a;
          }
        }
      }
    } else {
#pragma unroll
      for (int u = 0; u < NC + 1; ++u) {
        const int f = g + kLanes * u;
        if (f < np) {
          T a = gk[u];
          for (int i = 0; i < kRows; ++i) a += sdA[i * kSP + r] * sPq[i * ldp + f];
          gk[u] = a;
        }
      }
    }
  }
  const std::int64_t sk = k0 + r;
  if (sk < hi.T) {
#pragma unroll
    for (int u = 0; u < NC; ++u) {
      const int c = g + kLanes * u;
      if (c < dh) dv[hi.row(sk, ldd) + c] = av[u];
    }
  }
  __syncthreads();
  finish_grad<T, NC, K>(dk, ldd, hi, k0, ak, gk, sG, sQ, ldp, sK, lds, dm, dh, np, T(2) * pc.ec, cs);
}

template <class T, int NC, MapKind K>
__global__ void __launch_bounds__(kThreads) kata_dq_kernel(T* __restrict__ dq, std::int64_t ldd, const T* __restrict__ dout,
                                                           std::int64_t ldo, kc::DeviceMap dm, const T* __restrict__ q,
                                                           const T* __restrict__ k, const T* __restrict__ v,
                                                           std::int64_t ld, const T* __restrict__ den,
                                                           const T* __restrict__ dden, HeadShape s, KataSmem L) {
  extern __shared__ unsigned char smem_raw[];
  const int dh = L.dh, lds = dh + 1, np = L.np, ldp = L.ldp;
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sDn = sQ + tile_elems(dh);
  T* sK = sDn + tile_elems(dh);
  T* sV = sK + tile_elems(dh);
  T* sdA = sV + tile_elems(dh);
  T* sW = sdA + kRows * kSP;
  T* sNq = sW + kRows * kSP;  // unused by the VJP; kept for the common layout
  T* sNk = sNq + kRows;
  T* sAux = sNk + kRows;
  T* sPq = sAux + 2 * kRows;
  T* sPk = sPq + L.psi_elems();
  T* sG = sPk + L.psi_elems();
  const PsdConst<T> pc(dm);
  const HeadIndex hi(blockIdx.x, s);
  const int r = threadIdx.x / kLanes, g = threadIdx.x % kLanes;
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.y) * kRows, t = q0 + r;
  load_tile(sQ, lds, q, ld, hi, q0, dh);
  load_dnum(sDn, lds, dout, ldo, den, hi, q0, dh);
  __syncthreads();
  tile_side<K>(sNq, sPq, ldp, sAux, sQ, lds, dm, dh);
  const T ddr = t < hi.T ? dden[hi.stat(t)] : T(0);
  T aq[NC], gq[NC + 1];
#pragma unroll
  for (int u = 0; u < NC; ++u) aq[u] = T(0);
#pragma unroll
  for (int u = 0; u < NC + 1; ++u) gq[u] = T(0);
  T rs = T(0);
  for (std::int64_t k0 = 0; k0 <= q0; k0 += kRows) {
    __syncthreads();
    load_tile(sK, lds, k, ld, hi, k0, dh);
    load_tile(sV, lds, v, ld, hi, k0, dh);
    __syncthreads();
    if constexpr (!is_psd_kind(K)) {
      tile_side<K>(sNk, sPk, ldp, sAux + kRows, sK, lds, dm, dh);
      __syncthreads();
    }
    T da[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int j = g + kLanes * u;
      T x = T(0);
      if (k0 + j <= t && t < hi.T) {
        for (int c = 0; c < dh; ++c) x += sDn[r * lds + c] * sV[j * lds + c];
        x += ddr;
      }
      da[u] = x;
      rs += x;
      sdA[r * kSP + j] = x;
    }
    if constexpr (is_psd_kind(K)) {
      for (int p = 0; p < pc.pairs(); ++p) {
        int ia, ib;
        pc.pair(p, ia, ib);
        __syncthreads();
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int j = g + kLanes * u;
          sW[r * kSP + j] = T(2) * pc.c2 * da[u] * block_dot(sQ + r * lds, sK + j * lds, ia, ib, pc.m);
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < NC; ++u) {
          const int c = g + kLanes * u;
          if (c < dh && c / pc.m == ia) {
            const int ck = c - ia * pc.m + ib * pc.m;
            T a = aq[u];
            for (int j = 0; j < kRows; ++j) a += sW[r * kSP + j] * sK[j * lds + ck];
            aq[u] = a;
          }
        }
      }
    } else {
      __syncthreads();
#pragma unroll
      for (int u = 0; u < NC + 1; ++u) {
        const int f = g + kLanes * u;
        if (f < np) {
          T a = gq[u];
          for (int j = 0; j < kRows; ++j) a += sdA[r * kSP + j] * sPk[j * ldp + f];
          gq[u] = a;
        }
      }
    }
  }
  rs = row_sum(rs);
  __syncthreads();
  finish_grad<T, NC, K>(dq, ldd, hi, q0, aq, gq, sG, sK, ldp, sQ, lds, dm, dh, np, T(2) * pc.ec, rs);
}

void check_map(const MapParams& map, const HeadShape& s, const char* what) {
  check_heads(s, what);
  if (map.kind == MapKind::Softmax || map.kind == MapKind::EvenDegree)
    cuda_detail::throw_user_error(std::string(what) +
                                  ": the feature map has no finite ψ used by the KATA mixers (use m<g>, sigma<g>, "
                                  "orthant, lorentz, linear)");
  if (map.d != s.dh)
    cuda_detail::throw_user_error(std::string(what) + ": feature map built for d = " + std::to_string(map.d) +
                                  " but the head has width " + std::to_string(s.dh));
  if (!map.is_psd() && map.n_features > s.dh + 1)
    cuda_detail::throw_user_error(std::string(what) + ": explicit-ψ map wider than d_head + 1");
}

KataSmem kata_smem(const MapParams& map, const HeadShape& s) {
  KataSmem L;
  L.dh = static_cast<int>(s.dh);
  L.psd = map.is_psd();
  L.np = L.psd ? 0 : static_cast<int>(map.n_features);
  L.ldp = L.np + 1;
  return L;
}

dim3 tile_grid(const HeadShape& s) {
  return dim3(static_cast<unsigned>(s.B * s.H), static_cast<unsigned>((s.T + kRows - 1) / kRows));
}

// f(NC, K) over the dispatched instantiations.
template <class F>
void dispatch(const MapParams& map, const HeadShape& s, F&& f) {
  with_column_slots(s.dh, [&](auto nc) {
    kc::with_map_kind(map.kind, [&](auto kind) { f(nc, kind); });
  });
}

}  // namespace

template <class T>
void kata_heads_forward(T* o, std::int64_t ldo, T* den, const MapParams& map, const T* q, const T* k, const T* v,
                        std::int64_t ldqkv, const HeadShape& s, cudaStream_t stream) {
  check_map(map, s, "kata_heads_forward");
  if (s.B == 0 || s.T == 0) return;
  const KataSmem L = kata_smem(map, s);
  const kc::DeviceMap dm = kc::device_map(map);
  const std::size_t bytes = L.bytes<T>(3, 1);
  dispatch(map, s, [&](auto nc, auto kind) {
    auto kern = kata_fwd_kernel<T, decltype(nc)::value, decltype(kind)::value>;
    allow_smem(kern, bytes, "kata_heads_forward");
    kern<<<tile_grid(s), kThreads, bytes, stream>>>(o, ldo, den, dm, q, k, v, ldqkv, s, L);
    MEMCAP_CUDA_CHECK_LAUNCH("kata_fwd_kernel");
  });
}

#ifndef MEMCAP_MQAR_KATA_F64_TU
std::size_t kata_heads_backward_workspace_bytes(const MapParams&, const HeadShape& s, std::size_t elem) {
  return static_cast<std::size_t>(s.B * s.H * s.T) * elem;  // dden
}
#endif

template <class T>
void kata_heads_backward(T* dq, T* dk, T* dv, std::int64_t lddqkv, const T* dout, const T* o, std::int64_t ldo,
                         const MapParams& map, const T* q, const T* k, const T* v, std::int64_t ldqkv, const T* den,
                         const HeadShape& s, void* workspace, cudaStream_t stream) {
  check_map(map, s, "kata_heads_backward");
  if (s.B == 0 || s.T == 0) return;
  T* dden = static_cast<T*>(workspace);
  const std::int64_t rows = s.B * s.H * s.T;
  kata_dden_kernel<T><<<static_cast<unsigned>((rows + 255) / 256), 256, 0, stream>>>(dden, dout, o, ldo, den, s);
  MEMCAP_CUDA_CHECK_LAUNCH("kata_dden_kernel");
  const KataSmem L = kata_smem(map, s);
  const kc::DeviceMap dm = kc::device_map(map);
  const std::size_t bytes = L.bytes<T>(4, 3);
  dispatch(map, s, [&](auto nc, auto kind) {
    constexpr int NC = decltype(nc)::value;
    constexpr MapKind K = decltype(kind)::value;
    auto k1 = kata_dkdv_kernel<T, NC, K>;
    allow_smem(k1, bytes, "kata_heads_backward");
    k1<<<tile_grid(s), kThreads, bytes, stream>>>(dk, dv, lddqkv, dout, ldo, dm, q, k, v, ldqkv, den, dden, s, L);
    MEMCAP_CUDA_CHECK_LAUNCH("kata_dkdv_kernel");
    auto k2 = kata_dq_kernel<T, NC, K>;
    allow_smem(k2, bytes, "kata_heads_backward");
    k2<<<tile_grid(s), kThreads, bytes, stream>>>(dq, lddqkv, dout, ldo, dm, q, k, v, ldqkv, den, dden, s, L);
    MEMCAP_CUDA_CHECK_LAUNCH("kata_dq_kernel");
  });
}

#define MEMCAP_MQAR_KATA(T)                                                                                        \
  template void kata_heads_forward<T>(T*, std::int64_t, T*, const MapParams&, const T*, const T*, const T*,         \
                                      std::int64_t, const HeadShape&, cudaStream_t);                                \
  template void kata_heads_backward<T>(T*, T*, T*, std::int64_t, const T*, const T*, std::int64_t, const MapParams&, \
                                       const T*, const T*, const T*, std::int64_t, const T*, const HeadShape&, void*, \
                                       cudaStream_t);
// The float64 instantiations (tests against the CPU reference) compile in their own translation unit,
// kata_mqar_kata_f64.cu, so the two halves of this template-heavy file build in parallel.
#ifndef MEMCAP_MQAR_KATA_F64_TU
MEMCAP_MQAR_KATA(float)
#else
MEMCAP_MQAR_KATA(double)
#endif
#undef MEMCAP_MQAR_KATA

}  // namespace memcap::kata::mqar::cuda
