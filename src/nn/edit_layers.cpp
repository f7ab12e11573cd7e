// GELU, RoPE, the low-rank path and the router mix of the §6.4 block, forward/backward
// (nn/edit_layers.hpp). Every value is computed in double and rounded once to T; sums in index order.
#include "nn/edit_layers.hpp"

#include <cmath>

#include "core/error.hpp"

namespace memcap::nn {

double rope_base_for(std::int64_t d) { return std::pow(10000.0, static_cast<double>(d) / 1024.0); }

namespace cpu {

namespace {
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
}  // namespace

template <class T>
void gelu_forward(T* y, const T* x, std::int64_t n) {
  require(n >= 0, "gelu: negative size {}", n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<T>(0.5 * v * (1.0 + std::erf(v * kInvSqrt2)));
  }
}

template <class T>
void gelu_backward(T* dx, const T* dy, const T* x, std::int64_t n) {
  require(n >= 0, "gelu: negative size {}", n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double cdf = 0.5 * (1.0 + std::erf(v * kInvSqrt2));
    const double pdf = kInvSqrt2Pi * std::exp(-0.5 * v * v);
    dx[i] = static_cast<T>(static_cast<double>(dy[i]) * (cdf + v * pdf));
  }
}

namespace {
// Rotates every (j, j + dh/2) pair of every row by sign·θ_{t,j}.
template <class T>
void rope_apply(T* out, const T* inp, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dh, double base,
                double sign) {
  require(B >= 0 && Tn >= 0 && H >= 0 && dh >= 2 && dh % 2 == 0, "rope: bad shape B = {}, T = {}, H = {}, dh = {} (dh even)",
          B, Tn, H, dh);
  require(base > 0, "rope: base must be positive, got {}", base);
  const std::int64_t half = dh / 2;
  for (std::int64_t t = 0; t < Tn; ++t) {
    for (std::int64_t j = 0; j < half; ++j) {
      const double theta = static_cast<double>(t) * std::pow(base, -2.0 * static_cast<double>(j) / static_cast<double>(dh));
      const double c = std::cos(theta), s = sign * std::sin(theta);
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h) {
          const std::int64_t row = ((b * Tn + t) * H + h) * dh;
          const double x1 = inp[row + j], x2 = inp[row + j + half];
          out[row + j] = static_cast<T>(x1 * c - x2 * s);
          out[row + j + half] = static_cast<T>(x2 * c + x1 * s);
        }
    }
  }
}
}  // namespace

template <class T>
void rope_forward(T* out, const T* inp, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dh, double base) {
  rope_apply(out, inp, B, Tn, H, dh, base, 1.0);
}

template <class T>
void rope_backward(T* dinp, const T* dout, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dh,
                   double base) {
  rope_apply(dinp, dout, B, Tn, H, dh, base, -1.0);
}

template <class T>
void lowrank_forward(T* out, T* mid, const T* inp, const T* U, const T* V, std::int64_t N, std::int64_t C,
                     std::int64_t R) {
  require(N >= 0 && C >= 1 && R >= 1, "lowrank: bad shape N = {}, C = {}, R = {}", N, C, R);
  for (std::int64_t n = 0; n < N; ++n) {
    const T* a = inp + n * C;
    T* m = mid + n * R;
    for (std::int64_t r = 0; r < R; ++r) {
      double s = 0;
      for (std::int64_t c = 0; c < C; ++c) s += static_cast<double>(a[c]) * U[c * R + r];
      m[r] = static_cast<T>(s);
    }
    T* y = out + n * C;
    for (std::int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (std::int64_t r = 0; r < R; ++r) s += static_cast<double>(m[r]) * V[r * C + c];
      y[c] = static_cast<T>(s);
    }
  }
}

template <class T>
void lowrank_backward(T* dinp, T* dU, T* dV, T* dmid, const T* dout, const T* inp, const T* mid, const T* U,
                      const T* V, std::int64_t N, std::int64_t C, std::int64_t R) {
  require(N >= 0 && C >= 1 && R >= 1, "lowrank: bad shape N = {}, C = {}, R = {}", N, C, R);
  for (std::int64_t n = 0; n < N; ++n) {
    const T* dy = dout + n * C;
    T* dm = dmid + n * R;
    for (std::int64_t r = 0; r < R; ++r) {
      double s = 0;
      for (std::int64_t c = 0; c < C; ++c) s += static_cast<double>(dy[c]) * V[r * C + c];
      dm[r] = static_cast<T>(s);
    }
  }
  if (dV)
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (std::int64_t n = 0; n < N; ++n) s += static_cast<double>(mid[n * R + r]) * dout[n * C + c];
        dV[r * C + c] += static_cast<T>(s);
      }
  if (dU)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t r = 0; r < R; ++r) {
        double s = 0;
        for (std::int64_t n = 0; n < N; ++n) s += static_cast<double>(inp[n * C + c]) * dmid[n * R + r];
        dU[c * R + r] += static_cast<T>(s);
      }
  if (dinp)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (std::int64_t r = 0; r < R; ++r) s += static_cast<double>(dmid[n * R + r]) * U[c * R + r];
        dinp[n * C + c] = static_cast<T>(s);
      }
}

namespace {
double sigmoid(double z) {
  if (z >= 0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}
}  // namespace

template <class T>
void router_mix_forward(T* out, T* alpha, const T* z, const T* f, const T* l, std::int64_t N, std::int64_t C) {
  require(N >= 0 && C >= 1, "router_mix: bad shape N = {}, C = {}", N, C);
  for (std::int64_t n = 0; n < N; ++n) {
    const double a = sigmoid(z[n]);
    alpha[n] = static_cast<T>(a);
    for (std::int64_t c = 0; c < C; ++c) {
      const std::int64_t i = n * C + c;
      out[i] = static_cast<T>(a * f[i] + (1.0 - a) * l[i]);
    }
  }
}

template <class T>
void router_mix_backward(T* dz, T* df, T* dl, const T* dout, const T* alpha, const T* f, const T* l, std::int64_t N,
                         std::int64_t C) {
  require(N >= 0 && C >= 1, "router_mix: bad shape N = {}, C = {}", N, C);
  for (std::int64_t n = 0; n < N; ++n) {
    const double a = alpha[n];
    double s = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      const std::int64_t i = n * C + c;
      const double g = dout[i];
      s += g * (static_cast<double>(f[i]) - l[i]);
      if (df) df[i] = static_cast<T>(a * g);
      if (dl) dl[i] = static_cast<T>((1.0 - a) * g);
    }
    if (dz) dz[n] = static_cast<T>(a * (1.0 - a) * s);
  }
}

#define MEMCAP_EDIT_LAYERS_INSTANTIATE(T)                                                                         \
  template void gelu_forward<T>(T*, const T*, std::int64_t);                                                     \
  template void gelu_backward<T>(T*, const T*, const T*, std::int64_t);                                          \
  template void rope_forward<T>(T*, const T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, double);   \
  template void rope_backward<T>(T*, const T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, double);  \
  template void lowrank_forward<T>(T*, T*, const T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t); \
  template void lowrank_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*, const T*, std::int64_t, \
                                    std::int64_t, std::int64_t);                                                  \
  template void router_mix_forward<T>(T*, T*, const T*, const T*, const T*, std::int64_t, std::int64_t);         \
  template void router_mix_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, std::int64_t,         \
                                       std::int64_t);
MEMCAP_EDIT_LAYERS_INSTANTIATE(double)
MEMCAP_EDIT_LAYERS_INSTANTIATE(float)
#undef MEMCAP_EDIT_LAYERS_INSTANTIATE

}  // namespace cpu
}  // namespace memcap::nn
