// L ← L + log(dp·G) for the factorised log κ_A matrix (see ramnet_kappa.cuh).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/gpu.hpp"
#include "ramnet_kappa.cuh"

namespace memcap::ramnet::cuda {
namespace {

__global__ void k_log_kappa_accumulate(const double* G, std::int64_t count, double dp, bool first, double* L) {
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double t = log(__dmul_rn(G[e], dp));
    L[e] = first ? t : __dadd_rn(L[e], t);
  }
}

}  // namespace

void log_kappa_accumulate(const double* G, std::int64_t count, int dp, bool first, double* L, cudaStream_t s) {
  if (count <= 0) return;
  std::int64_t blocks = (count + 255) / 256;
  if (blocks > (1 << 20)) blocks = 1 << 20;
  k_log_kappa_accumulate<<<static_cast<unsigned>(blocks), 256, 0, s>>>(G, count, static_cast<double>(dp), first, L);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet log_kappa_accumulate");
}

}  // namespace memcap::ramnet::cuda
