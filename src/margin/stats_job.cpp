// One margin-sweep job: fact set + feature map from one seed, kernel-memory margins through
// margins.hpp (the measured γ_min), streamed statistics (stats.hpp) and bounds (bounds.hpp).
#include "margin/stats_job.hpp"

#include <cmath>

#include "core/error.hpp"
#include "margin/bounds.hpp"
#include "margin/margins.hpp"
#include "mlp/constructions.hpp"
#include "mlp/factset.hpp"
#include "mlp/method.hpp"

namespace memcap::margin {

namespace {
std::vector<std::pair<std::string, double>> stats_columns(const GeometryStats& s) {
  return {{"k_min_diag", s.k_min_diag},   {"k_max_diag", s.k_max_diag},
          {"k_max_off", s.k_max_off},     {"e_k", s.e_k},
          {"e_k_trunc", s.e_k_trunc},     {"e_k_mean", s.e_k_mean},
          {"v_min", s.v_min},             {"v_max", s.v_max},
          {"e_v", s.e_v},                 {"e_v_trunc", s.e_v_trunc},
          {"b_y", s.b_y},                 {"b_y_trunc", s.b_y_trunc},
          {"l_v", s.l_v},                 {"l_v_trunc", s.l_v_trunc},
          {"kappa", s.kappa},             {"kappa_abs", s.kappa_abs},
          {"kappa_trunc", s.kappa_trunc}, {"kappa_trunc_abs", s.kappa_trunc_abs},
          {"crosstalk_max", s.crosstalk_max}, {"crosstalk_trunc_max", s.crosstalk_trunc_max},
          {"signal_min", s.signal_min},   {"kernel_trace", s.trace},
          {"kernel_frob2", s.frob2},      {"rank", s.rank},
          {"ek_sqrt_ev_kappa", std::sqrt(s.e_k) * std::sqrt(s.e_v) * s.kappa},
          {"ev_lv", s.e_v * s.l_v}};
}

GeometryStats template_stats() { return GeometryStats{}; }
}  // namespace

std::vector<std::string> margin_job_value_columns() {
  std::vector<std::string> cols = {"min_margin", "accuracy", "mean_margin", "clean_min_margin", "l_bil",
                                   "min_margin_check"};
  for (auto& [n, v] : stats_columns(template_stats())) cols.push_back(n);
  for (auto& [n, v] : bound_columns(BoundSet{})) cols.push_back(n);
  return cols;
}

MarginJobResult run_margin_job(const MarginJobSpec& spec) {
  const mlp::MethodSpec method = mlp::parse_method(spec.method);
  require(method.kind == mlp::MethodKind::sketched || method.kind == mlp::MethodKind::exact_k2,
          "margin-sweep supports --method hebbian (sketched K2) or hebbian:exact-k2 (got '{}')", spec.method);
  const bool exact = method.kind == mlp::MethodKind::exact_k2;
  require(spec.dim >= 2 && spec.facts >= 2, "margin-sweep needs --dim >= 2 and --facts >= 2 (got d={}, F={})",
          spec.dim, spec.facts);
  require(exact || spec.width >= 1, "--width must be >= 1 (got {})", spec.width);
  require(std::isfinite(spec.noise) && spec.noise >= 0, "noise must be finite and >= 0 (got {})", spec.noise);

  mlp::FactSetSpec fss;
  fss.dim = spec.dim;
  fss.facts = spec.facts;
  fss.map = "identity";
  fss.spike_beta = spec.beta;
  fss.spike_target = spec.beta > 0 ? spec.spike_target : "none";
  fss.seed = spec.seed;
  const mlp::FactSet fs = mlp::make_factset(fss);
  const Eigen::MatrixXd targets = fs.targets();

  MarginJobResult res;
  const bool noisy = spec.noise > 0;
  const Eigen::MatrixXd queries = noisy ? noisy_queries(fs.keys, spec.noise, spec.noise_seed) : Eigen::MatrixXd();
  Eigen::MatrixXd outputs, clean_outputs;
  mlp::BilinearFeatureMap fmap;
  Eigen::MatrixXd phi;
  double m = 0;
  if (exact) {
    fmap = mlp::exact_k2_feature_map(spec.dim);
    m = static_cast<double>(fmap.width());
    clean_outputs = mlp::exact_k2_gram(fs.keys, fs.keys) * targets;
    if (noisy) outputs = mlp::exact_k2_gram(queries, fs.keys) * targets;
  } else {
    fmap = mlp::BilinearFeatureMap::random(spec.width, spec.dim, spec.seed, true);
    m = static_cast<double>(spec.width);
    phi = fmap.apply(fs.keys);
    clean_outputs = kernel_memory_outputs(phi, phi, targets);
    if (noisy) outputs = kernel_memory_outputs(phi, fmap.apply(queries), targets);
  }
  const MarginResult clean = margins_from_outputs(clean_outputs, fs.values, fs.map, MarginConvention::kernel_memory);
  const MarginResult meas =
      noisy ? margins_from_outputs(outputs, fs.values, fs.map, MarginConvention::kernel_memory) : clean;

  std::unique_ptr<KernelRows> kr;
  if (exact) kr = std::make_unique<ExactK2KernelRows>(fs.keys);
  else kr = std::make_unique<FeatureKernelRows>(phi);
  res.stats = geometry_stats(*kr, fs.values, fs.codes, fs.map, spec.stats);

  const double l_bil = bilinear_lipschitz(fmap.A0, fmap.A1, fs.keys, queries, fmap.scale);
  NoiseInputs ni{spec.noise, l_bil, clean.min_margin, meas.min_margin};
  const BoundSet b = evaluate_bounds(res.stats, m, static_cast<double>(spec.dim), {}, &ni);

  io::Row& row = res.row;
  row.set("method", method.name())
      .set("width", static_cast<std::int64_t>(m))
      .set("facts", spec.facts)
      .set("dim", spec.dim)
      .set("beta", spec.beta)
      .set("spike_target", fss.spike_target)
      .set("noise", spec.noise)
      .set("params", mlp::param_count(method.kind, static_cast<std::int64_t>(m), spec.dim))
      .set("min_margin", meas.min_margin)
      .set("accuracy", meas.accuracy)
      .set("mean_margin", meas.per_key.mean())
      .set("clean_min_margin", clean.min_margin)
      .set("l_bil", l_bil)
      .set("min_margin_check", res.stats.min_margin);
  for (auto& [n, v] : stats_columns(res.stats)) row.set(n, v);
  for (auto& [n, v] : bound_columns(b)) row.set(n, v);
  res.per_key = meas.per_key;
  res.worst = meas.worst;
  if (noisy) res.per_key_clean = clean.per_key;
  return res;
}

}  // namespace memcap::margin
