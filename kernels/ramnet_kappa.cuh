// CUDA kernel of the log κ_A matrix (spec ramnet.md §2.1, §5 costs): after the per-factor overlap GEMM
// G_u = P_q,u P_k,uᵀ (cuBLAS, host side src/ramnet/kappa_cuda.cpp), L ← L + log(dp·G_u) elementwise.
// CPU reference: log_kappa_matrix (src/ramnet/address.cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace memcap::ramnet::cuda {

// L[e] = (first ? 0 : L[e]) + log(dp · G[e]) for e < count.
void log_kappa_accumulate(const double* G, std::int64_t count, int dp, bool first, double* L, cudaStream_t s);

}  // namespace memcap::ramnet::cuda
