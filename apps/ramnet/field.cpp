// `ramnet field`: experiment E4 (spec ramnet.md §3, paper Fig. 4): value fields on S¹×S¹ of a cumulative GSU
// memory against full attention, per β = f·β* (rows) and column (dp, K, readout), on a G×G grid of query
// angles, written as /grid arrays with HDF5 dimension scales, with the quantified checks per panel.
#include <fmt/format.h>

#include <cmath>

#include "cli/app.hpp"
#include "options.hpp"
#include "core/error.hpp"
#include "io/output_file.hpp"
#include "ramnet/field.hpp"

namespace {

using namespace memcap;
using namespace memcap::ramnet;

struct FieldState {
  cli::CommonOptions common;
  FieldConfig cfg;
  std::vector<std::string> columns = {"dp4-full", "dp4-top4", "dp8-full", "dp4-mass"};
};

void run(CLI::App* sub, FieldState& st) {
  app::require_cpu_only(st.common, "ramnet field");
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  require(!st.common.out.empty(), "--out FILE.h5 is required");
  st.cfg.columns.clear();
  for (const auto& c : st.columns) st.cfg.columns.push_back(parse_field_column(c));
  {
    sweep::require_distinct(st.cfg.beta_factors, "--beta-factor");
    sweep::require_distinct(st.columns, "--columns");
    // Two spellings of one column (dp4-full, dp4-full-standard) are the same panel: compare what they parse to.
    for (std::size_t i = 0; i < st.cfg.columns.size(); ++i)
      for (std::size_t j = 0; j < i; ++j) {
        const FieldColumn &a = st.cfg.columns[j], &b = st.cfg.columns[i];
        require(a.dp != b.dp || a.topk != b.topk || a.readout != b.readout,
                "--columns lists the column '{}' twice ('{}' and '{}' are the same dp, K and readout); give each once",
                a.name, a.name, b.name);
      }
  }
  st.cfg.seed = st.common.seed;
  validate(st.cfg);
  const double panels = static_cast<double>(st.cfg.beta_factors.size() * st.cfg.columns.size());
  sweep::require_memory(8.0 * 4 * panels * st.cfg.grid * st.cfg.grid + 1e6, "the value-field panels");
  io::check_output_path(st.common.out);
  const FieldResult r = run_field(st.cfg);

  const int G = st.cfg.grid, B = static_cast<int>(st.cfg.beta_factors.size()), C = static_cast<int>(st.cfg.columns.size());
  fmt::print("E4 value fields: N = {} keys on the unit torus, grid {}x{}, tau = {:g} (beta* = {:.4g}); reference "
             "oblique fraction {:.3f}\n",
             st.cfg.N, G, G, st.cfg.tau, std::sqrt(2.0 / st.cfg.tau), r.reference_oblique_fraction);
  fmt::print("{:>6} {:>7} {:<12} {:>3} {:>4} {:<8} | {:>10} {:>11} {:>9} {:>9} {:>12}\n", "f", "beta", "column", "dp",
             "K", "readout", "MSE", "region_diff", "dead", "oblique", "max|f-f_kap|");
  io::Table t;
  for (const auto& P : r.panels) {
    fmt::print("{:>6.3g} {:>7.4g} {:<12} {:>3} {:>4} {:<8} | {:>10.4g} {:>11.4f} {:>9.4f} {:>9.4f} {:>12.3g}\n",
               P.beta_factor, P.beta, P.column.name, P.column.dp, P.column.topk, readout_name(P.column.readout), P.mse,
               P.region_diff, P.dead_fraction, P.oblique_fraction, P.kappa_max_diff);
    io::Row row;
    row.set("beta_factor", P.beta_factor)
        .set("beta", P.beta)
        .set("column", P.column.name)
        .set("dp", P.column.dp)
        .set("topk", P.column.topk)
        .set("readout", readout_name(P.column.readout))
        .set("mse", P.mse)
        .set("region_diff", P.region_diff)
        .set("dead_fraction", P.dead_fraction)
        .set("oblique_fraction", P.oblique_fraction)
        .set("kappa_max_diff", P.kappa_max_diff);
    t.append(row);
  }

  io::OutputFile out(st.common.out, prep.ctx);
  out.write_summary(t);
  h5::Group g = out.root().child("grid");
  const h5::WriteOptions z{true, 0};
  std::vector<std::int64_t> col_ids(static_cast<std::size_t>(C));
  for (int c = 0; c < C; ++c) col_ids[static_cast<std::size_t>(c)] = c;
  g.write("beta_factor", std::span<const double>(st.cfg.beta_factors));
  g.write("column", std::span<const std::int64_t>(col_ids));
  g.write("column_name", st.columns);
  g.write("theta0", std::span<const double>(r.theta));
  g.write("theta1", std::span<const double>(r.theta));
  std::vector<double> bins(static_cast<std::size_t>(st.cfg.orientation_bins));
  for (std::size_t b = 0; b < bins.size(); ++b) bins[b] = (static_cast<double>(b) + 0.5) * M_PI / static_cast<double>(bins.size());
  g.write("orientation", std::span<const double>(bins));
  g.write_nd("reference", std::span<const double>(r.reference), {G, G}, z);
  g.attach_scales("reference", {"theta0", "theta1"});
  std::vector<double> ref_region(r.reference_region.begin(), r.reference_region.end());
  g.write_nd("reference_region", std::span<const double>(ref_region), {G, G}, z);
  g.attach_scales("reference_region", {"theta0", "theta1"});
  g.write("reference_orientation_hist", std::span<const double>(r.reference_orientation_hist));
  g.attach_scales("reference_orientation_hist", {"orientation"});
  const std::size_t cells = static_cast<std::size_t>(G) * G;
  std::vector<double> field, kfield, region, hist;
  for (const auto& P : r.panels) {
    field.insert(field.end(), P.field.begin(), P.field.end());
    kfield.insert(kfield.end(), P.kappa_field.begin(), P.kappa_field.end());
    for (auto x : P.region) region.push_back(static_cast<double>(x));
    hist.insert(hist.end(), P.orientation_hist.begin(), P.orientation_hist.end());
  }
  (void)cells;
  for (const auto& [name, data] : {std::pair<const char*, const std::vector<double>*>{"field", &field},
                                   {"kappa_field", &kfield}, {"region", &region}}) {
    g.write_nd(name, std::span<const double>(*data), {B, C, G, G}, z);
    g.attach_scales(name, {"beta_factor", "column", "theta0", "theta1"});
  }
  g.write_nd("orientation_hist", std::span<const double>(hist), {B, C, st.cfg.orientation_bins});
  g.attach_scales("orientation_hist", {"beta_factor", "column", "orientation"});
  g.attr("axes", "beta_factor,column,theta0,theta1");
  h5::Group k = out.root().child("stored");
  k.write_nd("key_angles", std::span<const double>(r.key_angles), {st.cfg.N, 2});
  k.write("values", std::span<const double>(r.values));
  out.root().attr("tau", st.cfg.tau);
  out.root().attr("reference_oblique_fraction", r.reference_oblique_fraction);
  out.root().attr("memory", "cumulative GSU (gamma = -inf, eps = 0), circular codebooks, U = 2");
  out.commit();
  fmt::print(stderr, "ramnet field: wrote {}\n", st.common.out);
}

memcap::cli::Register reg("ramnet", 60, [](CLI::App& tool) {
  auto st = std::make_shared<FieldState>();
  auto* sub = tool.add_subcommand(
      "field",
      "Experiment E4 (spec ramnet.md §3, paper Fig. 4): value fields on S1 x S1. U = 2; N keys on the unit torus\n"
      "with values uniform in [-1, 1], written into a cumulative GSU memory (gamma = -inf, eps = 0); f(q) on a\n"
      "G x G grid of query angles. Panels: the reference softmax(q.k/tau) and, per beta = f beta* (rows) and\n"
      "column (dp<d>-full, dp<d>-top<K>, dp<d>-mass = mass-aware readout; standard otherwise), the memory's\n"
      "readout. Per panel: MSE against the reference, fraction of the grid whose dominant key (argmax token\n"
      "weight) differs, dead fraction, magnitude-weighted gradient-orientation histogram and its oblique\n"
      "fraction, and max |f - f_kappa| against kappa-attention (0 up to rounding for mass-aware + full).\n"
      "Writes /summary (one row per panel), /grid/{field,kappa_field,region} (beta_factor x column x theta0 x\n"
      "theta1), /grid/{reference,reference_region} (theta0 x theta1), /grid/orientation_hist, all with\n"
      "dimension scales, and /stored/{key_angles,values}.\n"
      "Example: ramnet field --out e4.h5");
  cli::add_common(sub, st->common, "field.h5");
  sub->add_option("--N", st->cfg.N, "Stored keys")->capture_default_str();
  sub->add_option("--grid", st->cfg.grid, "Grid side G (G x G query angles)")->capture_default_str();
  sub->add_option("--tau", st->cfg.tau, "Reference temperature (beta* = sqrt(2/tau))")->capture_default_str();
  sub->add_option("--beta-factor", st->cfg.beta_factors, "Rows: beta = f beta* (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--columns", st->columns,
                  "Columns: dp<d>-full, dp<d>-top<K>, dp<d>-mass, d in 2..64 (comma list of distinct columns)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--orientation-bins", st->cfg.orientation_bins, "Bins of the gradient-orientation histogram")
      ->capture_default_str();
  sub->callback([sub, st]() { run(sub, *st); });
});

}  // namespace
