// Theory fits: design matrix per model (signed features, constants ≥ 0), NNLS per C_L value on a
// log grid 1e-6..1e8 (0.05 decades) then golden-section refinement around the best grid value.
#include "margin/fit.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "margin/nnls.hpp"

namespace memcap::margin {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool has_cl(FitModel m) { return m != FitModel::akav; }

double log_hat(double cl, double F) { return std::log(std::max(cl * F * F / 0.5, 1e-30)); }

// Signed feature columns of one point for a given C_L (constants multiply these, ≥ 0).
std::vector<double> features(FitModel m, const FitPoint& p, double cl) {
  const double L = log_hat(cl, p.facts);
  switch (m) {
    case FitModel::rkrv:
      return {1.0, -std::sqrt(p.facts * L / (p.width * p.dim))};
    case FitModel::akrv:
      return {p.k_min_diag, -p.k_max_off, -std::sqrt(p.e_k * L / p.dim)};
    case FitModel::rkav:
      return {p.v_min, -p.b_y * std::sqrt(L / p.width), -std::sqrt(p.e_v * p.l_v) * std::sqrt(L / p.width)};
    case FitModel::akav:
      return {p.k_min_diag * p.v_min, -std::sqrt(p.e_k) * std::sqrt(p.e_v) * p.kappa};
    case FitModel::noisy:
      return {1.0, -std::sqrt(p.facts * L / (p.width * p.dim)), -p.l_bil * p.eps * std::sqrt(p.facts * L / p.dim)};
  }
  return {};
}

bool finite_all(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

struct Trial {
  double sse = std::numeric_limits<double>::infinity();
  Eigen::VectorXd c;
};

Trial solve_at(FitModel m, const std::vector<FitPoint>& pts, double cl) {
  const Eigen::Index n = static_cast<Eigen::Index>(pts.size());
  const Eigen::Index k = static_cast<Eigen::Index>(features(m, pts[0], cl).size());
  Eigen::MatrixXd A(n, k);
  Eigen::VectorXd y(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto f = features(m, pts[static_cast<std::size_t>(i)], cl);
    if (!finite_all(f)) return {};
    for (Eigen::Index j = 0; j < k; ++j) A(i, j) = f[static_cast<std::size_t>(j)];
    y[i] = pts[static_cast<std::size_t>(i)].gamma;
  }
  const NnlsResult r = nnls(A, y);
  return {r.residual_norm * r.residual_norm, r.x};
}
}  // namespace

FitModel parse_fit_model(const std::string& name) {
  if (name == "rkrv") return FitModel::rkrv;
  if (name == "akrv") return FitModel::akrv;
  if (name == "rkav") return FitModel::rkav;
  if (name == "akav") return FitModel::akav;
  if (name == "noisy") return FitModel::noisy;
  throw UserError("unknown fit model '" + name + "' (use rkrv, akrv, rkav, akav or noisy)");
}

std::string fit_model_name(FitModel m) {
  switch (m) {
    case FitModel::rkrv: return "rkrv";
    case FitModel::akrv: return "akrv";
    case FitModel::rkav: return "rkav";
    case FitModel::akav: return "akav";
    case FitModel::noisy: return "noisy";
  }
  return "?";
}

std::vector<std::string> fit_constant_names(FitModel m) {
  switch (m) {
    case FitModel::rkrv: return {"C_s", "C_x", "C_L"};
    case FitModel::akrv: return {"C_s", "C_o", "C_x", "C_L"};
    case FitModel::rkav: return {"C_s", "C_B", "C_E", "C_L"};
    case FitModel::akav: return {"C_1", "C_x"};
    case FitModel::noisy: return {"C_s", "C_x", "C_eps", "C_L"};
  }
  return {};
}

double fit_predict(FitModel m, const FitPoint& p, const std::vector<double>& c) {
  const auto names = fit_constant_names(m);
  require(c.size() == names.size(), "fit_predict: model {} has {} constants, got {}", fit_model_name(m),
          names.size(), c.size());
  const double cl = has_cl(m) ? c.back() : 1.0;
  const auto f = features(m, p, cl);
  double y = 0;
  for (std::size_t j = 0; j < f.size(); ++j) y += c[j] * f[j];
  return y;
}

double r_squared(const std::vector<double>& y, const std::vector<double>& yhat) {
  double mean = 0;
  int n = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    if (std::isfinite(y[i]) && std::isfinite(yhat[i])) {
      mean += y[i];
      ++n;
    }
  if (n < 2) return kNaN;
  mean /= n;
  double ss_res = 0, ss_tot = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    if (std::isfinite(y[i]) && std::isfinite(yhat[i])) {
      ss_res += (y[i] - yhat[i]) * (y[i] - yhat[i]);
      ss_tot += (y[i] - mean) * (y[i] - mean);
    }
  return ss_tot > 0 ? 1.0 - ss_res / ss_tot : kNaN;
}

FitResult fit_theory(FitModel m, const std::vector<FitPoint>& points) {
  std::vector<FitPoint> pts;
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto f = features(m, points[i], 1.0);
    if (std::isfinite(points[i].gamma) && finite_all(f)) {
      pts.push_back(points[i]);
      idx.push_back(i);
    }
  }
  const std::size_t need = m == FitModel::noisy ? 5 : 2;
  require(pts.size() >= need, "fit model {} needs at least {} finite points (got {})", fit_model_name(m), need,
          pts.size());

  double best_cl = 1.0;
  Trial best;
  if (has_cl(m)) {
    double best_lg = 0;
    for (double lg = -6.0; lg <= 8.0 + 1e-9; lg += 0.05) {
      Trial t = solve_at(m, pts, std::pow(10.0, lg));
      if (t.sse < best.sse) {
        best = t;
        best_lg = lg;
      }
    }
    // Golden section on [best−0.05, best+0.05] decades (clipped to C_L ≥ 1e-6).
    double a = std::max(best_lg - 0.05, -6.0), b = best_lg + 0.05;
    const double g = (std::sqrt(5.0) - 1.0) / 2.0;
    for (int it = 0; it < 40; ++it) {
      const double x1 = b - g * (b - a), x2 = a + g * (b - a);
      const Trial t1 = solve_at(m, pts, std::pow(10.0, x1)), t2 = solve_at(m, pts, std::pow(10.0, x2));
      if (t1.sse < t2.sse) b = x2; else a = x1;
      const Trial& tb = t1.sse < t2.sse ? t1 : t2;
      if (tb.sse < best.sse) {
        best = tb;
        best_lg = t1.sse < t2.sse ? x1 : x2;
      }
    }
    best_cl = std::pow(10.0, best_lg);
  } else {
    best = solve_at(m, pts, 1.0);
  }
  if (best.c.size() == 0) throw NumericError("fit " + fit_model_name(m) + ": no finite design matrix");

  FitResult res;
  res.model = m;
  res.names = fit_constant_names(m);
  res.constants.assign(best.c.data(), best.c.data() + best.c.size());
  if (has_cl(m)) res.constants.push_back(best_cl);
  res.points = static_cast<int>(pts.size());
  res.prediction.assign(points.size(), kNaN);
  std::vector<double> y, yh;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const double p = fit_predict(m, points[i], res.constants);
    if (std::isfinite(p)) res.prediction[i] = p;
  }
  for (std::size_t k = 0; k < pts.size(); ++k) {
    y.push_back(pts[k].gamma);
    yh.push_back(res.prediction[idx[k]]);
  }
  res.sse = 0;
  for (std::size_t k = 0; k < y.size(); ++k) res.sse += (y[k] - yh[k]) * (y[k] - yh[k]);
  res.mse = res.sse / static_cast<double>(y.size());
  res.r2 = r_squared(y, yh);
  return res;
}

}  // namespace memcap::margin
