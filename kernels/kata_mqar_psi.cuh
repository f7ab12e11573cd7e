// Explicit feature rows of the MQAR KATA cores that form ψ (kernels/kata_mqar_chunked.cu, kata_mqar_psi_gemm.cu):
// ψ of every head row into a [heads][Tp][np] buffer and, for the PSD maps, the VJP of ψ back into the head rows. Both
// use the one device ψ of kata_feature_map.cuh (CPU twin: FeatureMap::apply / FeatureMap::vjp). Device code only.
#pragma once
#include <cstdint>

#include "kata_feature_map.cuh"

namespace memcap::kata::mqar::cuda::detail {

// Rows r = bh·Tp + t of `heads` = nb·H (sequence b = bh / H, head h = bh % H) with Tp >= T rows each (rows past T
// padded with zeros), np >= n_ψ columns (columns past n_ψ zero). Head rows of x: x[(b·T + t)·ld + h·dh + j].
struct PsiRows {
  std::int64_t heads, H, T, Tp, dh;
  int np;
  __host__ __device__ std::int64_t rows() const { return heads * Tp; }
};

constexpr int kPsiRowWarps = 8;  // rows per block of psi_rows_kernel (one warp each)

// phi[r][f] = ψ_f(head row of x); lane 0 forms the row's ψ aux (a norm for the Lorentz maps), the lanes walk f.
template <class T, MapKind K>
__global__ void psi_rows_kernel(T* __restrict__ phi, const T* __restrict__ x, std::int64_t ld,
                                ::memcap::kata::cuda::DeviceMap dm, PsiRows g) {
  namespace kc = ::memcap::kata::cuda;
  const int lane = threadIdx.x % 32;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kPsiRowWarps + threadIdx.x / 32; r < g.rows();
       r += static_cast<std::int64_t>(gridDim.x) * kPsiRowWarps) {  // the same r for a warp's lanes
    const std::int64_t t = r % g.Tp, bh = r / g.Tp, h = bh % g.H, b = bh / g.H;
    T* out = phi + r * g.np;
    if (t >= g.T) {
      for (int f = lane; f < g.np; f += 32) out[f] = T(0);
      continue;
    }
    const T* row = x + (b * g.T + t) * ld + h * g.dh;
    T aux = T(0);
    if (lane == 0) aux = kc::psi_aux<K, T>(dm, row);
    aux = __shfl_sync(0xffffffffu, aux, 0);
    for (int f = lane; f < g.np; f += 32) out[f] = kc::psi_value<K, T>(dm, row, f, aux);
  }
}

// PSD maps (M_g, Σ_g): dx head row = J_ψ(x row)ᵀ gphi row for the rows t < T, one thread per coordinate (fixed
// summation order, no atomics); dx is OVERWRITTEN.
template <class T, MapKind K>
__global__ void psi_vjp_psd_kernel(T* __restrict__ dx, std::int64_t lddx, const T* __restrict__ x, std::int64_t ld,
                                   const T* __restrict__ gphi, ::memcap::kata::cuda::DeviceMap dm, PsiRows g) {
  namespace kc = ::memcap::kata::cuda;
  const std::int64_t n = g.heads * g.T * g.dh;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = e % g.dh, row = e / g.dh, t = row % g.T, bh = row / g.T, h = bh % g.H, b = bh / g.H;
    const T* xr = x + (b * g.T + t) * ld + h * g.dh;
    const T* gr = gphi + (bh * g.Tp + t) * g.np;
    dx[(b * g.T + t) * lddx + h * g.dh + c] = kc::psi_vjp_coord_psd<K, T>(dm, xr, gr, static_cast<int>(c));
  }
}

}  // namespace memcap::kata::mqar::cuda::detail
