// Dense reference of the §3.3 statistics: the definitions evaluated literally with triple loops
// over (i, j, t) on a full K̂. O(F²P) time, O(F²) memory; used by tests to check the streamed
// implementation (stats.cpp), never by sweeps.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "margin/stats.hpp"

namespace memcap::margin {

GeometryStats geometry_stats_dense_reference(const Eigen::MatrixXd& K, const Eigen::MatrixXd& values,
                                             const Eigen::MatrixXd& codes, const Eigen::VectorXi& map) {
  using Index = Eigen::Index;
  const Index F = K.rows(), P = values.rows(), d = values.cols();
  require(K.cols() == F, "dense kernel must be square");
  require(map.size() == F && codes.rows() == P && codes.cols() == d, "shape mismatch in reference stats");
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<int> key_of(static_cast<std::size_t>(P), -1);
  for (Index i = 0; i < F; ++i) key_of[static_cast<std::size_t>(map[i])] = static_cast<int>(i);

  GeometryStats st;
  st.facts = F;
  st.values = P;
  st.dim = d;
  st.k_min_diag = inf;
  st.k_max_diag = -inf;
  st.v_min = inf;
  st.signal_min = inf;
  st.per_key_margin.resize(F);
  st.per_key_competitor.resize(F);
  double ek_sum = 0;
  std::vector<double> ek(F);
  for (Index i = 0; i < F; ++i) {
    double e = 0, emin = inf;
    for (Index t = 0; t < F; ++t) {
      st.frob2 += K(t, i) * K(t, i);
      if (t == i) continue;
      e += K(t, i) * K(t, i);
      st.k_max_off = std::max(st.k_max_off, std::abs(K(t, i)));
    }
    for (Index j = 0; j < F; ++j)
      if (j != i) {
        double et = 0;
        for (Index t = 0; t < F; ++t)
          if (t != i && t != j) et += K(t, i) * K(t, i);
        emin = std::min(emin, e - et);
        st.e_k_trunc = std::max(st.e_k_trunc, et);
      }
    ek[i] = e;
    ek_sum += e;
    st.e_k = std::max(st.e_k, e);
    st.k_min_diag = std::min(st.k_min_diag, K(i, i));
    st.k_max_diag = std::max(st.k_max_diag, K(i, i));
    st.trace += K(i, i);
    st.diag_sq_sum += K(i, i) * K(i, i);
  }
  st.e_k_mean = ek_sum / static_cast<double>(F);

  std::vector<double> Y(F);
  for (Index i = 0; i < F; ++i) {
    const Index fi = map[i];
    double gmin = inf;
    int arg = -1;
    for (Index j = 0; j < P; ++j) {
      if (j == fi) continue;
      const Eigen::VectorXd a = (values.row(fi) - values.row(j)).transpose();
      for (Index t = 0; t < F; ++t) Y[t] = a.dot(codes.row(map[t]));
      const int jk = key_of[static_cast<std::size_t>(j)];
      double gamma = 0, X = 0, Xt = 0, Ev = 0, Evt = 0, sum = 0, sumt = 0, l1 = 0, l1t = 0, ekt = 0;
      for (Index t = 0; t < F; ++t) {
        gamma += K(t, i) * Y[t];
        if (t == i) continue;
        X += K(t, i) * Y[t];
        Ev += Y[t] * Y[t];
        sum += Y[t];
        l1 += std::abs(Y[t]);
        if (t == jk) continue;
        Xt += K(t, i) * Y[t];
        Evt += Y[t] * Y[t];
        sumt += Y[t];
        l1t += std::abs(Y[t]);
        ekt += K(t, i) * K(t, i);
      }
      if (gamma < gmin) {
        gmin = gamma;
        arg = static_cast<int>(j);
      }
      st.v_min = std::min(st.v_min, Y[i]);
      if (jk >= 0) st.v_max = std::max(st.v_max, std::abs(Y[jk]));
      st.e_v = std::max(st.e_v, Ev);
      st.e_v_trunc = std::max(st.e_v_trunc, Evt);
      st.b_y = std::max(st.b_y, std::abs(sum));
      st.b_y_trunc = std::max(st.b_y_trunc, std::abs(sumt));
      if (Ev > 1e-30) st.l_v = std::max(st.l_v, l1 * l1 / Ev);
      if (Evt > 1e-30) st.l_v_trunc = std::max(st.l_v_trunc, l1t * l1t / Evt);
      const double den = std::sqrt(ek[i] * Ev), dent = std::sqrt(ekt * Evt);
      if (den > 1e-30) {
        st.kappa = std::max(st.kappa, std::max(0.0, -X) / den);
        st.kappa_abs = std::max(st.kappa_abs, std::abs(X) / den);
      }
      if (dent > 1e-30) {
        st.kappa_trunc = std::max(st.kappa_trunc, std::max(0.0, -Xt) / dent);
        st.kappa_trunc_abs = std::max(st.kappa_trunc_abs, std::abs(Xt) / dent);
      }
      st.crosstalk_max = std::max(st.crosstalk_max, -X);
      st.crosstalk_trunc_max = std::max(st.crosstalk_trunc_max, -Xt);
      st.signal_min = std::min(st.signal_min, gamma - Xt);
    }
    st.per_key_margin[i] = gmin;
    st.per_key_competitor[i] = arg;
  }
  st.min_margin = st.per_key_margin.minCoeff();
  st.accuracy = (st.per_key_margin.array() > 0.0).cast<double>().mean();
  return st;
}

}  // namespace memcap::margin
