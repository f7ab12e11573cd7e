// CPU reference of the E7 mixers and the decoder (float64; OpenMP over rows or value columns, BLAS
// GEMMs; nothing depends on the thread count). Large N×N and N×dp^U matrices exist only as row tiles of
// at most kTileDoubles. The CUDA path (kernels/ramnet_recall.cu) follows the same steps.
//
// RAM-Net memory (§1.6, §1.7): the state is kept "augmented", X = D × (dv+1) with the slot mass in the
// last column, so one product R X gives both the numerator and the normaliser of a readout:
//   mass-aware:  X = [m⊙s | m],  o = (R X)[:dv] / ((R X)[dv] + ε)
//   standard:    X = [s | m],    o = (R X)[:dv]
// Cumulative writes (γ = −inf, ε = 0) give m⊙s = Σ_t w_t v_t exactly (§2.9), a GEMM (full writes) or a
// scatter (Top-K writes); otherwise the GSU recursion runs, for full writes in the unrolled form
// s_N(a) = Σ_t λ_t(a) Π_{r>t}(1−λ_r(a)) v_t (coefficients by one forward and one backward pass per slot,
// then one GEMM), for Top-K writes step by step on the K written slots.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "ramnet/recall.hpp"

namespace memcap::ramnet {
namespace {

constexpr std::int64_t kTileDoubles = std::int64_t(1) << 23;  // 64 MiB per tile buffer
constexpr double kTinyRowMax = 1e-280;                        // κ rows below this are redone in log space

using Stride = Eigen::OuterStride<>;
using ConstStrided = Eigen::Map<const RowMatrix, 0, Stride>;

std::int64_t tile_rows(std::int64_t width) {
  return std::max<std::int64_t>(1, kTileDoubles / std::max<std::int64_t>(width, 1));
}

// Factor u of a table as an n × dp matrix (row stride U·dp).
ConstStrided factor_block(const FactorTables& t, int u) {
  return ConstStrided(t.prob.data() + static_cast<std::ptrdiff_t>(u) * t.dp, t.n, t.dp, Stride(t.U * t.dp));
}

// Dense features w(i, a) = Π_u p_u(a_u) (u = 0..U−1 in order) of rows [r0, r0+rows) and slots
// [a0, a0+cols), into out (rows × cols, row-major, row stride ld; ld = 0: cols).
void dense_features(const FactorTables& t, std::int64_t r0, std::int64_t rows, std::int64_t a0, std::int64_t cols,
                    double* out, std::int64_t ld = 0) {
  if (ld == 0) ld = cols;
  const int U = t.U, dp = t.dp;
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (std::int64_t i = 0; i < rows; ++i) {
    const double* p = t.prob_row(r0 + i);
    int dig[64];
    std::int64_t f = a0;
    for (int u = 0; u < U; ++u) {
      dig[u] = static_cast<int>(f % dp);
      f /= dp;
    }
    double* o = out + i * ld;
    for (std::int64_t c = 0; c < cols; ++c) {
      double acc = p[dig[0]];
      for (int u = 1; u < U; ++u) acc *= p[u * dp + dig[u]];
      o[c] = acc;
      for (int u = 0; u < U; ++u) {
        if (++dig[u] < dp) break;
        dig[u] = 0;
      }
    }
  }
}

// [V | 1]: values with a ones column (the normaliser rides along every GEMM).
RowMatrix augmented(const RowMatrix& V) {
  RowMatrix A(V.rows(), V.cols() + 1);
  A.leftCols(V.cols()) = V;
  A.col(V.cols()).setOnes();
  return A;
}

// o = num / (den + eps) row-wise from an augmented output; a zero denominator gives o = 0 (dead).
RowMatrix normalise(const RowMatrix& Oa, double eps) {
  const Eigen::Index dv = Oa.cols() - 1;
  RowMatrix O(Oa.rows(), dv);
  for (Eigen::Index i = 0; i < Oa.rows(); ++i) {
    const double den = Oa(i, dv) + eps;
    if (den > 0 && std::isfinite(den)) O.row(i) = Oa.row(i).head(dv) / den;
    else O.row(i).setZero();
  }
  return O;
}

// 1 − w for the product weight of `flat` under one prob row, accurate also when w ≈ 1 (§5.6):
// 1 − Π_u (1 − d_u) = −expm1(Σ_u log1p(−d_u)), d_u = Σ_{j ≠ a_u} p_u(j) summed directly.
double one_minus_weight(const double* prob_row, int dp, int U, std::int64_t flat, double w) {
  if (w < 0.5) return 1.0 - w;
  double s = 0;
  for (int u = 0; u < U; ++u) {
    const int a = static_cast<int>(flat % dp);
    flat /= dp;
    double d = 0;
    for (int j = 0; j < dp; ++j)
      if (j != a) d += prob_row[u * dp + j];
    s += std::log1p(-d);
  }
  return -std::expm1(s);
}

// Retention gate g = (1−w) / ((1−w) + w e^γ), evaluated without overflow for γ > 0 (§5.6).
// eg = e^γ, emg = e^−γ (γ = −inf: eg = 0, so g = 1).
inline double gate(double omw, double w, double gamma, double eg, double emg) {
  if (gamma > 0) {
    const double a = omw * emg;
    return a / (a + w);
  }
  return omw / (omw + w * eg);
}

// ---- RAM-Net writes ---------------------------------------------------------------------------

// Cumulative writes: S = Σ_t w_t [v_t | 1] (D × (dv+1)).
RowMatrix write_cumulative(const FactorTables& wt, const SparseWeights* sp, const RowMatrix& Va, std::int64_t D) {
  const std::int64_t N = Va.rows(), cols = Va.cols();
  RowMatrix S = RowMatrix::Zero(D, cols);
  if (!sp) {
    const std::int64_t T = tile_rows(D);
    RowMatrix W(std::min(T, N), D);
    for (std::int64_t r0 = 0; r0 < N; r0 += T) {
      const std::int64_t rows = std::min(T, N - r0);
      dense_features(wt, r0, rows, 0, D, W.data());
      S.noalias() += W.topRows(rows).transpose() * Va.middleRows(r0, rows);
    }
    return S;
  }
  const std::int64_t K = sp->K;
  // Scatter in write order; threads own value columns, so the sums do not depend on the thread count.
#pragma omp parallel for schedule(static) if (N * K * cols > 1 << 20)
  for (std::int64_t c = 0; c < cols; ++c)
    for (std::int64_t t = 0; t < N; ++t)
      for (std::int64_t k = 0; k < K; ++k) {
        const auto e = static_cast<std::size_t>(t * K + k);
        S(sp->flat[e], c) += sp->weight[e] * Va(t, c);
      }
  return S;
}

// GSU recursion with full writes, by the unrolled coefficients, slot tile by slot tile.
void write_recursive_dense(const RecallModel& m, const FactorTables& wt, const RowMatrix& V, std::int64_t D,
                           Eigen::VectorXd& mass, RowMatrix& state) {
  const std::int64_t N = V.rows();
  const int U = wt.U, dp = wt.dp;
  const double eg = std::exp(m.gamma), emg = std::exp(-m.gamma), eps = m.eps;
  mass.setZero(D);
  state.setZero(D, V.cols());
  const std::int64_t T = std::min(D, tile_rows(N));
  RowMatrix L(N, T);  // λ_t(a), then the coefficients, for one slot tile
  for (std::int64_t a0 = 0; a0 < D; a0 += T) {
    const std::int64_t cols = std::min(T, D - a0);
    dense_features(wt, 0, N, a0, cols, L.data(), T);  // w_t(a)
#pragma omp parallel for schedule(static)
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t a = a0 + c;
      double mm = 0;
      for (std::int64_t t = 0; t < N; ++t) {
        const double w = L(t, c);
        if (w == 0) continue;  // g = 1, λ = 0: an unwritten slot is untouched
        const double g = gate(one_minus_weight(wt.prob_row(t), dp, U, a, w), w, m.gamma, eg, emg);
        mm = g * mm + w;
        L(t, c) = w / (mm + eps);
      }
      mass(a) = mm;
      double P = 1;
      for (std::int64_t t = N - 1; t >= 0; --t) {
        const double lam = L(t, c);
        L(t, c) = lam * P;
        P *= 1.0 - lam;
      }
    }
    state.middleRows(a0, cols).noalias() = L.leftCols(cols).transpose() * V;
  }
}

// GSU recursion with Top-K writes, step by step on the K written slots.
void write_recursive_sparse(const RecallModel& m, const FactorTables& wt, const SparseWeights& sp, const RowMatrix& V,
                            std::int64_t D, Eigen::VectorXd& mass, RowMatrix& state) {
  const std::int64_t N = V.rows(), K = sp.K, dv = V.cols();
  const double eg = std::exp(m.gamma), emg = std::exp(-m.gamma);
  mass.setZero(D);
  state.setZero(D, dv);
  std::vector<double> lam(static_cast<std::size_t>(N * K), 0.0);
  for (std::int64_t t = 0; t < N; ++t)  // masses and steps λ (scalar, sequential)
    for (std::int64_t k = 0; k < K; ++k) {
      const auto e = static_cast<std::size_t>(t * K + k);
      const double w = sp.weight[e];
      if (w == 0) continue;
      const std::int64_t a = sp.flat[e];
      const double g = gate(one_minus_weight(wt.prob_row(t), wt.dp, wt.U, a, w), w, m.gamma, eg, emg);
      mass(a) = g * mass(a) + w;
      lam[e] = w / (mass(a) + m.eps);
    }
#pragma omp parallel for schedule(static) if (N * K * dv > 1 << 20)
  for (std::int64_t c = 0; c < dv; ++c)
    for (std::int64_t t = 0; t < N; ++t)
      for (std::int64_t k = 0; k < K; ++k) {
        const auto e = static_cast<std::size_t>(t * K + k);
        if (lam[e] == 0) continue;
        double& s = state(sp.flat[e], c);
        s += lam[e] * (V(t, c) - s);
      }
}

// The augmented state X of the readout (see the file comment).
RowMatrix ramnet_state(const RecallModel& m, const RecallInputs& in, const FactorTables& wt, const SparseWeights* sp,
                       bool force_recursion) {
  const std::int64_t D = address_count(m.params), dv = in.values.cols();
  RowMatrix X;
  if (m.cumulative() && !force_recursion) {
    X = write_cumulative(wt, sp, augmented(in.values), D);
    if (!m.mass_readout)
      for (std::int64_t a = 0; a < D; ++a) {
        const double mm = X(a, dv);
        if (mm > 0) X.row(a).head(dv) /= mm;
        else X.row(a).head(dv).setZero();
      }
    return X;
  }
  Eigen::VectorXd mass;
  RowMatrix state;
  if (sp) write_recursive_sparse(m, wt, *sp, in.values, D, mass, state);
  else write_recursive_dense(m, wt, in.values, D, mass, state);
  X.resize(D, dv + 1);
  X.leftCols(dv) = state;
  if (m.mass_readout) X.leftCols(dv).array().colwise() *= mass.array();
  X.col(dv) = mass;
  return X;
}

// Dense reads O = R X, R the N × D read features of rt, query tile by query tile.
RowMatrix dense_read(const FactorTables& rt, std::int64_t N, std::int64_t D, const RowMatrix& X) {
  RowMatrix O(N, X.cols());
  const std::int64_t T = tile_rows(D);
  RowMatrix R(std::min(T, N), D);
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    dense_features(rt, r0, rows, 0, D, R.data());
    O.middleRows(r0, rows).noalias() = R.topRows(rows) * X;
  }
  return O;
}

RowMatrix ramnet_outputs(const RecallModel& m, const RecallInputs& in) {
  const std::int64_t N = in.keys.rows(), D = address_count(m.params), dv = in.values.cols();
  const FactorTables wt = factor_tables(m.params, m.params.beta_w, in.keys);
  const FactorTables rt = factor_tables(m.params, m.params.beta_r, in.queries);
  SparseWeights ws, rs;
  if (m.topk > 0) {
    ws = topk_weights(wt, m.topk);
    rs = topk_weights(rt, m.topk);
  }
  const RowMatrix X = ramnet_state(m, in, wt, m.topk > 0 ? &ws : nullptr, false);
  RowMatrix Oa;
  if (m.topk > 0) {
    Oa.resize(N, dv + 1);
    const std::int64_t K = m.topk;
#pragma omp parallel for schedule(static) if (N * K * dv > 1 << 18)
    for (std::int64_t i = 0; i < N; ++i) {
      Oa.row(i).setZero();
      for (std::int64_t k = 0; k < K; ++k) {
        const auto e = static_cast<std::size_t>(i * K + k);
        Oa.row(i) += rs.weight[e] * X.row(rs.flat[e]);
      }
    }
  } else {
    Oa = dense_read(rt, N, D, X);
  }
  if (m.mass_readout) return normalise(Oa, m.eps);
  return Oa.leftCols(dv);
}

// ---- linear-attention baselines -----------------------------------------------------------------

// Dense RAM features as linear attention: S = Σ w(k) [v | 1], o = r(q)ᵀS[:dv] / r(q)ᵀS[dv].
RowMatrix ram_linear_outputs(const RecallModel& m, const RecallInputs& in) {
  const std::int64_t N = in.keys.rows(), D = address_count(m.params);
  const FactorTables wt = factor_tables(m.params, m.params.beta_w, in.keys);
  const FactorTables rt = factor_tables(m.params, m.params.beta_r, in.queries);
  const RowMatrix S = write_cumulative(wt, nullptr, augmented(in.values), D);
  return normalise(dense_read(rt, N, D, S), 0.0);
}

// elu(x) + 1 = x + 1 (x > 0), e^x (x ≤ 0), on the raw 2U-dim vectors.
RowMatrix elu_features(const RowMatrix& X) {
  RowMatrix F(X.rows(), X.cols());
  for (Eigen::Index i = 0; i < X.rows(); ++i)
    for (Eigen::Index c = 0; c < X.cols(); ++c) F(i, c) = X(i, c) > 0 ? X(i, c) + 1.0 : std::exp(X(i, c));
  return F;
}

RowMatrix elu_outputs(const RecallModel&, const RecallInputs& in) {
  const RowMatrix S = elu_features(in.keys).transpose() * augmented(in.values);
  const RowMatrix Oa = elu_features(in.queries) * S;
  return normalise(Oa, 0.0);
}

// FAVOR+ (positive orthogonal random features) for the kernel exp(q·k/τ):
// φ(x)_a = exp(ω_a·x/√τ − |x|²/(2τ) − c). Keys share one c (the largest exponent over all keys and
// features), queries use their own row maximum; both cancel in the normalised readout.
RowMatrix favor_outputs(const RecallModel& m, const RecallInputs& in) {
  const std::int64_t N = in.keys.rows(), D = in.omega.rows();
  const double st = 1.0 / std::sqrt(m.tau), ht = 0.5 / m.tau;
  const RowMatrix Va = augmented(in.values);
  const std::int64_t T = tile_rows(D);
  RowMatrix P(std::min(T, N), D);
  auto project = [&](const RowMatrix& X, std::int64_t r0, std::int64_t rows) {
    P.topRows(rows).noalias() = (X.middleRows(r0, rows) * st) * in.omega.transpose();
#pragma omp parallel for schedule(static) if (rows * D > 65536)
    for (std::int64_t i = 0; i < rows; ++i) {
      const double h = ht * X.row(r0 + i).squaredNorm();
      for (std::int64_t a = 0; a < D; ++a) P(i, a) -= h;
    }
  };
  double ck = -INFINITY;
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    project(in.keys, r0, rows);
    ck = std::max(ck, P.topRows(rows).maxCoeff());
  }
  RowMatrix S = RowMatrix::Zero(D, Va.cols());
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    project(in.keys, r0, rows);
    P.topRows(rows) = (P.topRows(rows).array() - ck).exp();
    S.noalias() += P.topRows(rows).transpose() * Va.middleRows(r0, rows);
  }
  RowMatrix Oa(N, Va.cols());
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    project(in.queries, r0, rows);
    for (std::int64_t i = 0; i < rows; ++i) {
      const double cq = P.row(i).maxCoeff();
      P.row(i) = (P.row(i).array() - cq).exp();
    }
    Oa.middleRows(r0, rows).noalias() = P.topRows(rows) * S;
  }
  return normalise(Oa, 0.0);
}

// ---- quadratic (cache) baselines ----------------------------------------------------------------

// o_i = Σ_s α_is v_s / Σ_s α_is for row tiles of unnormalised weights α (T × N, overwritten).
void weighted_rows(RowMatrix& A, std::int64_t rows, const RowMatrix& V, RowMatrix& O, std::int64_t r0) {
  const Eigen::VectorXd sums = A.topRows(rows).rowwise().sum();
  O.middleRows(r0, rows).noalias() = A.topRows(rows) * V;
  for (std::int64_t i = 0; i < rows; ++i) {
    if (sums(i) > 0 && std::isfinite(sums(i))) O.row(r0 + i) /= sums(i);
    else O.row(r0 + i).setZero();
  }
}

RowMatrix softmax_outputs(const RecallModel& m, const RecallInputs& in) {
  const std::int64_t N = in.keys.rows();
  const std::int64_t T = tile_rows(N);
  RowMatrix A(std::min(T, N), N), O(N, in.values.cols());
  const double it = 1.0 / m.tau;
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    A.topRows(rows).noalias() = in.queries.middleRows(r0, rows) * in.keys.transpose();
#pragma omp parallel for schedule(static) if (rows * N > 65536)
    for (std::int64_t i = 0; i < rows; ++i) {
      double mx = -INFINITY;
      for (std::int64_t s = 0; s < N; ++s) mx = std::max(mx, A(i, s) * it);
      for (std::int64_t s = 0; s < N; ++s) A(i, s) = std::exp(A(i, s) * it - mx);
    }
    weighted_rows(A, rows, in.values, O, r0);
  }
  return O;
}

// κ-attention: α_is ∝ κ_A(q_i, k_s) = Π_u dp·G_u(i, s), G_u = Σ_j p_{β_r}(j|q_i^(u)) p_{β_w}(j|k_s^(u)).
// A row whose largest κ is below kTinyRowMax (extreme β, §5.3) is redone in log space.
RowMatrix kappa_outputs(const RecallModel& m, const RecallInputs& in) {
  const std::int64_t N = in.keys.rows();
  const int U = m.params.U, dp = m.params.dp;
  const FactorTables wt = factor_tables(m.params, m.params.beta_w, in.keys);
  const FactorTables rt = factor_tables(m.params, m.params.beta_r, in.queries);
  const std::int64_t T = tile_rows(N);
  RowMatrix A(std::min(T, N), N), G(std::min(T, N), N), O(N, in.values.cols());
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    for (int u = 0; u < U; ++u) {
      const ConstStrided pr = factor_block(rt, u), pw = factor_block(wt, u);
      G.topRows(rows).noalias() = pr.middleRows(r0, rows) * pw.transpose();
      if (u == 0) A.topRows(rows) = G.topRows(rows) * static_cast<double>(dp);
      else A.topRows(rows).array() *= G.topRows(rows).array() * static_cast<double>(dp);
    }
#pragma omp parallel for schedule(static) if (rows * N > 65536)
    for (std::int64_t i = 0; i < rows; ++i) {
      const double mx = A.row(i).maxCoeff();
      if (mx >= kTinyRowMax) continue;
      const double* q = rt.prob_row(r0 + i);
      double lmax = -INFINITY;
      for (std::int64_t s = 0; s < N; ++s) {
        const double* k = wt.prob_row(s);
        double l = 0;
        for (int u = 0; u < U; ++u) {
          double g = 0;
          for (int j = 0; j < dp; ++j) g += q[u * dp + j] * k[u * dp + j];
          l += std::log(dp * g);
        }
        A(i, s) = l;
        lmax = std::max(lmax, l);
      }
      for (std::int64_t s = 0; s < N; ++s) A(i, s) = lmax == -INFINITY ? 0.0 : std::exp(A(i, s) - lmax);
    }
    weighted_rows(A, rows, in.values, O, r0);
  }
  return O;
}

}  // namespace

GsuState gsu_write_cpu(const RecallModel& m, const RecallInputs& in, bool force_recursion) {
  MEMCAP_ASSERT(m.mixer == Mixer::ramnet, "gsu_write_cpu needs the ramnet mixer");
  const FactorTables wt = factor_tables(m.params, m.params.beta_w, in.keys);
  SparseWeights ws;
  if (m.topk > 0) ws = topk_weights(wt, m.topk);
  const std::int64_t D = address_count(m.params), dv = in.values.cols();
  GsuState g;
  if (m.cumulative() && !force_recursion) {
    const RowMatrix S = write_cumulative(wt, m.topk > 0 ? &ws : nullptr, augmented(in.values), D);
    g.mass = S.col(dv);
    g.state = RowMatrix::Zero(D, dv);
    for (std::int64_t a = 0; a < D; ++a)
      if (g.mass(a) > 0) g.state.row(a) = S.row(a).head(dv) / g.mass(a);
    return g;
  }
  if (m.topk > 0) write_recursive_sparse(m, wt, ws, in.values, D, g.mass, g.state);
  else write_recursive_dense(m, wt, in.values, D, g.mass, g.state);
  return g;
}

RowMatrix recall_outputs_cpu(const RecallModel& m, const RecallInputs& in) {
  validate(m);
  require(in.keys.rows() == in.queries.rows() && in.keys.rows() == in.values.rows() && in.keys.rows() >= 1,
          "recall: {} keys, {} queries and {} values must be the same number N >= 1", in.keys.rows(),
          in.queries.rows(), in.values.rows());
  require(in.keys.cols() == 2 * m.params.U && in.queries.cols() == 2 * m.params.U,
          "recall: keys and queries must have 2U = {} columns", 2 * m.params.U);
  switch (m.mixer) {
    case Mixer::ramnet: return ramnet_outputs(m, in);
    case Mixer::softmax: return softmax_outputs(m, in);
    case Mixer::kappa: return kappa_outputs(m, in);
    case Mixer::ram_linear: return ram_linear_outputs(m, in);
    case Mixer::elu: return elu_outputs(m, in);
    case Mixer::favor:
      require(in.omega.rows() == m.features() && in.omega.cols() == 2 * m.params.U,
              "recall: favor needs a {} x {} projection", m.features(), 2 * m.params.U);
      return favor_outputs(m, in);
  }
  return {};
}

Decoded decode_cpu(const RowMatrix& O, const RowMatrix& V) {
  const std::int64_t N = V.rows();
  MEMCAP_ASSERT(O.rows() == N && O.cols() == V.cols(), "decode_cpu: O and V shapes differ");
  Decoded d;
  d.argmax.assign(static_cast<std::size_t>(N), -1);
  d.nmse.assign(static_cast<std::size_t>(N), 1.0);
  Eigen::VectorXd inv(N), vn2(N);
  for (std::int64_t j = 0; j < N; ++j) {
    double s = 0;
    for (Eigen::Index c = 0; c < V.cols(); ++c) s += V(j, c) * V(j, c);
    vn2(j) = s;
    inv(j) = 1.0 / std::sqrt(s);
  }
  const std::int64_t T = tile_rows(N);
  RowMatrix G(std::min(T, N), N);
  for (std::int64_t r0 = 0; r0 < N; r0 += T) {
    const std::int64_t rows = std::min(T, N - r0);
    G.topRows(rows).noalias() = O.middleRows(r0, rows) * V.transpose();
#pragma omp parallel for schedule(static) if (rows * N > 65536)
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = r0 + r;
      double on2 = 0;
      for (Eigen::Index c = 0; c < O.cols(); ++c) on2 += O(i, c) * O(i, c);
      if (!(on2 > 0) || !std::isfinite(on2)) continue;  // dead: argmax −1, nmse 1
      std::int64_t best = -1;  // NaN scores are never chosen; ties keep the smaller j
      double bv = -INFINITY;
      for (std::int64_t j = 0; j < N; ++j) {
        const double v = G(r, j) * inv(j);
        if (v > bv) {
          bv = v;
          best = j;
        }
      }
      d.argmax[static_cast<std::size_t>(i)] = best;
      const double c2 = G(r, i) * G(r, i) / (on2 * vn2(i));
      d.nmse[static_cast<std::size_t>(i)] = std::clamp(1.0 - c2, 0.0, 1.0);
    }
  }
  return d;
}

TrialOutcome score(const Decoded& d) {
  TrialOutcome t;
  t.N = static_cast<std::int64_t>(d.argmax.size());
  t.hit.assign(d.argmax.size(), 0);
  for (std::size_t i = 0; i < d.argmax.size(); ++i) {
    if (d.argmax[i] < 0) ++t.dead;
    if (d.argmax[i] == static_cast<std::int64_t>(i)) {
      t.hit[i] = 1;
      ++t.correct;
    }
    t.nmse_sum += d.nmse[i];
  }
  return t;
}

TrialOutcome evaluate_trial_cpu(const RecallModel& m, const RecallInputs& in) {
  return score(decode_cpu(recall_outputs_cpu(m, in), in.values));
}

}  // namespace memcap::ramnet
