// Theory-vs-measurement fits of hebbian spec §3.5: the theorem's functional form with free
// non-negative constants fitted to the mean γ_min; models rkrv, akrv, rkav, akav, noisy.
// Every model is linear in its constants except C_L (inside L̂ = log(C_L F²/0.5)): a log-grid
// search over C_L (refined by golden section) with NNLS (Lawson–Hanson) for the rest.
#pragma once
#include <string>
#include <vector>

namespace memcap::margin {

enum class FitModel { rkrv, akrv, rkav, akav, noisy };

FitModel parse_fit_model(const std::string& name);   // UserError on unknown names
std::string fit_model_name(FitModel m);
// Names of the constants of a model, in order (C_L last when the model has one).
std::vector<std::string> fit_constant_names(FitModel m);

// One grid point: the measured mean margin and the statistics the model needs.
struct FitPoint {
  double gamma = 0;                   // target (mean γ_min over seeds)
  double facts = 0, width = 0, dim = 0;
  double k_min_diag = 0, k_max_off = 0, e_k = 0;
  double v_min = 0, b_y = 0, e_v = 0, l_v = 0, kappa = 0;
  double eps = 0, l_bil = 0;          // noisy model
};

struct FitResult {
  FitModel model = FitModel::rkrv;
  std::vector<std::string> names;     // constant names
  std::vector<double> constants;      // values (≥ 0; C_L ≥ 1e-6)
  double r2 = 0, mse = 0, sse = 0;
  int points = 0;                     // finite points used
  std::vector<double> prediction;     // model value per input point (NaN where not finite)
};

// The model's prediction for given constants (in fit_constant_names order).
double fit_predict(FitModel m, const FitPoint& p, const std::vector<double>& constants);

// Fit; points with a non-finite target or feature are skipped. UserError with fewer than 2 usable
// points (5 for the noisy model, as the release code requires).
FitResult fit_theory(FitModel m, const std::vector<FitPoint>& points);

// R² = 1 − Σ(y−ŷ)²/Σ(y−ȳ)² over finite pairs (NaN when fewer than 2 or zero variance).
double r_squared(const std::vector<double>& y, const std::vector<double>& yhat);

}  // namespace memcap::margin
