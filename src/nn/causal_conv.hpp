// Depthwise causal 1-D convolution over time (PyTorch nn.Conv1d with groups = channels, left padding
// K−1, output truncated to T: Zoology's / FLA's ShortConvolution without activation), on [B, T, C]
// row-major buffers, CPU, templated on the scalar, single-threaded, llm.c's shape.
// Backward OVERWRITES dinp and ADDS into dweight / dbias.
#pragma once
#include <cstdint>

namespace memcap::nn::cpu {

// out[b,t,c] = bias[c] + Σ_{j<K} weight[c,j] · inp[b, t−(K−1)+j, c]   (zero before t = 0; bias may be null).
// weight is [C, K] (PyTorch's [C, 1, K]).
template <class T>
void causal_conv_forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t B, std::int64_t Tlen,
                         std::int64_t C, std::int64_t K);
// dinp[b,s,c] = Σ_j weight[c,j] dout[b, s+(K−1)−j, c] (overwritten; null skips); dweight[c,j] += Σ dout·inp shifted;
// dbias[c] += Σ dout (null skips).
template <class T>
void causal_conv_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::int64_t B,
                          std::int64_t Tlen, std::int64_t C, std::int64_t K);

}  // namespace memcap::nn::cpu
