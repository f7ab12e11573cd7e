// Sequence-mixing layers of the MQAR model (mqar_model.hpp): BaseConv (y = conv3(u) ⊙ (u Wᵀ + b) + u),
// softmax MHA, KATA (projections, ShortConv(k=4), per-head quadratic core, output RMSNorm, W_o) and
// DeltaKATA (ℓ2-normalized q, k → ψ, β = σ(x W_βᵀ), chunked delta rule), the gated variants of §2.11
// (GatedKATA, convex gate, GatedDeltaKATA) and RoPE on q, k (--rope), forward and backward.
#include <algorithm>
#include <cmath>

#include "kata/mqar_mixers.hpp"
#include "kata/mqar_ops.hpp"
#include "nn/causal_conv.hpp"
#include "nn/edit_layers.hpp"
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

inline double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

// RoPE on one head's rows (a contiguous T × dh matrix, positions 0..T−1), in place.
template <class T>
void rope_head(Mat<T>& x, double base, bool backward) {
  if (backward)
    nn::cpu::rope_backward(x.data(), x.data(), 1, x.rows(), 1, x.cols(), base);
  else
    nn::cpu::rope_forward(x.data(), x.data(), 1, x.rows(), 1, x.cols(), base);
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
        auto [q, k, v] = get_qkv_head(l.qkv.data(), D, b, h, Tlen, dh);
        if (m.cfg.rope) {  // rotated q, k kept in l.qkv for the backward
          rope_head(q, m.cfg.rope_base, false);
          rope_head(k, m.cfg.rope_base, false);
          put_head(l.qkv.data(), 3 * D, 0, b, h, Tlen, dh, q);
          put_head(l.qkv.data(), 3 * D, D, b, h, Tlen, dh, k);
        }
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
  if (m.cfg.rope) {  // in place: the convs' backward reads their inputs (qp, kp), not q, k
    nn::cpu::rope_forward(l.q.data(), l.q.data(), B, Tlen, H, dh, m.cfg.rope_base);
    nn::cpu::rope_forward(l.k.data(), l.k.data(), B, Tlen, H, dh, m.cfg.rope_base);
  }
  if (m.l2_qk()) {
    linear_fwd(l.beta.data(), x, P(m, params, lname(i, "wbeta.w")), nob, N, D, H);
    for (auto& z : l.beta) z = static_cast<T>(sigmoid(static_cast<double>(z)));
  }
  if (m.is_gated()) {  // g = log γ per (token, head)
    const bool gdn = m.kind == MixerKind::gated_delta;
    linear_fwd(l.gz.data(), x, P(m, params, lname(i, "walpha.w")), gdn ? nob : P(m, params, lname(i, "walpha.b")), N, D,
               H);
    const T* alog = gdn ? P(m, params, lname(i, "A_log")) : nob;
    const T* dtb = gdn ? P(m, params, lname(i, "dt_bias")) : nob;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t h = 0; h < H; ++h) {
        const double z = l.gz[static_cast<std::size_t>(n * H + h)];
        // GatedKATA: log γ = log σ(z) = −softplus(−z); GatedDeltaKATA: g = −exp(A_log) softplus(z + dt_bias)
        const double g = gdn ? -std::exp(static_cast<double>(alog[h])) * softplus(z + static_cast<double>(dtb[h]))
                             : -softplus(-z);
        l.lg[static_cast<std::size_t>(n * H + h)] = static_cast<T>(g);
      }
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
      } else if (m.kind == MixerKind::gated || m.kind == MixerKind::convex) {
        const Vec<T> g = get_col(l.lg.data(), H, h, b, Tlen);
        Mat<T> vs = v;
        if (m.kind == MixerKind::convex)  // §2.11.3: v ← (1 − γ) v
          for (std::int64_t t = 0; t < Tlen; ++t) vs.row(t) *= static_cast<T>(-std::expm1(static_cast<double>(g(t))));
        mqar::gated_head_forward(o, m.map, q, k, vs, g);
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
        if (m.kind == MixerKind::gated_delta) {
          mqar::gated_delta_head_forward(o, m.map, qn, kn, v, get_col(l.beta.data(), H, h, b, Tlen),
                                         get_col(l.lg.data(), H, h, b, Tlen));
        } else {
          const Mat<T> pq = m.map.apply(qn.template cast<double>()).template cast<T>();
          const Mat<T> pk = m.map.apply(kn.template cast<double>()).template cast<T>();
          mqar::delta_head_forward(o, pq, pk, v, get_col(l.beta.data(), H, h, b, Tlen), m.cfg.chunk);
        }
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
        if (m.cfg.rope) {  // l.qkv holds the rotated q, k: rotate their gradients back
          rope_head(dq, m.cfg.rope_base, true);
          rope_head(dk, m.cfg.rope_base, true);
        }
        put_head(dqkv, 3 * D, 0, b, h, Tlen, dh, dq);
        put_head(dqkv, 3 * D, D, b, h, Tlen, dh, dk);
        put_head(dqkv, 3 * D, 2 * D, b, h, Tlen, dh, dv);
      }
    linear_bwd(dx, G(m, grads, lname(i, "wqkv.w")), G(m, grads, lname(i, "wqkv.b")), dqkv, x,
               P(m, params, lname(i, "wqkv.w")), N, D, 3 * D);
    return;
  }
  T* donorm = ws.g_d.data();
  T* datt = ws.g_b.data();  // free while the mixer runs
  MEMCAP_ASSERT(datt != dx && datt != dy, "mixer_backward: scratch aliasing");
  linear_bwd(donorm, G(m, grads, lname(i, "wo.w")), static_cast<T*>(nullptr), dy, l.onorm.data(),
             P(m, params, lname(i, "wo.w")), N, D, D);
  nn::cpu::rmsnorm_gain_backward(datt, G(m, grads, lname(i, "onorm.w")), donorm, l.att.data(),
                                 P(m, params, lname(i, "onorm.w")), l.onorm_rstd.data(), N * H, dh);
  T* dq_all = ws.g_e.data();
  T* dk_all = dq_all + N * D;
  T* dv_all = dk_all + N * D;
  T* dbeta = ws.g_g.data();
  T* dgate = ws.g_h.data();  // ∂/∂(gate pre-activation) [N, H]
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
      } else if (m.kind == MixerKind::gated || m.kind == MixerKind::convex) {
        const Vec<T> g = get_col(l.lg.data(), H, h, b, Tlen);
        const bool convex = m.kind == MixerKind::convex;
        Mat<T> vs = v;
        if (convex)
          for (std::int64_t t = 0; t < Tlen; ++t) vs.row(t) *= static_cast<T>(-std::expm1(static_cast<double>(g(t))));
        Mat<T> dvs;
        Vec<T> dg;
        mqar::gated_head_backward(dq, dk, dvs, dg, dO, m.map, q, k, vs, g);
        dv = dvs;
        for (std::int64_t t = 0; t < Tlen; ++t) {
          const double gam = std::exp(static_cast<double>(g(t))), omg = -std::expm1(static_cast<double>(g(t)));
          double dz = static_cast<double>(dg(t)) * omg;  // log σ(z)' = 1 − σ(z)
          if (convex) {                                  // v' = (1 − γ) v: dv = (1 − γ) dv', dγ = −dv'·v
            dv.row(t) = dvs.row(t) * static_cast<T>(omg);
            dz += -static_cast<double>(dvs.row(t).dot(v.row(t))) * gam * omg;
          }
          dgate[(b * Tlen + t) * H + h] = static_cast<T>(dz);
        }
      } else {
        const Mat<T> qn = get_head(l.qn.data(), D, 0, b, h, Tlen, dh);
        const Mat<T> kn = get_head(l.kn.data(), D, 0, b, h, Tlen, dh);
        Vec<T> rq(Tlen), rk(Tlen);
        for (std::int64_t t = 0; t < Tlen; ++t) {
          rq(t) = l.q_rstd[static_cast<std::size_t>((b * H + h) * Tlen + t)];
          rk(t) = l.k_rstd[static_cast<std::size_t>((b * H + h) * Tlen + t)];
        }
        const Vec<T> beta = get_col(l.beta.data(), H, h, b, Tlen);
        Vec<T> db;
        Mat<T> dqn, dkn;
        if (m.kind == MixerKind::gated_delta) {
          Vec<T> dg;  // raw ∂/∂g; the gate's parameters are done after the loop
          mqar::gated_delta_head_backward(dqn, dkn, dv, db, dg, dO, m.map, qn, kn, v, beta,
                                          get_col(l.lg.data(), H, h, b, Tlen));
          for (std::int64_t t = 0; t < Tlen; ++t) dgate[(b * Tlen + t) * H + h] = dg(t);
        } else {
          const Eigen::MatrixXd qnd = qn.template cast<double>(), knd = kn.template cast<double>();
          const Mat<T> pq = m.map.apply(qnd).template cast<T>();
          const Mat<T> pk = m.map.apply(knd).template cast<T>();
          Mat<T> dpq, dpk;
          mqar::delta_head_backward(dpq, dpk, dv, db, dO, pq, pk, v, beta, m.cfg.chunk);
          dqn = m.map.vjp(qnd, dpq.template cast<double>()).template cast<T>();
          dkn = m.map.vjp(knd, dpk.template cast<double>()).template cast<T>();
        }
        mqar::l2norm_rows_backward(dq, dqn, q, rq);
        mqar::l2norm_rows_backward(dk, dkn, k, rk);
        for (std::int64_t t = 0; t < Tlen; ++t)  // β = σ(z): dz = dβ β (1 − β)
          dbeta[(b * Tlen + t) * H + h] = db(t) * beta(t) * (T(1) - beta(t));
      }
      put_head(dq_all, D, 0, b, h, Tlen, dh, dq);
      put_head(dk_all, D, 0, b, h, Tlen, dh, dk);
      put_head(dv_all, D, 0, b, h, Tlen, dh, dv);
    }
  if (m.kind == MixerKind::gated_delta) {  // g = −exp(A_log) softplus(z + dt_bias), z = x W_αᵀ
    const T* alog = P(m, params, lname(i, "A_log"));
    const T* dtb = P(m, params, lname(i, "dt_bias"));
    T* galog = G(m, grads, lname(i, "A_log"));
    T* gdtb = G(m, grads, lname(i, "dt_bias"));
    for (std::int64_t h = 0; h < H; ++h) {
      const double a = std::exp(static_cast<double>(alog[h]));
      double sa = 0, sd = 0;
      for (std::int64_t n = 0; n < N; ++n) {
        const double u = static_cast<double>(l.gz[static_cast<std::size_t>(n * H + h)]) + static_cast<double>(dtb[h]);
        const double dg = dgate[n * H + h];
        sa += dg * (-a * softplus(u));  // ∂g/∂A_log = g
        const double du = dg * (-a * sigmoid(u));
        sd += du;
        dgate[n * H + h] = static_cast<T>(du);
      }
      galog[h] += static_cast<T>(sa);
      gdtb[h] += static_cast<T>(sd);
    }
  }
  if (m.cfg.rope) {  // the cores' dq, dk are with respect to the rotated q, k
    nn::cpu::rope_backward(dq_all, dq_all, B, Tlen, H, dh, m.cfg.rope_base);
    nn::cpu::rope_backward(dk_all, dk_all, B, Tlen, H, dh, m.cfg.rope_base);
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
  if (m.l2_qk())
    linear_bwd(dx, G(m, grads, lname(i, "wbeta.w")), static_cast<T*>(nullptr), dbeta, x,
               P(m, params, lname(i, "wbeta.w")), N, D, H, true);
  if (m.is_gated())
    linear_bwd(dx, G(m, grads, lname(i, "walpha.w")),
               m.kind == MixerKind::gated_delta ? static_cast<T*>(nullptr) : G(m, grads, lname(i, "walpha.b")), dgate,
               x, P(m, params, lname(i, "walpha.w")), N, D, H, true);
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
