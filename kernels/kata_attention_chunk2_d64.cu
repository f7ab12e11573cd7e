// Two-pass chunked / tree KATA attention kernels at head width d = d_v = 64 (kata_attention_chunk2.cuh), one
// file per width so the instantiations compile in parallel.
#include "kata_attention_chunk2_run.cuh"

namespace memcap::kata::cuda {

void launch_chunk2_d64(const AttentionLaunch& p, AttentionForm form, int segments, int stride,
                       const AttentionPtrs& a, cudaStream_t stream, unsigned opts) {
  if (p.chunk == 128) chunk2::run<128, 64>(p, form, segments, stride, a, stream, opts);
  else chunk2::run<64, 64>(p, form, segments, stride, a, stream, opts);
}

void launch_segment_states(const AttentionLaunch& p, int cpp, const void* k, const void* v, float* s_loc,
                           float* z_loc, cudaStream_t stream) {
  chunk2::launch_local_states<64, 64, false>(p, cpp, k, v, s_loc, z_loc, stream);  // the fused walk's convention
}

}  // namespace memcap::kata::cuda
