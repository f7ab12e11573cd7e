// RMSNorm with a learned gain (FLA / PyTorch nn.RMSNorm: y = x / sqrt(mean(x²) + eps) ⊙ weight), the
// per-head output norm of the KATA mixers (spec kata.md §4.4, ε_norm = 1e-5). CPU, templated on the
// scalar, single-threaded, llm.c's shape. The gain-free float64 RMSNorm of the SSFR block is
// nn::cpu::rmsnorm_forward (nn/ssfr_layers.hpp); with weight = 1 this one computes the same function.
// Backward OVERWRITES dinp and ADDS into dweight.
#pragma once
#include <cstdint>

namespace memcap::nn::cpu {

// out[n,:] = inp[n,:] · rstd_n ⊙ weight, rstd_n = 1/sqrt(mean_c inp[n,c]² + eps) (kept when rstd is not null).
template <class T>
void rmsnorm_gain_forward(T* out, T* rstd, const T* inp, const T* weight, std::int64_t N, std::int64_t C, double eps);
// dinp = rstd·(g − inp·rstd²·mean(g ⊙ inp)), g = dout ⊙ weight (overwritten; null skips); dweight += Σ_n dout ⊙ inp·rstd.
template <class T>
void rmsnorm_gain_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd,
                           std::int64_t N, std::int64_t C);

}  // namespace memcap::nn::cpu
