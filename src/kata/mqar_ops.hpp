// Internal helpers of the MQAR model shared by mqar_model.cpp (embedding, norms, residual stream, head)
// and mqar_layers.cpp (BaseConv and mixer layers): dense products on row-major buffers (Eigen → BLAS,
// single-threaded), head slicing, parameter lookup by arena name. Not part of the public API.
#pragma once
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "kata/mqar_model.hpp"

namespace memcap::kata::detail {

using mqar::Mat;
using mqar::Vec;


using mqar::Mat;
using mqar::Vec;

constexpr double kLnEps = 1e-5;     // nn.LayerNorm default (Zoology norm1, norm2, ln_f)
constexpr double kONormEps = 1e-5;  // FLA RMSNorm of the head outputs (§2.11.5 ε_norm)
constexpr double kL2Eps = 1e-6;     // FLA l2norm of q, k (§2.11 optional knob; always on for the delta rule)
constexpr std::int64_t kBaseConvK = 3, kMixerConvK = 4;

template <class T>
using RowMap = Eigen::Map<Mat<T>>;
template <class T>
using CRowMap = Eigen::Map<const Mat<T>>;

// out[N,OC] = in[N,C] Wᵀ + b (b may be null). Eigen GEMM (BLAS, single-threaded: core/threads.hpp).
template <class T>
void linear_fwd(T* out, const T* in, const T* W, const T* b, std::int64_t N, std::int64_t C, std::int64_t OC) {
  RowMap<T> O(out, N, OC);
  O.noalias() = CRowMap<T>(in, N, C) * CRowMap<T>(W, OC, C).transpose();
  if (b) O.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(b, OC);
}

// din = dout W (overwritten, or added when accumulate; null skips), dW += doutᵀ in, db += Σ_n dout.
template <class T>
void linear_bwd(T* din, T* dW, T* db, const T* dout, const T* in, const T* W, std::int64_t N, std::int64_t C,
                std::int64_t OC, bool accumulate = false) {
  CRowMap<T> D(dout, N, OC);
  if (din) {
    RowMap<T> DI(din, N, C);
    if (accumulate)
      DI.noalias() += D * CRowMap<T>(W, OC, C);
    else
      DI.noalias() = D * CRowMap<T>(W, OC, C);
  }
  if (dW) RowMap<T>(dW, OC, C).noalias() += D.transpose() * CRowMap<T>(in, N, C);
  if (db) Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(db, OC) += D.colwise().sum();
}

// Head h of sequence b: rows b·T .. b·T+T−1, columns col0 + h·dh of a row-major [N, ld] buffer.
template <class T>
Mat<T> get_head(const T* buf, std::int64_t ld, std::int64_t col0, std::int64_t b, std::int64_t h, std::int64_t Tlen,
                std::int64_t dh) {
  Eigen::Map<const Mat<T>, 0, Eigen::OuterStride<>> m(buf + b * Tlen * ld + col0 + h * dh, Tlen, dh,
                                                        Eigen::OuterStride<>(ld));
  return m;
}

template <class T>
void put_head(T* buf, std::int64_t ld, std::int64_t col0, std::int64_t b, std::int64_t h, std::int64_t Tlen,
              std::int64_t dh, const Mat<T>& x) {
  Eigen::Map<Mat<T>, 0, Eigen::OuterStride<>> m(buf + b * Tlen * ld + col0 + h * dh, Tlen, dh,
                                                  Eigen::OuterStride<>(ld));
  m = x;
}

template <class T>
Vec<T> get_col(const T* buf, std::int64_t ld, std::int64_t col, std::int64_t b, std::int64_t Tlen) {
  Vec<T> v(Tlen);
  for (std::int64_t t = 0; t < Tlen; ++t) v(t) = buf[(b * Tlen + t) * ld + col];
  return v;
}

inline double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

inline std::string lname(std::int64_t i, const char* t) { return fmt::format("l{}.{}", i, t); }

template <class T>
const T* P(const MqarModel& m, const T* params, const std::string& name) {
  return params + m.layout.view(name).offset;
}
template <class T>
T* G(const MqarModel& m, T* grads, const std::string& name) {
  return grads + m.layout.view(name).offset;
}


// Sequence-mixing layer i (BaseConv when i is even, the model's mixer when odd): y = mixer(LN1 output).
template <class T>
void mixer_layer_forward(const MqarModel& m, const T* params, typename MqarWorkspace<T>::Layer& l, std::int64_t i,
                         std::int64_t B, std::int64_t Tlen, T* y);
// Its backward: dx (overwritten) from dy; parameter gradients added into grads; scratch from ws.
template <class T>
void mixer_layer_backward(const MqarModel& m, const T* params, T* grads, MqarWorkspace<T>& ws,
                          typename MqarWorkspace<T>::Layer& l, std::int64_t i, const T* dy, T* dx);

}  // namespace memcap::kata::detail
