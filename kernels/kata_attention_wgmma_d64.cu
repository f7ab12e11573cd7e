// Hopper quadratic KATA attention kernels at head width d = d_v = 64 (kata_attention_wgmma.cuh), one file per
// width so the instantiations compile in parallel.
#include "kata_attention_wgmma.cuh"

namespace memcap::kata::cuda {

void launch_quad_ws_d64(const AttentionLaunch& p, int nwg, const AttentionPtrs& a, cudaStream_t stream) {
  if (nwg == 3) ws::launch_width<64, 3>(p, a, stream);
  else ws::launch_width<64, 2>(p, a, stream);
}

}  // namespace memcap::kata::cuda
