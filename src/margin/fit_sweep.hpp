// Post-processing of a margin sweep (run as the sweep finalizer, so `hebb merge` re-fits):
// aggregate the per-job summary over seeds (spec §4.1: mean/std of γ_min, statistics from the
// best seed), fit the theory models (§3.5) and write /points and /fit.
#pragma once
#include <Eigen/Dense>
#include <map>
#include <string>
#include <vector>

#include "io/h5.hpp"
#include "io/table.hpp"
#include "margin/fit.hpp"

namespace memcap::margin {

struct SweepAggregate {
  std::string axis;                 // width | facts | beta | noise
  std::vector<double> x;            // sorted unique axis values (one per point)
  std::vector<double> seeds;        // sorted unique seeds
  Eigen::MatrixXd gamma;            // points × seeds, measured γ_min (NaN = no job)
  std::vector<double> mean, std, lo, hi, best_seed, target;   // per point; target = fit target
  std::map<std::string, std::vector<double>> best;   // every numeric column at the best seed
};

// Best seed = largest clean γ_min (column clean_min_margin, else min_margin). The fit target is
// the mean γ_min over seeds, except for the noise sweep: the noisy γ_min of the best clean seed.
SweepAggregate aggregate_sweep(const io::Table& summary, const std::string& axis);

// Default model per sweep (§3.5): width/facts → rkrv; beta → akrv (keys), rkav (values),
// akav (both); noise → noisy.
FitModel default_fit_model(const std::string& axis, const std::string& spike_target);
// The x-axis column the paper plots a model against: rkrv → the swept axis, akrv → e_k,
// rkav → ev_lv, akav → ek_sqrt_ev_kappa, noisy → noise.
std::string fit_x_axis(FitModel m, const std::string& axis);

std::vector<FitPoint> fit_points(const SweepAggregate& agg);

// Finalizer body: needs summary columns sweep (axis name) and fit_model; writes /points and /fit
// (attributes model, r2, mse, points, x_axis and one per constant; /fit/<model> for every model
// that could be fitted).
void write_sweep_fit(h5::Group& root, const io::Table& summary);

inline constexpr const char* kMarginFitFinalizer = "hebb-margin-fit";
// Registers write_sweep_fit under kMarginFitFinalizer (idempotent).
void register_margin_fit_finalizer();

}  // namespace memcap::margin
