// Hopper quadratic KATA attention kernels at head width d = d_v = 128 (kata_attention_wgmma.cuh), one file per
// width so the instantiations compile in parallel.
#include "kata_attention_wgmma.cuh"

namespace memcap::kata::cuda {

void launch_quad_ws_d128(const AttentionLaunch& p, int nwg, const AttentionPtrs& a, cudaStream_t stream) {
  (void)nwg;  // 2 consumer warpgroups only (quad_ws_supported)
  ws::launch_width<128, 2>(p, a, stream);
}

}  // namespace memcap::kata::cuda
