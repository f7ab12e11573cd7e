// Two-pass chunked / tree KATA attention kernels at head width d = d_v = 32 (kata_attention_chunk2.cuh), one
// file per width so the instantiations compile in parallel.
#include "kata_attention_chunk2_run.cuh"

namespace memcap::kata::cuda {

void launch_chunk2_d32(const AttentionLaunch& p, AttentionForm form, int segments, int stride,
                       const AttentionPtrs& a, cudaStream_t stream) {
  chunk2::run<64, 32>(p, form, segments, stride, a, stream);
}

}  // namespace memcap::kata::cuda
