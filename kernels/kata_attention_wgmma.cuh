// Hopper (sm_90a) quadratic causal KATA attention for M_1 / M_2 at d = dv = 64, bf16: a warp-specialised
// kernel (TMA producer warpgroup, wgmma consumer warpgroups, mbarrier pipeline). Internal to
// kernels/kata_attention_quadratic.cu, which picks it when it applies.
#pragma once
#include "kata_attention_common.cuh"
#include "kata_attention_launch.cuh"

namespace memcap::kata::cuda {

// Launches the warp-specialised kernel when it applies (bf16, d = dv = 64, M_g with g in {1, 2}, 16-byte
// aligned buffers, and this binary holds the sm_90a build of the kernel) and returns its variant name;
// nullptr when it does not apply. `variant`: "ws3" (3 consumer warpgroups, 192 query rows per CTA, default) or "ws2" (2, 128 rows).
const char* launch_quadratic_wgmma(const MapParams& mp, const AttentionLaunch& p, const void* q, const void* k,
                                   const void* v, void* out, cudaStream_t stream, const char* variant);

}  // namespace memcap::kata::cuda
