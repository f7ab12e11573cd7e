// Quadratic ("flash-style") causal KATA attention forward on the GPU (spec kata.md §5.1).
// bf16, d = dv = 64, M_g / Sigma_g with g in {1,2,4}: tensor cores (warp-specialised wgmma for M_1 / M_2 in an
// sm_90a build, mma.sync otherwise) for the raw scores, squared in fp32, no exponentials, psi never formed.
// Every other case: an fp32 SIMT kernel.
#pragma once
#include "kata_attention_launch.cuh"

namespace memcap::kata::cuda {

// Launches on `stream`; returns the variant that ran ("quadratic/mma-bf16/<ws3|ws2|mt2|mt1|mt2split>" or
// "quadratic/simt"; MEMCAP_KATA_QUAD_VARIANT=ws2|mt1|mt2|mt2split picks a tiling, default ws3 (Hopper
// warp-specialised wgmma) where it applies, else mt2).
// Throws UserError for unsupported shapes/maps, DeviceError for CUDA errors.
const char* launch_quadratic(const AttentionLaunch& p, const void* q, const void* k, const void* v, void* out,
                             cudaStream_t stream);

}  // namespace memcap::kata::cuda
