// Depthwise causal convolution forward/backward (nn/causal_conv.hpp).
#include "nn/causal_conv.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace memcap::nn::cpu {

template <class T>
void causal_conv_forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t B, std::int64_t Tlen,
                         std::int64_t C, std::int64_t K) {
  require(B >= 0 && Tlen >= 0 && C >= 1 && K >= 1, "causal_conv: bad shape B = {}, T = {}, C = {}, K = {}", B, Tlen, C,
          K);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < Tlen; ++t) {
      T* y = out + (b * Tlen + t) * C;
      for (std::int64_t c = 0; c < C; ++c) y[c] = bias ? bias[c] : T(0);
      for (std::int64_t j = std::max<std::int64_t>(0, K - 1 - t); j < K; ++j) {
        const T* x = inp + (b * Tlen + t - (K - 1) + j) * C;
        for (std::int64_t c = 0; c < C; ++c) y[c] += weight[c * K + j] * x[c];
      }
    }
}

template <class T>
void causal_conv_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::int64_t B,
                          std::int64_t Tlen, std::int64_t C, std::int64_t K) {
  require(B >= 0 && Tlen >= 0 && C >= 1 && K >= 1, "causal_conv: bad shape B = {}, T = {}, C = {}, K = {}", B, Tlen, C,
          K);
  if (dinp) std::fill(dinp, dinp + B * Tlen * C, T(0));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < Tlen; ++t) {
      const T* dy = dout + (b * Tlen + t) * C;
      if (dbias)
        for (std::int64_t c = 0; c < C; ++c) dbias[c] += dy[c];
      for (std::int64_t j = std::max<std::int64_t>(0, K - 1 - t); j < K; ++j) {
        const std::int64_t s = b * Tlen + t - (K - 1) + j;
        const T* x = inp + s * C;
        if (dweight)
          for (std::int64_t c = 0; c < C; ++c) dweight[c * K + j] += dy[c] * x[c];
        if (dinp) {
          T* dx = dinp + s * C;
          for (std::int64_t c = 0; c < C; ++c) dx[c] += weight[c * K + j] * dy[c];
        }
      }
    }
}

template void causal_conv_forward<double>(double*, const double*, const double*, const double*, std::int64_t,
                                          std::int64_t, std::int64_t, std::int64_t);
template void causal_conv_forward<float>(float*, const float*, const float*, const float*, std::int64_t, std::int64_t,
                                         std::int64_t, std::int64_t);
template void causal_conv_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                           std::int64_t, std::int64_t, std::int64_t, std::int64_t);
template void causal_conv_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                          std::int64_t, std::int64_t, std::int64_t, std::int64_t);

}  // namespace memcap::nn::cpu
