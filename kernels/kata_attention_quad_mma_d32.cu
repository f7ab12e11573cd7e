// mma.sync quadratic KATA attention kernels at head width d = d_v = 32 (every map; kata_attention_quad_mma.cuh),
// one file per width so the instantiations compile in parallel.
#include "kata_attention_impl.cuh"
#include "kata_attention_quad_mma.cuh"

namespace memcap::kata::cuda {

void launch_quad_mma_d32(const AttentionLaunch& p, int mt, const AttentionPtrs& a, cudaStream_t stream) {
  if (mt == 1) quad_mma::launch_width<32, 1>(p, a.q, a.k, a.v, a.out, stream);
  else quad_mma::launch_width<32, 2>(p, a.q, a.k, a.v, a.out, stream);
}

}  // namespace memcap::kata::cuda
