// Per-head mixer cores of the MQAR model (mqar_mixers.hpp): softmax, quadratic KATA, chunked delta rule.
// Kernel derivative (§2.7 closed forms): M_g  ∂/∂q_a = 2(q_a·k_a) k_a + 2ε q_a;
// Σ_g  ∂/∂q_a = 2c² Σ_b (q_a·k_b) k_b + 2εc q_a (and symmetrically for k).
#include "kata/mqar_mixers.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"

namespace memcap::kata::mqar {

namespace {

// Closed-form constants of a PSD map: A = c2 Σ_pairs G² + ε c1 (‖q‖² + ‖k‖²) + const.
struct PsdForm {
  bool sum = false;
  std::int64_t g = 1, m = 1;
  double c2 = 1, c1 = 1, eps = 0, cst = 0;
};

bool is_psd(const FeatureMap& map) { return map.kind() == MapKind::BlockPsd || map.kind() == MapKind::SumPsd; }

PsdForm psd_form(const FeatureMap& map) {
  PsdForm f;
  f.sum = map.kind() == MapKind::SumPsd;
  f.g = map.groups();
  f.m = map.input_dim() / f.g;
  f.eps = map.eps();
  const double c = f.sum ? map.scale() : 1.0;
  f.c2 = c * c;
  f.c1 = c;
  f.cst = f.eps * f.eps * static_cast<double>(f.m) * (f.sum ? 1.0 : static_cast<double>(f.g));
  return f;
}

void check_map(const FeatureMap& map, std::int64_t d) {
  require(!map.is_softmax() && map.kind() != MapKind::EvenDegree,
          "mixer: feature map '{}' has no finite feature used by the KATA mixers (use m<g>, sigma<g>, orthant, lorentz)",
          map.spec());
  require(map.input_dim() == d, "mixer: feature map '{}' was built for d = {} but the head has width {}", map.spec(),
          map.input_dim(), d);
}

template <class T>
Mat<T> features(const FeatureMap& map, const Mat<T>& x) {
  const Eigen::MatrixXd X = x.template cast<double>();
  return map.apply(X).template cast<T>();
}

template <class T>
void zero_strict_upper(Mat<T>& A) {
  A.template triangularView<Eigen::StrictlyUpper>().setZero();
}

template <class T>
void zero_upper(Mat<T>& A) {  // diagonal too
  A.template triangularView<Eigen::Upper>().setZero();
}

}  // namespace

// ---------------------------------------------------------------------------------------------- softmax

template <class T>
void softmax_head_forward(Mat<T>& o, Vec<T>& lse, const Mat<T>& q, const Mat<T>& k, const Mat<T>& v, double scale) {
  const std::int64_t L = q.rows();
  Mat<T> P = (q * k.transpose()) * static_cast<T>(scale);
  lse.resize(L);
  for (std::int64_t t = 0; t < L; ++t) {
    T mx = P(t, 0);
    for (std::int64_t s = 1; s <= t; ++s) mx = std::max(mx, P(t, s));
    double z = 0;
    for (std::int64_t s = 0; s <= t; ++s) z += std::exp(static_cast<double>(P(t, s) - mx));
    const T l = static_cast<T>(mx + std::log(z));
    lse(t) = l;
    for (std::int64_t s = 0; s <= t; ++s) P(t, s) = std::exp(P(t, s) - l);
    for (std::int64_t s = t + 1; s < L; ++s) P(t, s) = 0;
  }
  o.noalias() = P * v;
}

template <class T>
void softmax_head_backward(Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, const Mat<T>& dout, const Mat<T>& q, const Mat<T>& k,
                           const Mat<T>& v, const Mat<T>& o, const Vec<T>& lse, double scale) {
  const std::int64_t L = q.rows();
  Mat<T> P = (q * k.transpose()) * static_cast<T>(scale);
  for (std::int64_t t = 0; t < L; ++t) {
    for (std::int64_t s = 0; s <= t; ++s) P(t, s) = std::exp(P(t, s) - lse(t));
    for (std::int64_t s = t + 1; s < L; ++s) P(t, s) = 0;
  }
  dv.noalias() = P.transpose() * dout;
  Mat<T> dS = dout * v.transpose();
  const Vec<T> D = (dout.array() * o.array()).rowwise().sum();
  dS.colwise() -= D;
  dS.array() *= P.array();
  dq.noalias() = (dS * k) * static_cast<T>(scale);
  dk.noalias() = (dS.transpose() * q) * static_cast<T>(scale);
}

// ---------------------------------------------------------------------------------------------- cone kernel

template <class T>
void cone_kernel(Mat<T>& A, const FeatureMap& map, const Mat<T>& q, const Mat<T>& k) {
  check_map(map, q.cols());
  if (!is_psd(map)) {
    A = features(map, q) * features(map, k).transpose();
    return;
  }
  const PsdForm f = psd_form(map);
  A.setZero(q.rows(), k.rows());
  for (std::int64_t a = 0; a < f.g; ++a)
    for (std::int64_t b = 0; b < f.g; ++b) {
      if (!f.sum && a != b) continue;
      const Mat<T> G = q.middleCols(a * f.m, f.m) * k.middleCols(b * f.m, f.m).transpose();
      A.array() += static_cast<T>(f.c2) * G.array().square();
    }
  if (f.eps != 0) {
    const Vec<T> nq = q.rowwise().squaredNorm() * static_cast<T>(f.eps * f.c1);
    const Vec<T> nk = k.rowwise().squaredNorm() * static_cast<T>(f.eps * f.c1);
    A.colwise() += nq;
    A.rowwise() += nk.transpose();
    A.array() += static_cast<T>(f.cst);
  }
}

template <class T>
void cone_kernel_vjp(Mat<T>& dq, Mat<T>& dk, const FeatureMap& map, const Mat<T>& dA, const Mat<T>& q, const Mat<T>& k) {
  check_map(map, q.cols());
  if (!is_psd(map)) {
    const Mat<T> pq = features(map, q), pk = features(map, k);
    const Eigen::MatrixXd gq = (dA * pk).template cast<double>(), gk = (dA.transpose() * pq).template cast<double>();
    dq += map.vjp(q.template cast<double>(), gq).template cast<T>();
    dk += map.vjp(k.template cast<double>(), gk).template cast<T>();
    return;
  }
  const PsdForm f = psd_form(map);
  for (std::int64_t a = 0; a < f.g; ++a)
    for (std::int64_t b = 0; b < f.g; ++b) {
      if (!f.sum && a != b) continue;
      const auto qa = q.middleCols(a * f.m, f.m);
      const auto kb = k.middleCols(b * f.m, f.m);
      Mat<T> W = qa * kb.transpose();
      W.array() *= dA.array() * static_cast<T>(2 * f.c2);
      dq.middleCols(a * f.m, f.m).noalias() += W * kb;
      dk.middleCols(b * f.m, f.m).noalias() += W.transpose() * qa;
    }
  if (f.eps != 0) {
    const Vec<T> rq = dA.rowwise().sum() * static_cast<T>(2 * f.eps * f.c1);
    const Vec<T> rk = dA.colwise().sum().transpose() * static_cast<T>(2 * f.eps * f.c1);
    dq += rq.asDiagonal() * q;
    dk += rk.asDiagonal() * k;
  }
}

// ---------------------------------------------------------------------------------------------- KATA

template <class T>
void kata_head_forward(Mat<T>& o, Vec<T>& den, const FeatureMap& map, const Mat<T>& q, const Mat<T>& k,
                       const Mat<T>& v) {
  Mat<T> A;
  cone_kernel(A, map, q, k);
  zero_strict_upper(A);
  den = A.rowwise().sum();
  o.noalias() = A * v;
  for (std::int64_t t = 0; t < o.rows(); ++t) {
    if (den(t) != 0)
      o.row(t) /= den(t);
    else
      o.row(t).setZero();
  }
}

namespace {

// Cotangents of the normalized readout o_t = num_t / den_t: dnum_t = dout_t / den_t, dden_t = −dout_t·o_t / den_t
// (both 0 where den_t = 0: o_t = 0 there and nothing flows back).
template <class T>
void readout_cotangents(Mat<T>& dnum, Vec<T>& dden, const Mat<T>& dout, const Mat<T>& o, const Vec<T>& den) {
  const std::int64_t L = dout.rows();
  dnum.resize(L, dout.cols());
  dden.resize(L);
  for (std::int64_t t = 0; t < L; ++t) {
    if (den(t) != 0) {
      dnum.row(t) = dout.row(t) / den(t);
      dden(t) = -dout.row(t).dot(o.row(t)) / den(t);
    } else {
      dnum.row(t).setZero();
      dden(t) = 0;
    }
  }
}

}  // namespace

template <class T>
void kata_head_backward(Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, const Mat<T>& dout, const FeatureMap& map, const Mat<T>& q,
                        const Mat<T>& k, const Mat<T>& v, const Mat<T>& o, const Vec<T>& den) {
  const std::int64_t L = q.rows();
  Mat<T> A;
  cone_kernel(A, map, q, k);
  zero_strict_upper(A);
  Mat<T> dnum;
  Vec<T> dden;
  readout_cotangents(dnum, dden, dout, o, den);
  dv.noalias() = A.transpose() * dnum;
  Mat<T> dA = dnum * v.transpose();
  dA.colwise() += dden;
  zero_strict_upper(dA);
  dq.setZero(L, q.cols());
  dk.setZero(L, k.cols());
  cone_kernel_vjp(dq, dk, map, dA, q, k);
}

template <class T>
void kata_head_forward_chunked(Mat<T>& o, Vec<T>& den, const FeatureMap& map, const Mat<T>& q, const Mat<T>& k,
                               const Mat<T>& v, std::int64_t chunk) {
  require(chunk >= 1, "chunked KATA: chunk must be >= 1 (got {})", chunk);
  const std::int64_t L = q.rows(), dv = v.cols();
  const Mat<T> pq = features(map, q), pk = features(map, k);
  const std::int64_t n = pq.cols();
  Mat<T> S = Mat<T>::Zero(n, dv);
  Vec<T> Z = Vec<T>::Zero(n);
  o.resize(L, dv);
  den.resize(L);
  for (std::int64_t r0 = 0; r0 < L; r0 += chunk) {
    const std::int64_t c = std::min(chunk, L - r0);
    const Mat<T> qc = q.middleRows(r0, c), kc = k.middleRows(r0, c), vc = v.middleRows(r0, c);
    Mat<T> A;
    cone_kernel(A, map, qc, kc);
    zero_strict_upper(A);
    const Mat<T> num = pq.middleRows(r0, c) * S + A * vc;
    const Vec<T> dn = pq.middleRows(r0, c) * Z + A.rowwise().sum();
    for (std::int64_t t = 0; t < c; ++t) {
      den(r0 + t) = dn(t);
      if (dn(t) != 0)
        o.row(r0 + t) = num.row(t) / dn(t);
      else
        o.row(r0 + t).setZero();
    }
    S.noalias() += pk.middleRows(r0, c).transpose() * vc;
    Z.noalias() += pk.middleRows(r0, c).transpose() * Vec<T>::Ones(c);
  }
}

template <class T>
void kata_head_backward_chunked(Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, const Mat<T>& dout, const FeatureMap& map,
                                const Mat<T>& q, const Mat<T>& k, const Mat<T>& v, const Mat<T>& o, const Vec<T>& den,
                                std::int64_t chunk) {
  require(chunk >= 1, "chunked KATA: chunk must be >= 1 (got {})", chunk);
  const std::int64_t L = q.rows(), dvw = v.cols();
  const Mat<T> pq = features(map, q), pk = features(map, k);
  const std::int64_t n = pq.cols(), nc = (L + chunk - 1) / chunk;
  // pass 1: the prefix state each chunk's queries read
  std::vector<Mat<T>> S(static_cast<std::size_t>(nc));
  std::vector<Vec<T>> Z(static_cast<std::size_t>(nc));
  {
    Mat<T> s = Mat<T>::Zero(n, dvw);
    Vec<T> z = Vec<T>::Zero(n);
    for (std::int64_t ci = 0; ci < nc; ++ci) {
      const std::int64_t r0 = ci * chunk, c = std::min(chunk, L - r0);
      S[static_cast<std::size_t>(ci)] = s;
      Z[static_cast<std::size_t>(ci)] = z;
      s.noalias() += pk.middleRows(r0, c).transpose() * v.middleRows(r0, c);
      z.noalias() += pk.middleRows(r0, c).transpose() * Vec<T>::Ones(c);
    }
  }
  Mat<T> dnum;
  Vec<T> dden;
  readout_cotangents(dnum, dden, dout, o, den);
  dq.setZero(L, q.cols());
  dk.setZero(L, k.cols());
  dv.setZero(L, dvw);
  Mat<T> dpq(L, n), dpk(L, n);
  // pass 2, last chunk first: GS, GZ = the cotangent of the state that later chunks read (their queries' Σ ψ(q) dnumᵀ)
  Mat<T> GS = Mat<T>::Zero(n, dvw);
  Vec<T> GZ = Vec<T>::Zero(n);
  for (std::int64_t ci = nc - 1; ci >= 0; --ci) {
    const std::int64_t r0 = ci * chunk, c = std::min(chunk, L - r0);
    const Mat<T> qc = q.middleRows(r0, c), kc = k.middleRows(r0, c), vc = v.middleRows(r0, c);
    const Mat<T> dnc = dnum.middleRows(r0, c);
    const Vec<T> ddc = dden.segment(r0, c);
    // keys of this chunk enter every later chunk's state
    dpk.middleRows(r0, c).noalias() = vc * GS.transpose();
    dpk.middleRows(r0, c).rowwise() += GZ.transpose();
    dv.middleRows(r0, c).noalias() += pk.middleRows(r0, c) * GS;
    // queries of this chunk read the prefix state
    dpq.middleRows(r0, c).noalias() = dnc * S[static_cast<std::size_t>(ci)].transpose();
    dpq.middleRows(r0, c).noalias() += ddc * Z[static_cast<std::size_t>(ci)].transpose();
    GS.noalias() += pq.middleRows(r0, c).transpose() * dnc;
    GZ.noalias() += pq.middleRows(r0, c).transpose() * ddc;
    // inside the chunk: the quadratic form
    Mat<T> A;
    cone_kernel(A, map, qc, kc);
    zero_strict_upper(A);
    Mat<T> dA = dnc * vc.transpose();
    dA.colwise() += ddc;
    zero_strict_upper(dA);
    dv.middleRows(r0, c).noalias() += A.transpose() * dnc;
    Mat<T> dqc = Mat<T>::Zero(c, q.cols()), dkc = Mat<T>::Zero(c, k.cols());
    cone_kernel_vjp(dqc, dkc, map, dA, qc, kc);
    dq.middleRows(r0, c) += dqc;
    dk.middleRows(r0, c) += dkc;
  }
  dq += map.vjp(q.template cast<double>(), dpq.template cast<double>()).template cast<T>();
  dk += map.vjp(k.template cast<double>(), dpk.template cast<double>()).template cast<T>();
}

// ---------------------------------------------------------------------------------------------- delta rule

template <class T>
Mat<T> neumann_inverse(const Mat<T>& N) {
  const std::int64_t L = N.rows();
  const Mat<T> I = Mat<T>::Identity(L, L);
  Mat<T> R = I, P = -N;
  for (std::int64_t p = 1; p < L; p *= 2) {
    R = (R * (I + P)).eval();
    if (2 * p < L) P = (P * P).eval();
  }
  return R;
}

namespace {

// Quantities of one chunk recomputed from its incoming state S (n × dv).
template <class T>
struct DeltaChunk {
  Mat<T> Akk, Aqk, Tinv, Vp, U;
};

template <class T>
void delta_chunk(DeltaChunk<T>& c, const Mat<T>& S, const Mat<T>& Pq, const Mat<T>& Pk, const Mat<T>& V,
                 const Vec<T>& b) {
  c.Akk.noalias() = Pk * Pk.transpose();
  c.Aqk.noalias() = Pq * Pk.transpose();
  Mat<T> N = b.asDiagonal() * c.Akk;
  zero_upper(N);
  c.Vp = V;
  c.Vp.noalias() -= Pk * S;
  c.Tinv = neumann_inverse(N);
  c.U.noalias() = c.Tinv * (b.asDiagonal() * c.Vp);
}

void check_delta(std::int64_t T, std::int64_t n, std::int64_t nk, std::int64_t Tk, std::int64_t Tv, std::int64_t Tb,
                 std::int64_t chunk) {
  require(chunk >= 1, "delta rule: chunk size {} must be >= 1", chunk);
  require(nk == n && Tk == T && Tv == T && Tb == T, "delta rule: shapes of psi_q, psi_k, v and beta do not match");
}

}  // namespace

template <class T>
void delta_head_forward(Mat<T>& o, const Mat<T>& psi_q, const Mat<T>& psi_k, const Mat<T>& v, const Vec<T>& beta,
                        std::int64_t chunk) {
  const std::int64_t L = psi_q.rows(), n = psi_q.cols(), dv = v.cols();
  check_delta(L, n, psi_k.cols(), psi_k.rows(), v.rows(), beta.size(), chunk);
  Mat<T> S = Mat<T>::Zero(n, dv);
  o.resize(L, dv);
  DeltaChunk<T> c;
  for (std::int64_t t0 = 0; t0 < L; t0 += chunk) {
    const std::int64_t len = std::min(chunk, L - t0);
    const Mat<T> Pq = psi_q.middleRows(t0, len), Pk = psi_k.middleRows(t0, len), V = v.middleRows(t0, len);
    const Vec<T> b = beta.segment(t0, len);
    delta_chunk(c, S, Pq, Pk, V, b);
    zero_strict_upper(c.Aqk);
    o.middleRows(t0, len).noalias() = Pq * S + c.Aqk * c.U;
    S.noalias() += Pk.transpose() * c.U;
  }
}

template <class T>
void delta_head_backward(Mat<T>& dpsi_q, Mat<T>& dpsi_k, Mat<T>& dv, Vec<T>& dbeta, const Mat<T>& dout,
                         const Mat<T>& psi_q, const Mat<T>& psi_k, const Mat<T>& v, const Vec<T>& beta,
                         std::int64_t chunk) {
  const std::int64_t L = psi_q.rows(), n = psi_q.cols(), d_v = v.cols();
  check_delta(L, n, psi_k.cols(), psi_k.rows(), v.rows(), beta.size(), chunk);
  const std::int64_t nc = (L + chunk - 1) / chunk;
  // Forward again, keeping the incoming state of every chunk.
  std::vector<Mat<T>> states(static_cast<std::size_t>(nc));
  DeltaChunk<T> c;
  Mat<T> S = Mat<T>::Zero(n, d_v);
  for (std::int64_t i = 0; i < nc; ++i) {
    const std::int64_t t0 = i * chunk, len = std::min(chunk, L - t0);
    states[static_cast<std::size_t>(i)] = S;
    const Mat<T> Pq = psi_q.middleRows(t0, len), Pk = psi_k.middleRows(t0, len), V = v.middleRows(t0, len);
    const Vec<T> b = beta.segment(t0, len);
    delta_chunk(c, S, Pq, Pk, V, b);
    S.noalias() += Pk.transpose() * c.U;
  }
  dpsi_q.resize(L, n);
  dpsi_k.resize(L, n);
  dv.resize(L, d_v);
  dbeta.resize(L);
  Mat<T> dS_out = Mat<T>::Zero(n, d_v), dS_in;
  for (std::int64_t i = nc - 1; i >= 0; --i) {
    const std::int64_t t0 = i * chunk, len = std::min(chunk, L - t0);
    const Mat<T>& Sc = states[static_cast<std::size_t>(i)];
    const Mat<T> Pq = psi_q.middleRows(t0, len), Pk = psi_k.middleRows(t0, len), V = v.middleRows(t0, len);
    const Vec<T> b = beta.segment(t0, len);
    const Mat<T> dO = dout.middleRows(t0, len);
    delta_chunk(c, Sc, Pq, Pk, V, b);
    Mat<T> Aqk_l = c.Aqk;
    zero_strict_upper(Aqk_l);
    // O = Pq S + tril(Aqk) U ; S' = S + Pkᵀ U
    Mat<T> dPq = dO * Sc.transpose();
    dS_in = Pq.transpose() * dO + dS_out;
    Mat<T> dAqk = dO * c.U.transpose();
    zero_strict_upper(dAqk);
    Mat<T> dU = Aqk_l.transpose() * dO;
    dU.noalias() += Pk * dS_out;
    // U = Tinv W, W = diag(b) V'
    const Mat<T> W = b.asDiagonal() * c.Vp;
    const Mat<T> dTinv = dU * W.transpose();
    const Mat<T> dW = c.Tinv.transpose() * dU;
    const Mat<T> dVp = b.asDiagonal() * dW;
    // Tinv = (I + N)^{-1}: dN = −Tinvᵀ dTinv Tinvᵀ; N = diag(b) tril(Akk, −1)
    Mat<T> dN = -(c.Tinv.transpose() * dTinv * c.Tinv.transpose());
    zero_upper(dN);
    Mat<T> Akk_sl = c.Akk;
    zero_upper(Akk_sl);
    const Mat<T> dAkk = b.asDiagonal() * dN;  // strictly lower
    // V' = V − Pk S
    dv.middleRows(t0, len) = dVp;
    dS_in.noalias() -= Pk.transpose() * dVp;
    Mat<T> dPk = c.U * dS_out.transpose();
    dPk.noalias() -= dVp * Sc.transpose();
    dPk.noalias() += (dAkk + dAkk.transpose()) * Pk;
    dPk.noalias() += dAqk.transpose() * Pq;
    dPq.noalias() += dAqk * Pk;
    dpsi_q.middleRows(t0, len) = dPq;
    dpsi_k.middleRows(t0, len) = dPk;
    dbeta.segment(t0, len) =
        (dW.array() * c.Vp.array()).rowwise().sum().matrix() + (dN.array() * Akk_sl.array()).rowwise().sum().matrix();
    dS_out.swap(dS_in);
  }
}

Mat<double> delta_head_recurrent(const Mat<double>& psi_q, const Mat<double>& psi_k, const Mat<double>& v,
                                 const Vec<double>& beta) {
  const std::int64_t L = psi_q.rows(), n = psi_q.cols(), dv = v.cols();
  check_delta(L, n, psi_k.cols(), psi_k.rows(), v.rows(), beta.size(), 1);
  Mat<double> S = Mat<double>::Zero(n, dv), o(L, dv);
  for (std::int64_t t = 0; t < L; ++t) {
    const Eigen::RowVectorXd u = beta(t) * (v.row(t) - psi_k.row(t) * S);
    S.noalias() += psi_k.row(t).transpose() * u;
    o.row(t) = psi_q.row(t) * S;
  }
  return o;
}

// ---------------------------------------------------------------------------------------------- l2 norm

template <class T>
void l2norm_rows_forward(Mat<T>& out, Vec<T>& rstd, const Mat<T>& x, double eps) {
  rstd.resize(x.rows());
  out.resize(x.rows(), x.cols());
  for (std::int64_t t = 0; t < x.rows(); ++t) {
    rstd(t) = static_cast<T>(1.0 / std::sqrt(static_cast<double>(x.row(t).squaredNorm()) + eps));
    out.row(t) = x.row(t) * rstd(t);
  }
}

template <class T>
void l2norm_rows_backward(Mat<T>& dx, const Mat<T>& dout, const Mat<T>& x, const Vec<T>& rstd) {
  dx.resize(x.rows(), x.cols());
  for (std::int64_t t = 0; t < x.rows(); ++t) {
    const T r = rstd(t);
    dx.row(t) = r * dout.row(t) - (r * r * r * x.row(t).dot(dout.row(t))) * x.row(t);
  }
}

// ---------------------------------------------------------------------------------------------- gated variants

namespace {

// Γ[t,s] = exp(G_t − G_s) for s <= t, 0 above (G = cumsum g, in double).
template <class T>
Mat<T> decay_matrix(const Vec<T>& g) {
  const std::int64_t L = g.size();
  std::vector<double> G(static_cast<std::size_t>(L));
  double acc = 0;
  for (std::int64_t t = 0; t < L; ++t) G[static_cast<std::size_t>(t)] = acc += static_cast<double>(g(t));
  Mat<T> D = Mat<T>::Zero(L, L);
  for (std::int64_t t = 0; t < L; ++t)
    for (std::int64_t s = 0; s <= t; ++s)
      D(t, s) = static_cast<T>(std::exp(G[static_cast<std::size_t>(t)] - G[static_cast<std::size_t>(s)]));
  return D;
}

// dg from dΓ: E = dΓ ⊙ Γ, dG_t = Σ_s E_ts − Σ_s E_st, dg_r = Σ_{t >= r} dG_t.
template <class T>
Vec<T> decay_vjp(const Mat<T>& dGam, const Mat<T>& Gam) {
  const Mat<T> E = dGam.cwiseProduct(Gam);
  const Vec<T> dG = E.rowwise().sum() - E.colwise().sum().transpose();
  Vec<T> dg(dG.size());
  T acc = 0;
  for (std::int64_t t = dG.size() - 1; t >= 0; --t) dg(t) = acc += dG(t);
  return dg;
}

void check_gated(std::int64_t L, std::int64_t Lk, std::int64_t Lv, std::int64_t Lg, std::int64_t Lb) {
  require(Lk == L && Lv == L && Lg == L && (Lb < 0 || Lb == L),
          "gated mixer: q, k, v, gate (and beta) must have the same number of rows ({}, {}, {}, {}, {})", L, Lk, Lv, Lg,
          Lb);
}

}  // namespace

template <class T>
void gated_head_forward(Mat<T>& o, const FeatureMap& map, const Mat<T>& q, const Mat<T>& k, const Mat<T>& v,
                        const Vec<T>& g) {
  check_gated(q.rows(), k.rows(), v.rows(), g.size(), -1);
  Mat<T> A;
  cone_kernel(A, map, q, k);
  const Mat<T> W = A.cwiseProduct(decay_matrix(g));
  o.noalias() = W * v;
}

template <class T>
void gated_head_backward(Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, Vec<T>& dg, const Mat<T>& dout, const FeatureMap& map,
                         const Mat<T>& q, const Mat<T>& k, const Mat<T>& v, const Vec<T>& g) {
  const std::int64_t L = q.rows();
  check_gated(L, k.rows(), v.rows(), g.size(), -1);
  Mat<T> A;
  cone_kernel(A, map, q, k);
  const Mat<T> Gam = decay_matrix(g);
  dv.noalias() = A.cwiseProduct(Gam).transpose() * dout;
  Mat<T> dW = dout * v.transpose();
  zero_strict_upper(dW);
  dg = decay_vjp<T>(dW.cwiseProduct(A), Gam);
  const Mat<T> dA = dW.cwiseProduct(Gam);
  dq.setZero(L, q.cols());
  dk.setZero(L, k.cols());
  cone_kernel_vjp(dq, dk, map, dA, q, k);
}

template <class T>
void gated_delta_head_forward(Mat<T>& o, const FeatureMap& map, const Mat<T>& q, const Mat<T>& k, const Mat<T>& v,
                              const Vec<T>& beta, const Vec<T>& g) {
  check_gated(q.rows(), k.rows(), v.rows(), g.size(), beta.size());
  const Mat<T> Gam = decay_matrix(g);
  Mat<T> Kk;
  cone_kernel(Kk, map, k, k);
  Mat<T> N = beta.asDiagonal() * Kk.cwiseProduct(Gam);  // only the strict lower part is read
  const Mat<T> U = N.template triangularView<Eigen::UnitLower>().solve(beta.asDiagonal() * v);
  Mat<T> A;
  cone_kernel(A, map, q, k);
  o.noalias() = A.cwiseProduct(Gam) * U;
}

template <class T>
void gated_delta_head_backward(Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, Vec<T>& dbeta, Vec<T>& dg, const Mat<T>& dout,
                               const FeatureMap& map, const Mat<T>& q, const Mat<T>& k, const Mat<T>& v,
                               const Vec<T>& beta, const Vec<T>& g) {
  const std::int64_t L = q.rows();
  check_gated(L, k.rows(), v.rows(), g.size(), beta.size());
  const Mat<T> Gam = decay_matrix(g);
  Mat<T> Kk, A;
  cone_kernel(Kk, map, k, k);
  cone_kernel(A, map, q, k);
  const Mat<T> KG = Kk.cwiseProduct(Gam);
  const Mat<T> N = beta.asDiagonal() * KG;
  const auto M = N.template triangularView<Eigen::UnitLower>();  // I + strict lower part of N
  const Mat<T> U = M.solve(beta.asDiagonal() * v);
  // o = (Γ ⊙ A) U
  const Mat<T> dU = A.cwiseProduct(Gam).transpose() * dout;
  Mat<T> dW = dout * U.transpose();
  zero_strict_upper(dW);
  // U = M^{-1} diag(β) V: dY = M^{-T} dU, d(diag(β) V) = dY, dM = −dY Uᵀ (strict lower)
  const Mat<T> dY = M.transpose().solve(dU);
  dv = beta.asDiagonal() * dY;
  dbeta = dY.cwiseProduct(v).rowwise().sum();
  Mat<T> dN = -(dY * U.transpose());
  dN.template triangularView<Eigen::Upper>().setZero();  // diagonal too
  dbeta += dN.cwiseProduct(KG).rowwise().sum();
  const Mat<T> dKk = beta.asDiagonal() * dN.cwiseProduct(Gam);
  const Mat<T> dGam = dW.cwiseProduct(A) + beta.asDiagonal() * dN.cwiseProduct(Kk);
  dg = decay_vjp<T>(dGam, Gam);
  dq.setZero(L, q.cols());
  dk.setZero(L, k.cols());
  cone_kernel_vjp(dq, dk, map, Mat<T>(dW.cwiseProduct(Gam)), q, k);
  Mat<T> dk1 = Mat<T>::Zero(L, k.cols()), dk2 = Mat<T>::Zero(L, k.cols());
  cone_kernel_vjp(dk1, dk2, map, dKk, k, k);
  dk += dk1 + dk2;
}

Mat<double> gated_head_recurrent(const Mat<double>& psi_q, const Mat<double>& psi_k, const Mat<double>& v,
                                 const Vec<double>& gamma, const Vec<double>* beta) {
  const std::int64_t L = psi_q.rows(), n = psi_q.cols(), dv = v.cols();
  Mat<double> S = Mat<double>::Zero(n, dv), o(L, dv);
  for (std::int64_t t = 0; t < L; ++t) {
    const Vec<double> p = psi_k.row(t).transpose();
    if (beta) {
      const Eigen::RowVectorXd pS = p.transpose() * S;
      S = gamma(t) * (S - (*beta)(t) * p * pS) + (*beta)(t) * p * v.row(t);
    } else {
      S = gamma(t) * S + p * v.row(t);
    }
    o.row(t) = psi_q.row(t) * S;
  }
  return o;
}

#define MEMCAP_MQAR_MIXERS(T)                                                                                       \
  template void softmax_head_forward<T>(Mat<T>&, Vec<T>&, const Mat<T>&, const Mat<T>&, const Mat<T>&, double);    \
  template void softmax_head_backward<T>(Mat<T>&, Mat<T>&, Mat<T>&, const Mat<T>&, const Mat<T>&, const Mat<T>&,   \
                                         const Mat<T>&, const Mat<T>&, const Vec<T>&, double);                     \
  template void cone_kernel<T>(Mat<T>&, const FeatureMap&, const Mat<T>&, const Mat<T>&);                           \
  template void cone_kernel_vjp<T>(Mat<T>&, Mat<T>&, const FeatureMap&, const Mat<T>&, const Mat<T>&,              \
                                   const Mat<T>&);                                                                  \
  template void kata_head_forward<T>(Mat<T>&, Vec<T>&, const FeatureMap&, const Mat<T>&, const Mat<T>&,            \
                                     const Mat<T>&);                                                                \
  template void kata_head_backward<T>(Mat<T>&, Mat<T>&, Mat<T>&, const Mat<T>&, const FeatureMap&, const Mat<T>&,  \
                                      const Mat<T>&, const Mat<T>&, const Mat<T>&, const Vec<T>&);                  \
  template void kata_head_forward_chunked<T>(Mat<T>&, Vec<T>&, const FeatureMap&, const Mat<T>&, const Mat<T>&,    \
                                             const Mat<T>&, std::int64_t);                                          \
  template void kata_head_backward_chunked<T>(Mat<T>&, Mat<T>&, Mat<T>&, const Mat<T>&, const FeatureMap&,          \
                                              const Mat<T>&, const Mat<T>&, const Mat<T>&, const Mat<T>&,           \
                                              const Vec<T>&, std::int64_t);                                         \
  template void delta_head_forward<T>(Mat<T>&, const Mat<T>&, const Mat<T>&, const Mat<T>&, const Vec<T>&,         \
                                      std::int64_t);                                                                \
  template void delta_head_backward<T>(Mat<T>&, Mat<T>&, Mat<T>&, Vec<T>&, const Mat<T>&, const Mat<T>&,           \
                                       const Mat<T>&, const Mat<T>&, const Vec<T>&, std::int64_t);                  \
  template Mat<T> neumann_inverse<T>(const Mat<T>&);                                                                \
  template void l2norm_rows_forward<T>(Mat<T>&, Vec<T>&, const Mat<T>&, double);                                    \
  template void l2norm_rows_backward<T>(Mat<T>&, const Mat<T>&, const Mat<T>&, const Vec<T>&);                  \
  template void gated_head_forward<T>(Mat<T>&, const FeatureMap&, const Mat<T>&, const Mat<T>&, const Mat<T>&,      \
                                      const Vec<T>&);                                                               \
  template void gated_head_backward<T>(Mat<T>&, Mat<T>&, Mat<T>&, Vec<T>&, const Mat<T>&, const FeatureMap&,        \
                                       const Mat<T>&, const Mat<T>&, const Mat<T>&, const Vec<T>&);                 \
  template void gated_delta_head_forward<T>(Mat<T>&, const FeatureMap&, const Mat<T>&, const Mat<T>&, const Mat<T>&,\
                                            const Vec<T>&, const Vec<T>&);                                          \
  template void gated_delta_head_backward<T>(Mat<T>&, Mat<T>&, Mat<T>&, Vec<T>&, Vec<T>&, const Mat<T>&,            \
                                             const FeatureMap&, const Mat<T>&, const Mat<T>&, const Mat<T>&,        \
                                             const Vec<T>&, const Vec<T>&);

MEMCAP_MQAR_MIXERS(double)
MEMCAP_MQAR_MIXERS(float)
#undef MEMCAP_MQAR_MIXERS

}  // namespace memcap::kata::mqar
