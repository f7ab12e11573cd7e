// LayerNorm forward/backward (nn/layernorm.hpp). Sums run in index order in double, whatever T is.
#include "nn/layernorm.hpp"

#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace memcap::nn::cpu {

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, std::int64_t N,
                       std::int64_t C, double eps) {
  require(N >= 0 && C >= 1, "layernorm: bad shape N = {}, C = {}", N, C);
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    double m = 0;
    for (std::int64_t c = 0; c < C; ++c) m += x[c];
    m /= static_cast<double>(C);
    double v = 0;
    for (std::int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= static_cast<double>(C);
    const double r = 1.0 / std::sqrt(v + eps);
    T* y = out + n * C;
    for (std::int64_t c = 0; c < C; ++c)
      y[c] = static_cast<T>((x[c] - m) * r * weight[c] + (bias ? static_cast<double>(bias[c]) : 0.0));
    if (mean) mean[n] = static_cast<T>(m);
    if (rstd) rstd[n] = static_cast<T>(r);
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, std::int64_t N, std::int64_t C) {
  require(N >= 0 && C >= 1, "layernorm: bad shape N = {}, C = {}", N, C);
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    const double m = mean[n], r = rstd[n];
    double mg = 0, mgx = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double xh = (x[c] - m) * r, g = static_cast<double>(dy[c]) * weight[c];
      mg += g;
      mgx += g * xh;
      if (dweight) dweight[c] += static_cast<T>(dy[c] * xh);
      if (dbias) dbias[c] += dy[c];
    }
    mg /= static_cast<double>(C);
    mgx /= static_cast<double>(C);
    if (!dinp) continue;
    T* dx = dinp + n * C;
    for (std::int64_t c = 0; c < C; ++c) {
      const double xh = (x[c] - m) * r, g = static_cast<double>(dy[c]) * weight[c];
      dx[c] = static_cast<T>(r * (g - mg - xh * mgx));
    }
  }
}

template <class T>
void add_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* a, const T* b, const T* weight, const T* bias,
                           std::int64_t N, std::int64_t C, double eps) {
  require(N >= 0 && C >= 1, "layernorm: bad shape N = {}, C = {}", N, C);
  for (std::int64_t i = 0; i < N * C; ++i) sum[i] = a[i] + b[i];
  layernorm_forward(out, mean, rstd, sum, weight, bias, N, C, eps);
}

template <class T>
void layernorm_backward_add(T* dinp, T* dweight, T* dbias, const T* add, const T* dout, const T* inp,
                            const T* weight, const T* mean, const T* rstd, std::int64_t N, std::int64_t C) {
  require(N >= 0 && C >= 1, "layernorm: bad shape N = {}, C = {}", N, C);
  std::vector<T> row(static_cast<std::size_t>(C));
  for (std::int64_t n = 0; n < N; ++n) {  // row by row, so dinp may alias add or dout
    layernorm_backward(row.data(), dweight, dbias, dout + n * C, inp + n * C, weight, mean + n, rstd + n, 1, C);
    for (std::int64_t c = 0; c < C; ++c) dinp[n * C + c] = add[n * C + c] + row[static_cast<std::size_t>(c)];
  }
}

template void add_layernorm_forward<double>(double*, double*, double*, double*, const double*, const double*,
                                            const double*, const double*, std::int64_t, std::int64_t, double);
template void add_layernorm_forward<float>(float*, float*, float*, float*, const float*, const float*, const float*,
                                           const float*, std::int64_t, std::int64_t, double);
template void layernorm_backward_add<double>(double*, double*, double*, const double*, const double*, const double*,
                                             const double*, const double*, const double*, std::int64_t, std::int64_t);
template void layernorm_backward_add<float>(float*, float*, float*, const float*, const float*, const float*,
                                            const float*, const float*, const float*, std::int64_t, std::int64_t);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*,
                                        std::int64_t, std::int64_t, double);
template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, std::int64_t,
                                       std::int64_t, double);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, std::int64_t, std::int64_t);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, std::int64_t, std::int64_t);

}  // namespace memcap::nn::cpu
