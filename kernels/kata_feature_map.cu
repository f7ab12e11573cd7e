// Row launchers of the device feature maps (kernels/kata_feature_map.cuh): ψ of fp32 rows (used by `kata
// capacity`'s state and readout GEMMs) and the VJP of ψ (tested against FeatureMap::vjp in float64).
#include "cuda_check.cuh"
#include "kata_feature_map.cuh"

namespace memcap::kata::cuda {
namespace {

constexpr int kThreads = 256;

template <MapKind K>
__global__ void psi_aux_kernel(DeviceMap mp, const float* __restrict__ X, std::int64_t rows, float* __restrict__ aux) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) aux[r] = psi_aux<K>(mp, X + r * mp.d);
}

template <MapKind K>
__global__ void psi_rows_kernel(DeviceMap mp, const float* __restrict__ X, std::int64_t rows,
                                float* __restrict__ out, std::int64_t ld_out, const float* __restrict__ aux) {
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t n = mp.n_features;
  if (idx >= rows * n) return;
  const std::int64_t r = idx / n;
  const int f = static_cast<int>(idx % n);
  out[r * ld_out + f] = psi_value<K>(mp, X + r * mp.d, f, aux[r]);
}

template <MapKind K>
__global__ void psi_vjp_kernel(DeviceMap mp, const float* __restrict__ X, const float* __restrict__ G,
                               std::int64_t rows, float* __restrict__ dX) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) psi_vjp_row<K>(mp, X + r * mp.d, G + r * mp.n_features, dX + r * mp.d);
}

unsigned blocks(std::int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

void check_device_map(const DeviceMap& mp) {
  if (mp.kind == MapKind::EvenDegree || mp.kind == MapKind::Softmax)
    cuda_detail::throw_device_error("device feature map: no device psi for deg<2r> or softmax (internal misuse)");
}

}  // namespace

void launch_psi_rows(const DeviceMap& mp, const float* X, std::int64_t rows, float* out, std::int64_t ld_out,
                     float* aux, cudaStream_t stream) {
  check_device_map(mp);
  if (rows <= 0) return;
  with_map_kind(mp.kind, [&](auto kind) {
    constexpr MapKind K = decltype(kind)::value;
    psi_aux_kernel<K><<<blocks(rows), kThreads, 0, stream>>>(mp, X, rows, aux);
    MEMCAP_CUDA_CHECK_LAUNCH("psi_aux_kernel");
    psi_rows_kernel<K><<<blocks(rows * mp.n_features), kThreads, 0, stream>>>(mp, X, rows, out, ld_out, aux);
    MEMCAP_CUDA_CHECK_LAUNCH("psi_rows_kernel");
  });
}

void launch_psi_vjp_rows(const DeviceMap& mp, const float* X, const float* G, std::int64_t rows, float* dX,
                         cudaStream_t stream) {
  check_device_map(mp);
  if (rows <= 0) return;
  with_map_kind(mp.kind, [&](auto kind) {
    constexpr MapKind K = decltype(kind)::value;
    psi_vjp_kernel<K><<<blocks(rows), kThreads, 0, stream>>>(mp, X, G, rows, dX);
    MEMCAP_CUDA_CHECK_LAUNCH("psi_vjp_kernel");
  });
}

}  // namespace memcap::kata::cuda
