// Sweep aggregation over seeds and the theory fits written to /points and /fit.
#include "margin/fit_sweep.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/error.hpp"
#include "sweep/sweep.hpp"

namespace memcap::margin {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::size_t index_of(const std::vector<double>& v, double x) {
  return static_cast<std::size_t>(std::lower_bound(v.begin(), v.end(), x) - v.begin());
}

std::string first_string(const io::Table& t, const std::string& col, const std::string& dflt) {
  if (!t.find(col) || t.rows() == 0) return dflt;
  return t.strings(col)[0];
}

void write_vec(h5::Group& g, const std::string& name, const std::vector<double>& v) {
  g.write(name, std::span<const double>(v));
}
}  // namespace

SweepAggregate aggregate_sweep(const io::Table& t, const std::string& axis) {
  require(t.find(axis) != nullptr, "margin sweep summary has no '{}' column", axis);
  require(t.find("min_margin") != nullptr && t.find("seed") != nullptr, "margin sweep summary lacks min_margin/seed");
  SweepAggregate a;
  a.axis = axis;
  const auto xs = t.numbers(axis), ss = t.numbers("seed"), gs = t.numbers("min_margin");
  const auto clean = t.find("clean_min_margin") ? t.numbers("clean_min_margin") : gs;
  {
    std::set<double> u(xs.begin(), xs.end());
    a.x.assign(u.begin(), u.end());
  }
  {
    std::set<double> s(ss.begin(), ss.end());
    a.seeds.assign(s.begin(), s.end());
  }
  const std::size_t P = a.x.size(), S = a.seeds.size();
  a.gamma = Eigen::MatrixXd::Constant(static_cast<Eigen::Index>(P), static_cast<Eigen::Index>(S), kNaN);
  std::vector<std::size_t> best_row(P, t.rows());
  std::vector<double> best_clean(P, -std::numeric_limits<double>::infinity());
  for (std::size_t r = 0; r < t.rows(); ++r) {
    const std::size_t p = index_of(a.x, xs[r]), s = index_of(a.seeds, ss[r]);
    a.gamma(static_cast<Eigen::Index>(p), static_cast<Eigen::Index>(s)) = gs[r];
    if (std::isfinite(clean[r]) && (best_row[p] == t.rows() || clean[r] > best_clean[p])) {
      best_clean[p] = clean[r];
      best_row[p] = r;
    }
  }
  std::vector<std::string> numeric;
  for (std::size_t c = 0; c < t.names.size(); ++c)
    if (!std::holds_alternative<std::vector<std::string>>(t.columns[c])) numeric.push_back(t.names[c]);
  for (const auto& n : numeric) a.best[n] = std::vector<double>(P, kNaN);
  a.mean.assign(P, kNaN);
  a.std.assign(P, kNaN);
  a.lo.assign(P, kNaN);
  a.hi.assign(P, kNaN);
  a.best_seed.assign(P, kNaN);
  a.target.assign(P, kNaN);
  for (std::size_t p = 0; p < P; ++p) {
    double sum = 0, sq = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    int n = 0;
    for (std::size_t s = 0; s < S; ++s) {
      const double g = a.gamma(static_cast<Eigen::Index>(p), static_cast<Eigen::Index>(s));
      if (!std::isfinite(g)) continue;
      sum += g;
      sq += g * g;
      lo = std::min(lo, g);
      hi = std::max(hi, g);
      ++n;
    }
    if (n > 0) {
      a.mean[p] = sum / n;
      a.std[p] = std::sqrt(std::max(sq / n - a.mean[p] * a.mean[p], 0.0));   // population std (numpy default)
      a.lo[p] = lo;
      a.hi[p] = hi;
    }
    if (best_row[p] < t.rows()) {
      for (const auto& n2 : numeric) a.best[n2][p] = t.numbers(n2)[best_row[p]];
      a.best_seed[p] = ss[best_row[p]];
    }
    a.target[p] = axis == "noise" ? a.best["min_margin"][p] : a.mean[p];
  }
  return a;
}

FitModel default_fit_model(const std::string& axis, const std::string& spike_target) {
  if (axis == "width" || axis == "facts") return FitModel::rkrv;
  if (axis == "noise") return FitModel::noisy;
  require(axis == "beta", "unknown sweep axis '{}' (use width, facts, beta or noise)", axis);
  if (spike_target == "keys") return FitModel::akrv;
  if (spike_target == "values") return FitModel::rkav;
  if (spike_target == "both") return FitModel::akav;
  throw UserError("a beta sweep needs --spike-target keys, values or both (got '" + spike_target + "')");
}

std::string fit_x_axis(FitModel m, const std::string& axis) {
  switch (m) {
    case FitModel::rkrv: return axis;
    case FitModel::akrv: return "e_k";
    case FitModel::rkav: return "ev_lv";
    case FitModel::akav: return "ek_sqrt_ev_kappa";
    case FitModel::noisy: return "noise";
  }
  return axis;
}

std::vector<FitPoint> fit_points(const SweepAggregate& a) {
  auto col = [&](const char* n, std::size_t p) {
    auto it = a.best.find(n);
    return it == a.best.end() ? kNaN : it->second[p];
  };
  std::vector<FitPoint> pts(a.x.size());
  for (std::size_t p = 0; p < a.x.size(); ++p) {
    FitPoint& f = pts[p];
    f.gamma = a.target[p];
    f.facts = col("facts", p);
    f.width = col("width", p);
    f.dim = col("dim", p);
    f.k_min_diag = col("k_min_diag", p);
    f.k_max_off = col("k_max_off", p);
    f.e_k = col("e_k", p);
    f.v_min = col("v_min", p);
    f.b_y = col("b_y", p);
    f.e_v = col("e_v", p);
    f.l_v = col("l_v", p);
    f.kappa = col("kappa", p);
    f.eps = col("noise", p);
    f.l_bil = col("l_bil", p);
  }
  return pts;
}

void write_sweep_fit(h5::Group& root, const io::Table& summary) {
  const std::string axis = first_string(summary, "sweep", "width");
  const std::string model_name = first_string(summary, "fit_model", "auto");
  const FitModel primary = model_name == "auto" ? default_fit_model(axis, first_string(summary, "spike_target", "none"))
                                                : parse_fit_model(model_name);
  const SweepAggregate a = aggregate_sweep(summary, axis);
  const std::vector<FitPoint> pts = fit_points(a);

  h5::Group pg = root.child("points");
  pg.attr("axis", axis);
  pg.attr("aggregation", "gamma_mean/std over seeds (population std); every other column from the best seed "
                         "(largest clean min_margin); fit_target = gamma_mean (noise sweep: noisy min_margin of the best clean seed)");
  write_vec(pg, axis, a.x);
  write_vec(pg, "seed", a.seeds);
  const Eigen::MatrixXd gt = a.gamma;  // row-major on disk via write(matrix)
  pg.write("gamma_seeds", gt);
  pg.attach_scales("gamma_seeds", {axis, "seed"});
  const std::vector<std::pair<std::string, const std::vector<double>*>> agg = {
      {"gamma_mean", &a.mean}, {"gamma_std", &a.std}, {"gamma_lo", &a.lo}, {"gamma_hi", &a.hi},
      {"best_seed", &a.best_seed}, {"fit_target", &a.target}};
  for (auto& [n, v] : agg) {
    write_vec(pg, n, *v);
    pg.attach_scales(n, {axis});
  }
  h5::Group bg = pg.child("best");
  for (auto& [n, v] : a.best) {
    if (n == axis) continue;
    write_vec(bg, n, v);
    bg.attach_scales(n, {"/points/" + axis});
  }

  h5::Group fg = root.child("fit");
  fg.attr("axis", axis);
  std::vector<FitModel> models = {primary};
  for (FitModel m : {FitModel::rkrv, FitModel::akrv, FitModel::rkav, FitModel::akav, FitModel::noisy})
    if (m != primary && (m != FitModel::noisy || axis == "noise")) models.push_back(m);
  bool wrote_primary = false;
  for (FitModel m : models) {
    FitResult r;
    try {
      r = fit_theory(m, pts);
    } catch (const UserError& e) {
      if (m == primary) {
        fg.attr("model", fit_model_name(m));
        fg.attr("error", e.what());
        fg.attr("r2", kNaN);
        fg.attr("mse", kNaN);
      }
      continue;
    }
    auto put = [&](h5::Group& g) {
      g.attr("model", fit_model_name(m));
      g.attr("r2", r.r2);
      g.attr("mse", r.mse);
      g.attr("sse", r.sse);
      g.attr("points", static_cast<std::int64_t>(r.points));
      g.attr("x_axis", fit_x_axis(m, axis));
      g.attr("target", axis == "noise" ? "noisy min_margin of the best clean seed" : "gamma_mean");
      for (std::size_t k = 0; k < r.names.size(); ++k) g.attr(r.names[k], r.constants[k]);
      std::string names;
      for (std::size_t k = 0; k < r.names.size(); ++k) names += (k ? "," : "") + r.names[k];
      g.attr("constants", names);
      write_vec(g, "prediction", r.prediction);
    };
    h5::Group mg = fg.child(fit_model_name(m));
    put(mg);
    if (m == primary) {
      put(fg);
      write_vec(pg, "fit_prediction", r.prediction);
      pg.attach_scales("fit_prediction", {axis});
      wrote_primary = true;
    }
  }
  if (!wrote_primary) {
    write_vec(pg, "fit_prediction", std::vector<double>(a.x.size(), kNaN));
  }
}

void register_margin_fit_finalizer() {
  static bool done = false;
  if (done) return;
  done = true;
  sweep::register_finalizer(kMarginFitFinalizer, [](io::OutputFile& out, const io::Table& summary,
                                                    const nlohmann::json&) { write_sweep_fit(out.root(), summary); });
}

}  // namespace memcap::margin
