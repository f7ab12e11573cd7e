// `ramnet cape`: experiment E9 (spec ramnet.md §1.8, §3): the discretisation error between CAPE (cyclic shift of
// the flat address distribution by t slots) and RoPE (rotation of block u by ν_u t, ν_u = 2π/dp^{u+1}) for one
// query (--q) or random queries, per shift t: TV and JS between the two distributions, the total correlation of
// the CAPE-shifted one (RoPE keeps product form), and the factor logit-wave gaps (factor 0 always agrees).
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/threads.hpp"
#include "io/output_file.hpp"
#include "options.hpp"
#include "ramnet/cape.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using namespace memcap::ramnet;

// Philox stream of the random E9 queries (docs/ramnet.md).
constexpr std::uint64_t kStreamCapeQueries = 1420;
// Largest logit amplitude β|q_u| of a query block (see the check in run).
constexpr double kMaxAmplitude = 1e4;

struct CapeState {
  cli::CommonOptions common;
  app::ModelOptions model;
  std::vector<double> q;
  std::vector<std::int64_t> shifts;
  int queries = 16;
  std::string gen = "torus";
  double scale = 1.0;
};

void run(CLI::App* sub, CapeState& st) {
  app::require_cpu_only(st.common, "ramnet cape");
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  app::resolve(st.model, app::kModel);
  const Params& p = st.model.params;
  require_dense(p, 8.0 * 4, "ramnet cape");
  const std::int64_t n = address_count(p);
  const bool single = !st.q.empty();
  if (single) {
    for (const char* flag : {"--queries", "--gen", "--scale"})
      require(sub->count(flag) == 0, "{} sets the random queries; it cannot be combined with --q (one query)", flag);
    require(static_cast<int>(st.q.size()) == 2 * p.U, "--q has {} numbers, but --U {} needs 2U = {}", st.q.size(), p.U,
            2 * p.U);
    for (std::size_t i = 0; i < st.q.size(); ++i)
      require(std::isfinite(st.q[i]), "--q entry {} = {} is not a finite number", i, st.q[i]);
  } else {
    require(st.gen == "torus" || st.gen == "gauss", "--gen must be torus or gauss (got '{}')", st.gen);
    require(st.queries >= 1 && st.queries <= 1000000, "--queries {} must be in [1, 1e6]", st.queries);
    require(std::isfinite(st.scale) && st.scale > 0, "--scale {} must be a finite number > 0", st.scale);
  }
  std::vector<std::int64_t> ts = st.shifts;
  if (ts.empty())
    for (std::int64_t t = 0; t <= std::min<std::int64_t>(n, 64); ++t) ts.push_back(t);
  for (auto t : ts) require(t >= 0 && t <= (std::int64_t{1} << 40), "--shifts: t = {} must be in [0, 2^40]", t);
  sweep::require_distinct(ts, "--shifts");
  const int nq = single ? 1 : st.queries;
  const double work = static_cast<double>(nq) * ts.size() * n * (p.U + 4);
  require(work <= 5e10, "{} queries x {} shifts x dp^U = {} slots is too much dense work ({:.2g} slot updates); "
          "use fewer --queries or --shifts", nq, ts.size(), n, work);
  if (!st.common.out.empty()) io::check_output_path(st.common.out);

  // Queries: rows of 2U numbers.
  std::vector<std::vector<double>> qs;
  if (single) qs.push_back(st.q);
  for (int i = 0; !single && i < nq; ++i) {
    std::vector<double> x(2 * p.U);
    for (int u = 0; u < p.U; ++u) {
      const std::uint64_t base = static_cast<std::uint64_t>(i) * 2 * p.U + 2 * u;
      if (st.gen == "gauss") {
        x[2 * u] = st.scale * rng::normal(st.common.seed, kStreamCapeQueries, base);
        x[2 * u + 1] = st.scale * rng::normal(st.common.seed, kStreamCapeQueries, base + 1);
      } else {
        const double a = 2 * std::numbers::pi * rng::uniform(st.common.seed, kStreamCapeQueries, base);
        x[2 * u] = st.scale * std::cos(a);
        x[2 * u + 1] = st.scale * std::sin(a);
      }
    }
    qs.push_back(std::move(x));
  }
  // Logit amplitudes β|q_u| beyond kMaxAmplitude leave nothing but rounding in the compared waves (the factor-0
  // gap, exactly 0 in theory, grows like β|q_u|·1e-16): refuse them before any output.
  for (std::size_t i = 0; i < qs.size(); ++i)
    for (int u = 0; u < p.U; ++u) {
      const double a = p.beta_r * std::hypot(qs[i][2 * u], qs[i][2 * u + 1]);
      if (a <= kMaxAmplitude) continue;
      if (single)
        throw UserError(fmt::format("--q block {} has logit amplitude beta |q_u| = {:.3g}; ramnet cape needs "
                                    "beta |q_u| in [0, {:g}] (smaller --q entries or --beta)", u, a, kMaxAmplitude));
      throw UserError(fmt::format("--scale {:g}: random query {} block {} has logit amplitude beta |q_u| = {:.3g}; "
                                  "ramnet cape needs beta |q_u| <= {:g} (lower --scale or --beta)", st.scale, i, u, a,
                                  kMaxAmplitude));
    }
  const auto nu = cape_frequencies(p.dp, p.U);
  std::string freq;
  for (int u = 0; u < p.U; ++u) freq += fmt::format("{}nu_{} = 2pi/{}^{} = {:.10g}", u ? ", " : "", u, p.dp, u + 1, nu[u]);
  fmt::print("CAPE vs RoPE, dp={} U={} beta={:g}, {} ({}); frequencies {}\n", p.dp, p.U, p.beta_r,
             single ? "one query" : fmt::format("{} {} queries, scale {:g}", nq, st.gen, st.scale),
             fmt::format("|A| = {}", n), freq);
  fmt::print("{:>6} {:>5} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "t", "zero?", "TV mean", "TV max", "JS mean",
             "TC(CAPE)", "gap f0", "gap f>=1");
  const std::int64_t period = n / p.dp;  // dp^{U-1}
  io::Table table;
  double worst_zero = 0, worst_f0 = 0, worst_tc_rope = 0;
  for (std::int64_t t : ts) {
    std::vector<CapeRope> res(qs.size());
    parallel_for_rethrow(static_cast<std::int64_t>(qs.size()), [&](std::int64_t i) {
      const auto k = static_cast<std::size_t>(i);
      res[k] = compare_cape_rope(p.dp, p.U, p.beta_r, qs[k].data(), t);
    });
    double tv_sum = 0, tv_max = 0, js_sum = 0, js_max = 0, tc_sum = 0, tc_rope = 0, g0 = 0, g1 = 0;
    for (const auto& r : res) {
      tv_sum += r.tv, tv_max = std::max(tv_max, r.tv), js_sum += r.js, js_max = std::max(js_max, r.js);
      tc_sum += r.tc_cape, tc_rope = std::max(tc_rope, r.tc_rope), g0 = std::max(g0, r.logit_gap[0]);
      for (int u = 1; u < p.U; ++u) g1 = std::max(g1, r.logit_gap[u]);
    }
    const double m = static_cast<double>(res.size());
    const bool zero = t % period == 0;
    if (zero) worst_zero = std::max(worst_zero, tv_max);
    worst_f0 = std::max(worst_f0, g0), worst_tc_rope = std::max(worst_tc_rope, tc_rope);
    fmt::print("{:>6} {:>5} {:>11.6f} {:>11.6f} {:>11.3e} {:>11.3e} {:>11.1e} {:>11.3e}\n", t, zero ? "yes" : "", tv_sum / m,
               tv_max, js_sum / m, tc_sum / m, g0, g1);
    io::Row row;
    row.set("t", t).set("zero_expected", static_cast<std::int64_t>(zero)).set("queries", static_cast<std::int64_t>(m));
    row.set("tv_mean", tv_sum / m).set("tv_max", tv_max).set("js_mean", js_sum / m).set("js_max", js_max);
    row.set("tc_cape_mean", tc_sum / m).set("tc_rope_max", tc_rope).set("logit_gap0_max", g0).set("logit_gap_max", g1);
    table.append(row);
  }
  fmt::print("checks: TV at t = 0 mod dp^(U-1) = {}: max {:.1e}; factor-0 wave gap max {:.1e}; TC(RoPE) max {:.1e}\n",
             period, worst_zero, worst_f0, worst_tc_rope);
  if (st.common.out.empty()) return;
  io::OutputFile out(st.common.out, prep.ctx);
  out.write_summary(table);
  h5::Group g = out.root().child("runs").child("cape");
  g.write("frequencies", std::span<const double>(nu));
  Eigen::MatrixXd Q(static_cast<Eigen::Index>(qs.size()), 2 * p.U);
  for (std::size_t i = 0; i < qs.size(); ++i)
    for (int j = 0; j < 2 * p.U; ++j) Q(static_cast<Eigen::Index>(i), j) = qs[i][j];
  g.write("queries", Q);
  out.commit();
  fmt::print(stderr, "ramnet cape: wrote {}\n", st.common.out);
}

memcap::cli::Register reg("ramnet", 80, [](CLI::App& tool) {
  auto st = std::make_shared<CapeState>();
  auto* sub = tool.add_subcommand(
      "cape",
      "Experiment E9 (spec ramnet.md §1.8, paper A.6): CAPE (cyclic shift r'(i) = r((i − t) mod dp^U) of the\n"
      "dense read distribution) against RoPE (block u rotated by ν_u t, ν_u = 2π/dp^{u+1}) for each shift t: TV\n"
      "and JS (nats) between the two, the total correlation of the CAPE-shifted distribution (0 for a product\n"
      "distribution; RoPE-rotated ones always are) and the largest gap between the factor logit waves (factor 0\n"
      "always 0). The two agree exactly when t is a multiple of dp^{U−1}. One query (--q) or --queries random ones\n"
      "(--gen torus: blocks of norm --scale at uniform angles; gauss: N(0, scale²) entries; Philox stream 1420).\n"
      "β = --beta-r (read concentration; default β* = sqrt(2/τ)). Writes /summary (one row per t) and\n"
      "/runs/cape/{frequencies, queries}.\n"
      "Example: ramnet cape --dp 4 --U 2 --beta 1 --q 0.5,0.2,-0.4,0.3 --shifts 1,2,3,4,5,8,16");
  app::add_model_options(sub, st->model, app::kModel, 2);
  sub->add_option("--q", st->q, "One query: 2U comma-separated numbers, beta|q_u| <= 1e4 (default: random queries)")
      ->delimiter(',');
  sub->add_option("--shifts", st->shifts, "Distinct shifts t in [0, 2^40] (comma-separated; default 0..min(dp^U, 64))")
      ->delimiter(',');
  sub->add_option("--queries", st->queries, "Number of random queries (not with --q)")->capture_default_str();
  sub->add_option("--gen", st->gen,
                  "Random queries (not with --q): torus (block norm = scale) or gauss (entries N(0, scale²))")
      ->capture_default_str();
  sub->add_option("--scale", st->scale,
                  "Block norm (torus) or standard deviation (gauss) of random queries (not with --q); beta|q_u| <= 1e4")
      ->capture_default_str();
  cli::add_common(sub, st->common);
  sub->callback([sub, st]() { run(sub, *st); });
});

}  // namespace
