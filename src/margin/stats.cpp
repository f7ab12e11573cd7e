// Streaming evaluation of the §3.3 geometric statistics: one tile of keys at a time, every
// F×P quantity reduced on the fly (BLAS products for K̂ rows, outputs and code Grams), so the
// largest live arrays are tile×F and tile×P. See docs/hebb-theory.md for the derivations.
// Thread-count independent: products go through parallel_product (fixed blocks), per-row work is
// independent, and the cross-row reductions run in row order after each parallel pass.
#include "margin/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/parallel_product.hpp"

namespace memcap::margin {

namespace {
using Index = Eigen::Index;
using MatR = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTiny = 1e-30;  // denominator guard of κ and L_v (spec §7.1 item 4)

void validate(Index facts, const Eigen::MatrixXd& values, const Eigen::MatrixXd& codes,
              const Eigen::VectorXi& map, std::vector<int>& key_of_value) {
  require(facts >= 2, "margin statistics need at least 2 facts (got {})", facts);
  require(values.rows() >= 2 && values.cols() >= 1, "value table must be P×d with P ≥ 2 (got {}×{})",
          values.rows(), values.cols());
  require(codes.rows() == values.rows() && codes.cols() == values.cols(),
          "codes must have the shape of the value table ({}×{}), got {}×{}", values.rows(), values.cols(),
          codes.rows(), codes.cols());
  require(map.size() == facts, "fact map has {} entries but the kernel has {} facts", map.size(), facts);
  require(values.allFinite() && codes.allFinite(), "value table or codes contain NaN/Inf");
  key_of_value.assign(static_cast<std::size_t>(values.rows()), -1);
  for (Index i = 0; i < facts; ++i) {
    const int v = map[i];
    require(v >= 0 && v < values.rows(), "fact map entry {} = {} is outside [0, {})", i, v, values.rows());
    require(key_of_value[static_cast<std::size_t>(v)] < 0,
            "fact map is not injective (value {} stored by keys {} and {}); statistics need a bijection",
            v, key_of_value[static_cast<std::size_t>(v)], i);
    key_of_value[static_cast<std::size_t>(v)] = static_cast<int>(i);
  }
}

// Running extrema of one key row over its competitors.
struct RowAcc {
  double gamma = kInf;
  int argmin = -1;
  double v_min = kInf, v_max = 0, e_v = 0, e_v_trunc = 0, b_y = 0, b_y_trunc = 0;
  double kappa = 0, kappa_abs = 0, kappa_trunc = 0, kappa_trunc_abs = 0;
  double cross = 0, cross_trunc = 0, signal = kInf, l_v = 0, l_v_trunc = 0;
};

double safe_ratio(double num, double den) { return den > kTiny ? num / den : 0.0; }

// Σ|a−b| and Σ(a−b)²: the hot loop of L_v. `omp simd reduction` licenses the reassociation that
// vectorization needs; target_clones adds an AVX2 version picked at load time on CPUs that have it.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
void abs_and_square_sums(const double* a, const double* b, Index n, double& l1_out, double& l2_out) {
  double l1 = 0, l2 = 0;
#pragma omp simd reduction(+ : l1, l2)
  for (Index t = 0; t < n; ++t) {
    const double y = a[t] - b[t];
    l1 += std::abs(y);
    l2 += y * y;
  }
  l1_out = l1;
  l2_out = l2;
}
}  // namespace

FeatureKernelRows::FeatureKernelRows(const Eigen::MatrixXd& phi) : phi_(phi) {
  require(phi.rows() >= 1 && phi.cols() >= 1, "feature matrix must be F×m with F, m ≥ 1");
}

void FeatureKernelRows::rows(Index row0, Index count, Eigen::MatrixXd& out) const {
  MEMCAP_ASSERT(row0 >= 0 && row0 + count <= phi_.rows(), "kernel row range");
  parallel_product(out, phi_.middleRows(row0, count), phi_.transpose());
}

ExactK2KernelRows::ExactK2KernelRows(const Eigen::MatrixXd& keys) : keys_(keys) {
  require(keys.rows() >= 1 && keys.cols() >= 1, "key table must be F×d with F, d ≥ 1");
}

void ExactK2KernelRows::rows(Index row0, Index count, Eigen::MatrixXd& out) const {
  MEMCAP_ASSERT(row0 >= 0 && row0 + count <= keys_.rows(), "kernel row range");
  parallel_product(out, keys_.middleRows(row0, count), keys_.transpose());
  out = out.array().square().matrix();
}

GeometryStats geometry_stats(const KernelRows& kernel, const Eigen::MatrixXd& values,
                             const Eigen::MatrixXd& codes, const Eigen::VectorXi& map,
                             const StatsOptions& opt) {
  const Index F = kernel.facts(), P = values.rows(), d = values.cols();
  std::vector<int> key_of;
  validate(F, values, codes, map, key_of);
  require(opt.tile_rows >= 1 && opt.tile_values >= 1, "tile sizes must be positive");

  // Per-fact targets C_f and the small d×d / P-vector precomputations.
  Eigen::MatrixXd targets(F, d), vals_of_keys(F, d);
  for (Index i = 0; i < F; ++i) {
    targets.row(i) = codes.row(map[i]);
    vals_of_keys.row(i) = values.row(map[i]);
  }
  const Eigen::MatrixXd M = targets.transpose() * targets;          // Σ_t c_f(t) c_f(t)ᵀ
  const Eigen::VectorXd S = targets.colwise().sum().transpose();     // Σ_t c_f(t)
  const Eigen::MatrixXd VM = values * M;
  const Eigen::VectorXd vMv = (VM.array() * values.array()).rowwise().sum();
  const Eigen::VectorXd vS = values * S;
  const Eigen::VectorXd vc_diag = (values.array() * codes.array()).rowwise().sum();  // <v_j, c_j>

  GeometryStats st;
  st.facts = F;
  st.values = P;
  st.dim = d;
  st.rank = kernel.rank_bound();
  st.per_key_margin.resize(F);
  st.per_key_competitor.resize(F);
  st.k_min_diag = kInf;
  st.k_max_diag = -kInf;
  st.v_min = kInf;
  st.signal_min = kInf;
  double ek_sum = 0;

  const Index tile = std::min<Index>(opt.tile_rows, F);
  Eigen::MatrixXd Kt;
  std::vector<RowAcc> acc;
  std::vector<double> ek_row;
  for (Index r0 = 0; r0 < F; r0 += tile) {
    const Index b = std::min(tile, F - r0);
    kernel.rows(r0, b, Kt);
    require(Kt.allFinite(), "kernel rows {}..{} contain NaN/Inf", r0, r0 + b - 1);
    const MatR Ktr = Kt;  // row-major copy for contiguous row scans
    MatR Y, H, GcI, CvI, Q;
    parallel_product(Y, Ktr, targets);                                     // ŷ_i (b×d)
    parallel_product(H, Y, values.transpose());                            // <ŷ_i, v_j>
    parallel_product(GcI, vals_of_keys.middleRows(r0, b), codes.transpose());  // <v_f(i), c_j>
    parallel_product(CvI, targets.middleRows(r0, b), values.transpose());      // <c_f(i), v_j>
    parallel_product(Q, vals_of_keys.middleRows(r0, b), VM.transpose());       // v_f(i)ᵀ M v_j

    acc.assign(static_cast<std::size_t>(b), RowAcc{});
    ek_row.assign(static_cast<std::size_t>(b), 0.0);
    std::vector<double> diag(b), off_max(b), off_min_sq(b), rowsq(b);
#pragma omp parallel for schedule(static)
    for (Index r = 0; r < b; ++r) {
      const Index i = r0 + r;
      const double* kr = Ktr.row(r).data();
      double sq = 0, omax = 0, omin = kInf;
      for (Index t = 0; t < F; ++t) {
        const double k2 = kr[t] * kr[t];
        sq += k2;
        if (t != i) {
          omax = std::max(omax, std::abs(kr[t]));
          omin = std::min(omin, k2);
        }
      }
      diag[r] = kr[i];
      off_max[r] = omax;
      off_min_sq[r] = omin;
      rowsq[r] = sq;
      const double ek = std::max(sq - kr[i] * kr[i], 0.0);
      ek_row[r] = ek;

      const int fi = map[i];
      RowAcc& a = acc[r];
      for (Index j = 0; j < P; ++j) {
        if (j == fi) continue;
        const double Kii = kr[i];
        const double gamma = H(r, fi) - H(r, j);
        const double Yi = CvI(r, fi) - CvI(r, j);            // <a_ij, c_f(i)>
        const double X = gamma - Kii * Yi;                   // Σ_{t≠i} K̂_ti Y_t
        const double Ev = std::max(vMv[fi] - 2.0 * Q(r, j) + vMv[j] - Yi * Yi, 0.0);
        const int jk = key_of[static_cast<std::size_t>(j)];
        double Yj = 0, Kji = 0;
        if (jk >= 0) {
          Yj = GcI(r, j) - vc_diag[j];                       // <a_ij, c_j>
          Kji = kr[jk];
          a.v_max = std::max(a.v_max, std::abs(Yj));
        }
        const double Ev_t = std::max(Ev - Yj * Yj, 0.0);
        const double Ek_t = std::max(ek - Kji * Kji, 0.0);
        const double sum_code = vS[fi] - vS[j] - Yi;
        const double Xt = X - Kji * Yj;
        const double den = std::sqrt(ek) * std::sqrt(Ev), den_t = std::sqrt(Ek_t) * std::sqrt(Ev_t);
        if (gamma < a.gamma) {
          a.gamma = gamma;
          a.argmin = static_cast<int>(j);
        }
        a.v_min = std::min(a.v_min, Yi);
        a.e_v = std::max(a.e_v, Ev);
        a.e_v_trunc = std::max(a.e_v_trunc, Ev_t);
        a.b_y = std::max(a.b_y, std::abs(sum_code));
        a.b_y_trunc = std::max(a.b_y_trunc, std::abs(sum_code - Yj));
        a.kappa = std::max(a.kappa, safe_ratio(std::max(0.0, -X), den));
        a.kappa_abs = std::max(a.kappa_abs, safe_ratio(std::abs(X), den));
        a.kappa_trunc = std::max(a.kappa_trunc, safe_ratio(std::max(0.0, -Xt), den_t));
        a.kappa_trunc_abs = std::max(a.kappa_trunc_abs, safe_ratio(std::abs(Xt), den_t));
        a.cross = std::max(a.cross, -X);
        a.cross_trunc = std::max(a.cross_trunc, -Xt);
        a.signal = std::min(a.signal, Kii * Yi + Kji * Yj);
      }
    }

    // L_v: ‖Y‖₁ has no product form; sum |G_f(i),t − G_j,t| over value tiles (G = V C_fᵀ).
    if (opt.compute_lv) {
      MatR Gi, Gj;
      parallel_product(Gi, vals_of_keys.middleRows(r0, b), targets.transpose());   // b×F
      const Index jt = std::min<Index>(opt.tile_values, P);
      for (Index j0 = 0; j0 < P; j0 += jt) {
        const Index nb = std::min(jt, P - j0);
        parallel_product(Gj, values.middleRows(j0, nb), targets.transpose());      // nb×F
        // Cache blocking: B key rows × B value rows (~96 KiB) so each G row is reused B times from L2
        // instead of streaming all of Gj from memory for every key (memory-bound otherwise).
        const Index B = std::clamp<Index>(98304 / (8 * F), 1, 64);
#pragma omp parallel for schedule(dynamic)
        for (Index rb0 = 0; rb0 < b; rb0 += B) {
          for (Index jb0 = 0; jb0 < nb; jb0 += B) {
            for (Index r = rb0; r < std::min(b, rb0 + B); ++r) {
              const Index i = r0 + r;
              const int fi = map[i];
              const double* gi = Gi.row(r).data();
              RowAcc& a = acc[r];
              for (Index jl = jb0; jl < std::min(nb, jb0 + B); ++jl) {
                const Index j = j0 + jl;
                if (j == fi) continue;
                const double* gj = Gj.row(jl).data();
                double l1, l2;
                abs_and_square_sums(gi, gj, F, l1, l2);
                const double yi = gi[i] - gj[i];
                double c1 = l1 - std::abs(yi), c2 = l2 - yi * yi;
                if (c2 > kTiny) a.l_v = std::max(a.l_v, c1 * c1 / c2);
                const int jk = key_of[static_cast<std::size_t>(j)];
                if (jk >= 0) {
                  const double yj = gi[jk] - gj[jk];
                  c1 -= std::abs(yj);
                  c2 -= yj * yj;
                }
                if (c2 > kTiny) a.l_v_trunc = std::max(a.l_v_trunc, c1 * c1 / c2);
              }
            }
          }
        }
      }
    }

    for (Index r = 0; r < b; ++r) {
      const RowAcc& a = acc[r];
      const Index i = r0 + r;
      st.per_key_margin[i] = a.gamma;
      st.per_key_competitor[i] = a.argmin;
      st.k_min_diag = std::min(st.k_min_diag, diag[r]);
      st.k_max_diag = std::max(st.k_max_diag, diag[r]);
      st.k_max_off = std::max(st.k_max_off, off_max[r]);
      st.e_k = std::max(st.e_k, ek_row[r]);
      st.e_k_trunc = std::max(st.e_k_trunc, std::max(ek_row[r] - off_min_sq[r], 0.0));
      ek_sum += ek_row[r];
      st.trace += diag[r];
      st.diag_sq_sum += diag[r] * diag[r];
      st.frob2 += rowsq[r];
      st.v_min = std::min(st.v_min, a.v_min);
      st.v_max = std::max(st.v_max, a.v_max);
      st.e_v = std::max(st.e_v, a.e_v);
      st.e_v_trunc = std::max(st.e_v_trunc, a.e_v_trunc);
      st.b_y = std::max(st.b_y, a.b_y);
      st.b_y_trunc = std::max(st.b_y_trunc, a.b_y_trunc);
      st.l_v = std::max(st.l_v, a.l_v);
      st.l_v_trunc = std::max(st.l_v_trunc, a.l_v_trunc);
      st.kappa = std::max(st.kappa, a.kappa);
      st.kappa_abs = std::max(st.kappa_abs, a.kappa_abs);
      st.kappa_trunc = std::max(st.kappa_trunc, a.kappa_trunc);
      st.kappa_trunc_abs = std::max(st.kappa_trunc_abs, a.kappa_trunc_abs);
      st.crosstalk_max = std::max(st.crosstalk_max, a.cross);
      st.crosstalk_trunc_max = std::max(st.crosstalk_trunc_max, a.cross_trunc);
      st.signal_min = std::min(st.signal_min, a.signal);
    }
  }
  st.e_k_mean = ek_sum / static_cast<double>(F);
  st.min_margin = st.per_key_margin.minCoeff();
  st.accuracy = (st.per_key_margin.array() > 0.0).cast<double>().mean();
  if (!opt.compute_lv) st.l_v = st.l_v_trunc = std::numeric_limits<double>::quiet_NaN();
  return st;
}

}  // namespace memcap::margin
