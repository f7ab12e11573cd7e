// RMSNorm with gain, forward/backward (nn/rmsnorm_gain.hpp). Sums in index order, in double.
#include "nn/rmsnorm_gain.hpp"

#include <cmath>

#include "core/error.hpp"

namespace memcap::nn::cpu {

template <class T>
void rmsnorm_gain_forward(T* out, T* rstd, const T* inp, const T* weight, std::int64_t N, std::int64_t C, double eps) {
  require(N >= 0 && C >= 1, "rmsnorm: bad shape N = {}, C = {}", N, C);
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    double ss = 0;
    for (std::int64_t c = 0; c < C; ++c) ss += static_cast<double>(x[c]) * x[c];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    T* y = out + n * C;
    for (std::int64_t c = 0; c < C; ++c) y[c] = static_cast<T>(x[c] * r * weight[c]);
    if (rstd) rstd[n] = static_cast<T>(r);
  }
}

template <class T>
void rmsnorm_gain_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd,
                           std::int64_t N, std::int64_t C) {
  require(N >= 0 && C >= 1, "rmsnorm: bad shape N = {}, C = {}", N, C);
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    const double r = rstd[n];
    double gx = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      gx += static_cast<double>(dy[c]) * weight[c] * x[c];
      if (dweight) dweight[c] += static_cast<T>(dy[c] * x[c] * r);
    }
    gx /= static_cast<double>(C);
    if (!dinp) continue;
    T* dx = dinp + n * C;
    for (std::int64_t c = 0; c < C; ++c)
      dx[c] = static_cast<T>(r * (static_cast<double>(dy[c]) * weight[c] - x[c] * r * r * gx));
  }
}

template void rmsnorm_gain_forward<double>(double*, double*, const double*, const double*, std::int64_t, std::int64_t,
                                           double);
template void rmsnorm_gain_forward<float>(float*, float*, const float*, const float*, std::int64_t, std::int64_t, double);
template void rmsnorm_gain_backward<double>(double*, double*, const double*, const double*, const double*,
                                            const double*, std::int64_t, std::int64_t);
template void rmsnorm_gain_backward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                           std::int64_t, std::int64_t);

}  // namespace memcap::nn::cpu
