// Sequence-mixing layers of the MQAR model (mqar_model.hpp): BaseConv (y = conv3(u) ⊙ (u Wᵀ + b) + u),
// softmax MHA, KATA (projections, ShortConv(k=4), per-head quadratic core, output RMSNorm, W_o) and
// DeltaKATA (ℓ2-normalized q, k → ψ, β = σ(x W_βᵀ), chunked delta rule), forward and backward.
#include <algorithm>
#include <cmath>

#include "kata/mqar_mixers.hpp"
#include "kata/mqar_ops.hpp"
#include "nn/causal_conv.hpp"
#include "nn/rmsnorm_gain.hpp"

namespace memcap::kata::detail {

namespace {

// Softmax MHA: head h of sequence b of the packed [N, 3D] q | k | v projection.
template <class T>
struct QkvHead {
  Mat<T> q, k, v;
};

template <class T>
QkvHead<T> get_qkv_head(const T* qkv, std::int64_t D, std::int64_t b, std::int64_t h, std::int64_t Tlen,
                        std::int64_t dh) {
  return {get_head(qkv, 3 * D, 0, b, h, Tlen, dh), get_head(qkv, 3 * D, D, b, h, Tlen, dh),
          get_head(qkv, 3 * D, 2 * D, b, h, Tlen, dh)};
}

}  // namespace

template <class T>
void mixer_layer_forward(const MqarModel& m, const T* params, typename MqarWorkspace<T>::Layer& l, std::int64_t i,
                         std::int64_t B, std::int64_t Tlen, T* y) {
  const std::int64_t D = m.cfg.d_model, N = B * Tlen, H = m.heads, dh = m.d_head;
  const T* x = l.ln1.data();
  if (!m.is_mixer_layer(i)) {  // BaseConv: y = conv3(x) ⊙ (x Wᵀ + b) + x
    nn::cpu::causal_conv_forward(l.conv.data(), x, P(m, params, lname(i, "conv.w")), P(m, params, lname(i, "conv.b")), B,
                                 Tlen, D, kBaseConvK);
    linear_fwd(l.proj.data(), x, P(m, params, lname(i, "proj.w")), P(m, params, lname(i, "proj.b")), N, D, D);
    for (std::int64_t j = 0; j < N * D; ++j) y[j] = l.conv[j] * l.proj[j] + x[j];
    return;
  }
  if (m.kind == MixerKind::softmax) {
    linear_fwd(l.qkv.data(), x, P(m, params, lname(i, "wqkv.w")), P(m, params, lname(i, "wqkv.b")), N, D, 3 * D);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        const auto [q, k, v] = get_qkv_head(l.qkv.data(), D, b, h, Tlen, dh);
        Mat<T> o;
        Vec<T> lse;
        mqar::softmax_head_forward(o, lse, q, k, v, scale);
        put_head(l.att.data(), D, 0, b, h, Tlen, dh, o);
        for (std::int64_t t = 0; t < Tlen; ++t) l.lse[static_cast<std::size_t>((b * H + h) * Tlen + t)] = lse(t);
      }
    linear_fwd(y, l.att.data(), P(m, params, lname(i, "wo.w")), P(m, params, lname(i, "wo.b")), N, D, D);
    return;
  }
  // KATA / delta: projections, short convs, per-head core, output RMSNorm, W_o.
  linear_fwd(l.qp.data(), x, P(m, params, lname(i, "wq.w")), static_cast<const T*>(nullptr), N, D, D);
  linear_fwd(l.kp.data(), x, P(m, params, lname(i, "wk.w")), static_cast<const T*>(nullptr), N, D, D);
  linear_fwd(l.vp.data(), x, P(m, params, lname(i, "wv.w")), static_cast<const T*>(nullptr), N, D, D);
  const T* nob = nullptr;
  nn::cpu::causal_conv_forward(l.q.data(), l.qp.data(), P(m, params, lname(i, "convq.w")), nob, B, Tlen, D, kMixerConvK);
  nn::cpu::causal_conv_forward(l.k.data(), l.kp.data(), P(m, params, lname(i, "convk.w")), nob, B, Tlen, D, kMixerConvK);
  nn::cpu::causal_conv_forward(l.v.data(), l.vp.data(), P(m, params, lname(i, "convv.w")), nob, B, Tlen, D, kMixerConvK);
  if (m.kind == MixerKind::delta) {
    linear_fwd(l.beta.data(), x, P(m, params, lname(i, "wbeta.w")), nob, N, D, H);
    for (auto& z : l.beta) z = static_cast<T>(sigmoid(static_cast<double>(z)));
  }
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const Mat<T> q = get_head(l.q.data(), D, 0, b, h, Tlen, dh);
      const Mat<T> k = get_head(l.k.data(), D, 0, b, h, Tlen, dh);
      const Mat<T> v = get_head(l.v.data(), D, 0, b, h, Tlen, dh);
      Mat<T> o;
      if (m.kind == MixerKind::kata) {
        Vec<T> den;
        mqar::kata_head_forward(o, den, m.map, q, k, v);
        for (std::int64_t t = 0; t < Tlen; ++t) l.den[static_cast<std::size_t>((b * H + h) * Tlen + t)] = den(t);
      } else {
        Mat<T> qn, kn;
        Vec<T> rq, rk;
        mqar::l2norm_rows_forward(qn, rq, q, kL2Eps);
        mqar::l2norm_rows_forward(kn, rk, k, kL2Eps);
        put_head(l.qn.data(), D, 0, b, h, Tlen, dh, qn);
        put_head(l.kn.data(), D, 0, b, h, Tlen, dh, kn);
        for (std::int64_t t = 0; t < Tlen; ++t) {
          l.q_rstd[static_cast<std::size_t>((b * H + h) * Tlen + t)] = rq(t);
          l.k_rstd[static_cast<std::size_t>((b * H + h) * Tlen + t)] = rk(t);
        }
        const Mat<T> pq = m.map.apply(qn.template cast<double>()).template cast<T>();
        const Mat<T> pk = m.map.apply(kn.template cast<double>()).template cast<T>();
        mqar::delta_head_forward(o, pq, pk, v, get_col(l.beta.data(), H, h, b, Tlen), m.cfg.chunk);
      }
      put_head(l.att.data(), D, 0, b, h, Tlen, dh, o);
    }
  nn::cpu::rmsnorm_gain_forward(l.onorm.data(), l.onorm_rstd.data(), l.att.data(), P(m, params, lname(i, "onorm.w")),
                                N * H, dh, kONormEps);
  linear_fwd(y, l.onorm.data(), P(m, params, lname(i, "wo.w")), nob, N, D, D);
}

template <class T>
void mixer_layer_backward(const MqarModel& m, const T* params, T* grads, MqarWorkspace<T>& ws,
                          typename MqarWorkspace<T>::Layer& l, std::int64_t i, const T* dy, T* dx) {
  const std::int64_t D = m.cfg.d_model, B = ws.batch, Tlen = ws.seq_len, N = B * Tlen, H = m.heads, dh = m.d_head;
  const T* x = l.ln1.data();
  if (!m.is_mixer_layer(i)) {
    T* dconv = ws.g_d.data();
    T* dproj = ws.g_e.data();
    for (std::int64_t j = 0; j < N * D; ++j) {
      dconv[j] = dy[j] * l.proj[j];
      dproj[j] = dy[j] * l.conv[j];
    }
    nn::cpu::causal_conv_backward(dx, G(m, grads, lname(i, "conv.w")), G(m, grads, lname(i, "conv.b")), dconv, x,
                                  P(m, params, lname(i, "conv.w")), B, Tlen, D, kBaseConvK);
    linear_bwd(dx, G(m, grads, lname(i, "proj.w")), G(m, grads, lname(i, "proj.b")), dproj, x,
               P(m, params, lname(i, "proj.w")), N, D, D, true);
    for (std::int64_t j = 0; j < N * D; ++j) dx[j] += dy[j];
    return;
  }
  if (m.kind == MixerKind::softmax) {
    T* datt = ws.g_d.data();
    T* dqkv = ws.g_e.data();
    linear_bwd(datt, G(m, grads, lname(i, "wo.w")), G(m, grads, lname(i, "wo.b")), dy, l.att.data(),
               P(m, params, lname(i, "wo.w")), N, D, D);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h) {
        const auto [q, k, v] = get_qkv_head(l.qkv.data(), D, b, h, Tlen, dh);
        const Mat<T> o = get_head(l.att.data(), D, 0, b, h, Tlen, dh);
        const Mat<T> dO = get_head(static_cast<const T*>(datt), D, 0, b, h, Tlen, dh);
        Vec<T> lse(Tlen);
        for (std::int64_t t = 0; t < Tlen; ++t) lse(t) = l.lse[static_cast<std::size_t>((b * H + h) * Tlen + t)];
        Mat<T> dq, dk, dv;
        mqar::softmax_head_backward(dq, dk, dv, dO, q, k, v, o, lse, scale);
        put_head(dqkv, 3 * D, 0, b, h, Tlen, dh, dq);
        put_head(dqkv, 3 * D, D, b, h, Tlen, dh, dk);
        put_head(dqkv, 3 * D, 2 * D, b, h, Tlen, dh, dv);
      }
    linear_bwd(dx, G(m, grads, lname(i, "wqkv.w")), G(m, grads, lname(i, "wqkv.b")), dqkv, x,
               P(m, params, lname(i, "wqkv.w")), N, D, 3 * D);
    return;
  }
  T* donorm = ws.g_d.data();
  T* datt = ws.g_b.data();  // free while the mixer runs (mqar_backward uses it after)
  MEMCAP_ASSERT(datt != dx && datt != dy, "mixer_backward: scratch aliasing");
  linear_bwd(donorm, G(m, grads, lname(i, "wo.w")), static_cast<T*>(nullptr), dy, l.onorm.data(),
             P(m, params, lname(i, "wo.w")), N, D, D);
  nn::cpu::rmsnorm_gain_backward(datt, G(m, grads, lname(i, "onorm.w")), donorm, l.att.data(),
                                 P(m, params, lname(i, "onorm.w")), l.onorm_rstd.data(), N * H, dh);
  T* dq_all = ws.g_e.data();
  T* dk_all = dq_all + N * D;
  T* dv_all = dk_all + N * D;
  T* dbeta = ws.g_g.data();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const Mat<T> q = get_head(l.q.data(), D, 0, b, h, Tlen, dh);
      const Mat<T> k = get_head(l.k.data(), D, 0, b, h, Tlen, dh);
      const Mat<T> v = get_head(l.v.data(), D, 0, b, h, Tlen, dh);
      const Mat<T> o = get_head(l.att.data(), D, 0, b, h, Tlen, dh);
      const Mat<T> dO = get_head(static_cast<const T*>(datt), D, 0, b, h, Tlen, dh);
      Mat<T> dq, dk, dv;
      if (m.kind == MixerKind::kata) {
        Vec<T> den(Tlen);
        for (std::int64_t t = 0; t < Tlen; ++t) den(t) = l.den[static_cast<std::size_t>((b * H + h) * Tlen + t)];
        mqar::kata_head_backward(dq, dk, dv, dO, m.map, q, k, v, o, den);
      } else {
        const Mat<T> qn = get_head(l.qn.data(), D, 0, b, h, Tlen, dh);
        const Mat<T> kn = get_head(l.kn.data(), D, 0, b, h, Tlen, dh);
        Vec<T> rq(Tlen), rk(Tlen);
        for (std::int64_t t = 0; t < Tlen; ++t) {
          rq(t) = l.q_rstd[static_cast<std::size_t>((b * H + h) * Tlen + t)];
          rk(t) = l.k_rstd[static_cast<std::size_t>((b * H + h) * Tlen + t)];
        }
        const Eigen::MatrixXd qnd = qn.template cast<double>(), knd = kn.template cast<double>();
        const Mat<T> pq = m.map.apply(qnd).template cast<T>();
        const Mat<T> pk = m.map.apply(knd).template cast<T>();
        const Vec<T> beta = get_col(l.beta.data(), H, h, b, Tlen);
        Mat<T> dpq, dpk;
        Vec<T> db;
        mqar::delta_head_backward(dpq, dpk, dv, db, dO, pq, pk, v, beta, m.cfg.chunk);
        const Mat<T> dqn = m.map.vjp(qnd, dpq.template cast<double>()).template cast<T>();
        const Mat<T> dkn = m.map.vjp(knd, dpk.template cast<double>()).template cast<T>();
        mqar::l2norm_rows_backward(dq, dqn, q, rq);
        mqar::l2norm_rows_backward(dk, dkn, k, rk);
        for (std::int64_t t = 0; t < Tlen; ++t)  // β = σ(z): dz = dβ β (1 − β)
          dbeta[(b * Tlen + t) * H + h] = db(t) * beta(t) * (T(1) - beta(t));
      }
      put_head(dq_all, D, 0, b, h, Tlen, dh, dq);
      put_head(dk_all, D, 0, b, h, Tlen, dh, dk);
      put_head(dv_all, D, 0, b, h, Tlen, dh, dv);
    }
  T* dqp = ws.g_f.data();
  T* dkp = dqp + N * D;
  T* dvp = dkp + N * D;
  nn::cpu::causal_conv_backward(dqp, G(m, grads, lname(i, "convq.w")), static_cast<T*>(nullptr), dq_all, l.qp.data(),
                                P(m, params, lname(i, "convq.w")), B, Tlen, D, kMixerConvK);
  nn::cpu::causal_conv_backward(dkp, G(m, grads, lname(i, "convk.w")), static_cast<T*>(nullptr), dk_all, l.kp.data(),
                                P(m, params, lname(i, "convk.w")), B, Tlen, D, kMixerConvK);
  nn::cpu::causal_conv_backward(dvp, G(m, grads, lname(i, "convv.w")), static_cast<T*>(nullptr), dv_all, l.vp.data(),
                                P(m, params, lname(i, "convv.w")), B, Tlen, D, kMixerConvK);
  linear_bwd(dx, G(m, grads, lname(i, "wq.w")), static_cast<T*>(nullptr), dqp, x, P(m, params, lname(i, "wq.w")), N, D,
             D);
  linear_bwd(dx, G(m, grads, lname(i, "wk.w")), static_cast<T*>(nullptr), dkp, x, P(m, params, lname(i, "wk.w")), N, D,
             D, true);
  linear_bwd(dx, G(m, grads, lname(i, "wv.w")), static_cast<T*>(nullptr), dvp, x, P(m, params, lname(i, "wv.w")), N, D,
             D, true);
  if (m.kind == MixerKind::delta)
    linear_bwd(dx, G(m, grads, lname(i, "wbeta.w")), static_cast<T*>(nullptr), dbeta, x,
               P(m, params, lname(i, "wbeta.w")), N, D, H, true);
}


template void mixer_layer_forward<double>(const MqarModel&, const double*, MqarWorkspace<double>::Layer&, std::int64_t,
                                          std::int64_t, std::int64_t, double*);
template void mixer_layer_forward<float>(const MqarModel&, const float*, MqarWorkspace<float>::Layer&, std::int64_t,
                                         std::int64_t, std::int64_t, float*);
template void mixer_layer_backward<double>(const MqarModel&, const double*, double*, MqarWorkspace<double>&,
                                           MqarWorkspace<double>::Layer&, std::int64_t, const double*, double*);
template void mixer_layer_backward<float>(const MqarModel&, const float*, float*, MqarWorkspace<float>&,
                                          MqarWorkspace<float>::Layer&, std::int64_t, const float*, float*);

}  // namespace memcap::kata::detail
