// `ramnet kernel`: the address-overlap kernel κ_A of one (q, k) pair or of a batch (--in FILE with datasets q and
// k, N × 2U), next to κ_∞, the exp target exp(β_rβ_w/2 q·k), the exact errors e_tot / e_fin / e_cont and the
// bounds of Theorem 2 (spec ramnet.md §2.1–2.5, §2.8, E1). Printed, and written with --out (/summary, /runs/pairs).
#include <fmt/format.h>

#include <cmath>
#include <tuple>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "io/output_file.hpp"
#include "options.hpp"
#include "ramnet/theory.hpp"

namespace {

using namespace memcap;
using namespace memcap::ramnet;

struct KernelState {
  cli::CommonOptions common;
  app::ModelOptions model;
  std::vector<double> q, k;
  std::string in;
};

// Largest scaled block norm β_r|q_u|, β_w|k_u| (M of Theorem 2) the exact errors are evaluated at: beyond it the
// log-domain terms (~M²) swamp the errors in rounding and, from ~1e154, overflow into NaN.
constexpr double kMaxM = 1e4;

// The first block of one (q, k) pair whose scaled norm exceeds kMaxM, as "q block u (β_r|q_u| = x)"; "" if none.
std::string over_range(const Params& p, const double* q, const double* k) {
  for (int u = 0; u < p.U; ++u)
    for (auto [x, b, name] : {std::tuple{q, p.beta_r, "q"}, std::tuple{k, p.beta_w, "k"}}) {
      const double m = b * std::hypot(x[2 * u], x[2 * u + 1]);
      if (!(m <= kMaxM)) return fmt::format("{} block {} has beta_{}|{}_u| = {:.3g}", name, u, *name == 'q' ? 'r' : 'w',
                                            name, m);
    }
  return {};
}

// Exit 4 when a computed quantity is not finite (the range check should make this unreachable).
void require_finite(const PairErrors& e, double log_hard, const std::string& where) {
  for (auto [v, name] : {std::pair{e.log_kappa_A, "log kappa_A"}, {e.log_kappa_inf, "log kappa_inf"},
                         {e.target, "target"}, {e.e_tot, "e_tot"}, {e.e_fin, "e_fin"}, {e.e_cont, "e_cont"},
                         {e.M, "M"}, {log_hard, "log kappa_hard_write"}})
    if (!std::isfinite(v))
      throw NumericError(
          fmt::format("{} of {} is {} (not finite); no result was written", name, where, v));
}

std::string num(double v) { return std::isinf(v) ? std::string("none (xi >= 1)") : fmt::format("{:.12g}", v); }

// Datasets q and k of the input file: 2-D, N x 2U, same N >= 1, every entry finite.
void read_pairs(const std::string& file, int U, Eigen::MatrixXd& Q, Eigen::MatrixXd& K) {
  h5::require_readable_file(file, "--in");
  if (!h5::is_hdf5(file))
    throw IoError(fmt::format("--in '{}' is not an HDF5 file (expected datasets q and k, N x 2U)", file));
  const h5::File f = h5::File::open_read(file);
  for (const char* name : {"q", "k"}) {
    require(f.exists(name) && f.is_dataset(name), "--in '{}' has no dataset '{}' (expected datasets q and k, N x 2U)",
            file, name);
    const auto shape = f.shape(name);
    require(shape.size() == 2 && shape[1] == 2 * U && shape[0] >= 1,
            "--in '{}': dataset {} has shape {} but --U {} needs N x {} with N >= 1", file, name,
            [&] {
              std::string s;
              for (auto d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
              return s.empty() ? std::string("(scalar)") : s;
            }(),
            U, 2 * U);
    require(f.dataset_kind(name) != 's', "--in '{}': dataset {} holds strings, expected numbers", file, name);
  }
  Q = f.read_matrix("q");
  K = f.read_matrix("k");
  require(Q.rows() == K.rows(), "--in '{}': q has {} rows but k has {}; give one key per query", file, Q.rows(),
          K.rows());
  for (const auto& [M, name] : {std::pair{&Q, "q"}, std::pair{&K, "k"}})
    for (Eigen::Index i = 0; i < M->rows(); ++i)
      for (Eigen::Index j = 0; j < M->cols(); ++j)
        require(std::isfinite((*M)(i, j)), "--in '{}': {}[{},{}] = {} is not finite; every entry must be a finite number",
                file, name, i, j, (*M)(i, j));
}

io::Row pair_row(const Params& p, const PairErrors& e, double log_hard) {
  io::Row r;
  r.set("dp", p.dp).set("U", p.U).set("beta_r", p.beta_r).set("beta_w", p.beta_w);
  r.set("kappa_A", std::exp(e.log_kappa_A)).set("kappa_inf", std::exp(e.log_kappa_inf)).set("exp_target",
                                                                                            std::exp(e.target));
  r.set("log_kappa_A", e.log_kappa_A).set("log_kappa_inf", e.log_kappa_inf).set("target", e.target);
  r.set("e_tot", e.e_tot).set("e_fin", e.e_fin).set("e_cont", e.e_cont);
  r.set("M", e.M).set("xi", e.xi);
  r.set("bound11", e.bound11).set("bound16_lo", e.bound16_lo).set("bound16_hi", e.bound16_hi);
  r.set("bound17", e.bound17).set("bound20", e.bound20);
  r.set("log_kappa_hard_write", log_hard);
  return r;
}

struct Violations {
  std::int64_t v11 = 0, v16 = 0, v17 = 0, v20 = 0;
  void add(const PairErrors& e) {
    const double r = e.roundoff;
    v16 += e.e_cont < e.bound16_lo - r || e.e_cont > e.bound16_hi + r;
    v17 += std::fabs(e.e_cont) > e.bound17 + r;
    v20 += std::isfinite(e.bound20) && std::fabs(e.e_fin) > e.bound20 + r;
    v11 += std::isfinite(e.bound11) && std::fabs(e.e_tot) > e.bound11 + r;
  }
  std::int64_t total() const { return v11 + v16 + v17 + v20; }
};

void run(CLI::App* sub, KernelState& st) {
  app::require_cpu_only(st.common, "ramnet kernel");
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  app::resolve(st.model, app::kModel);
  const Params& p = st.model.params;
  const bool single = !st.q.empty() || !st.k.empty();
  require(single != !st.in.empty(), "give --q and --k (one pair) or --in FILE (datasets q and k, N x 2U), not both");
  if (single) {
    require(static_cast<int>(st.q.size()) == 2 * p.U && static_cast<int>(st.k.size()) == 2 * p.U,
            "--q has {} numbers and --k {}, but --U {} needs 2U = {} each", st.q.size(), st.k.size(), p.U, 2 * p.U);
    for (std::size_t i = 0; i < st.q.size(); ++i) {
      require(std::isfinite(st.q[i]), "--q entry {} = {} is not a finite number", i, st.q[i]);
      require(std::isfinite(st.k[i]), "--k entry {} = {} is not a finite number", i, st.k[i]);
    }
    const std::string bad = over_range(p, st.q.data(), st.k.data());
    require(bad.empty(), "--{}; ramnet kernel needs beta_r|q_u| and beta_w|k_u| in [0, {:g}] (smaller --q/--k "
            "entries or beta)", bad, kMaxM);
  }
  if (!st.common.out.empty()) io::check_output_path(st.common.out);
  const Codebook C = circular_codebook(p.dp);
  io::Table table;
  if (single) {
    const PairErrors e = pair_errors(p, C, st.q.data(), st.k.data());
    const double lh = log_kappa_hard_write(p, C, st.q.data(), st.k.data());
    require_finite(e, lh, "the pair");
    std::string codes;
    for (int u = 0; u < p.U; ++u) codes += (u ? ", " : "") + std::to_string(nearest_code(C, st.k[2 * u], st.k[2 * u + 1]));
    Violations v;
    v.add(e);
    auto ok = [](bool b) { return b ? "ok" : "VIOLATED"; };
    fmt::print("dp={} U={} beta_r={:g} beta_w={:g} (|A| = {}^{})\n", p.dp, p.U, p.beta_r, p.beta_w, p.dp, p.U);
    fmt::print("kappa_A      {:.12g}   (log {:.12g})\n", std::exp(e.log_kappa_A), e.log_kappa_A);
    fmt::print("kappa_inf    {:.12g}   (log {:.12g})\n", std::exp(e.log_kappa_inf), e.log_kappa_inf);
    fmt::print("exp_target   {:.12g}   (target = beta_r*beta_w/2 q.k = {:.12g})\n", std::exp(e.target), e.target);
    fmt::print("e_tot        {:.6e}   log kappa_A - target\n", e.e_tot);
    fmt::print("e_fin        {:.6e}   log kappa_A - log kappa_inf\n", e.e_fin);
    fmt::print("e_cont       {:.6e}   log kappa_inf - target\n", e.e_cont);
    fmt::print("M            {:.6g}   xi {:.7g}   (xi < 1 for M < {:.5g})\n", e.M, e.xi, xi_threshold(p.dp));
    fmt::print("eq16         e_cont in [{:.6g}, {:.6g}]   {}\n", e.bound16_lo, e.bound16_hi, ok(v.v16 == 0));
    fmt::print("eq17         |e_cont| <= {:.6g}   {}\n", e.bound17, ok(v.v17 == 0));
    fmt::print("eq20         |e_fin| <= {}   {}\n", num(e.bound20), std::isinf(e.bound20) ? "n/a" : ok(v.v20 == 0));
    fmt::print("eq11         |e_tot| <= {}   {}\n", num(e.bound11), std::isinf(e.bound11) ? "n/a" : ok(v.v11 == 0));
    fmt::print("hard-write   {:.12g}   (beta_w -> inf: nearest codes of k = ({}))\n", std::exp(lh), codes);
    table.append(pair_row(p, e, lh).set("violations", v.total()));
  } else {
    Eigen::MatrixXd Q, K;
    read_pairs(st.in, p.U, Q, K);
    const Eigen::Index n = Q.rows();
    for (Eigen::Index i = 0; i < n; ++i) {
      const Eigen::VectorXd qi = Q.row(i).transpose(), ki = K.row(i).transpose();
      const std::string bad = over_range(p, qi.data(), ki.data());
      require(bad.empty(), "--in '{}': row {}: {}; ramnet kernel needs beta_r|q_u| and beta_w|k_u| in [0, {:g}]",
              st.in, i, bad, kMaxM);
    }
    std::vector<PairErrors> all(static_cast<std::size_t>(n));
    std::vector<double> hard(static_cast<std::size_t>(n));
    const Eigen::MatrixXd Qr = Q.transpose(), Kr = K.transpose();  // column i = pair i, contiguous
#pragma omp parallel for schedule(static)
    for (Eigen::Index i = 0; i < n; ++i) {
      all[i] = pair_errors(p, C, Qr.col(i).data(), Kr.col(i).data());
      hard[i] = log_kappa_hard_write(p, C, Qr.col(i).data(), Kr.col(i).data());
    }
    for (Eigen::Index i = 0; i < n; ++i) require_finite(all[i], hard[i], fmt::format("pair {} of --in", i));
    Violations v;
    double mt = 0, mf = 0, mc = 0, mM = 0;
    for (const auto& e : all) {
      v.add(e);
      mt = std::max(mt, std::fabs(e.e_tot)), mf = std::max(mf, std::fabs(e.e_fin)), mc = std::max(mc, std::fabs(e.e_cont));
      mM = std::max(mM, e.M);
    }
    fmt::print("dp={} U={} beta_r={:g} beta_w={:g}: {} pairs from {}\n", p.dp, p.U, p.beta_r, p.beta_w, n, st.in);
    fmt::print("max |e_tot| {:.6e}   max |e_fin| {:.6e}   max |e_cont| {:.6e}   max M {:.6g}\n", mt, mf, mc, mM);
    fmt::print("violations: eq11 {}  eq16 {}  eq17 {}  eq20 {}\n", v.v11, v.v16, v.v17, v.v20);
    io::Row r;
    r.set("dp", p.dp).set("U", p.U).set("beta_r", p.beta_r).set("beta_w", p.beta_w).set("pairs", n);
    r.set("max_abs_e_tot", mt).set("max_abs_e_fin", mf).set("max_abs_e_cont", mc).set("max_M", mM);
    r.set("viol11", v.v11).set("viol16", v.v16).set("viol17", v.v17).set("viol20", v.v20).set("violations", v.total());
    table.append(r);
    if (!st.common.out.empty()) {
      io::OutputFile out(st.common.out, prep.ctx);
      out.write_summary(table);
      h5::Group g = out.root().child("runs").child("pairs");
      const h5::WriteOptions z{true, 0};
      auto col = [&](const char* name, auto get) {
        std::vector<double> c(static_cast<std::size_t>(n));
        for (Eigen::Index i = 0; i < n; ++i) c[i] = get(all[i], i);
        g.write(name, std::span<const double>(c), z);
      };
      col("log_kappa_A", [](const PairErrors& e, Eigen::Index) { return e.log_kappa_A; });
      col("log_kappa_inf", [](const PairErrors& e, Eigen::Index) { return e.log_kappa_inf; });
      col("target", [](const PairErrors& e, Eigen::Index) { return e.target; });
      col("e_tot", [](const PairErrors& e, Eigen::Index) { return e.e_tot; });
      col("e_fin", [](const PairErrors& e, Eigen::Index) { return e.e_fin; });
      col("e_cont", [](const PairErrors& e, Eigen::Index) { return e.e_cont; });
      col("M", [](const PairErrors& e, Eigen::Index) { return e.M; });
      col("xi", [](const PairErrors& e, Eigen::Index) { return e.xi; });
      col("bound11", [](const PairErrors& e, Eigen::Index) { return e.bound11; });
      col("bound16_lo", [](const PairErrors& e, Eigen::Index) { return e.bound16_lo; });
      col("bound16_hi", [](const PairErrors& e, Eigen::Index) { return e.bound16_hi; });
      col("bound17", [](const PairErrors& e, Eigen::Index) { return e.bound17; });
      col("bound20", [](const PairErrors& e, Eigen::Index) { return e.bound20; });
      col("log_kappa_hard_write", [&](const PairErrors&, Eigen::Index i) { return hard[i]; });
      g.attr("input", st.in);
      out.commit();
      fmt::print(stderr, "ramnet kernel: wrote {}\n", st.common.out);
    }
    return;
  }
  if (st.common.out.empty()) return;
  io::OutputFile out(st.common.out, prep.ctx);
  out.write_summary(table);
  out.commit();
  fmt::print(stderr, "ramnet kernel: wrote {}\n", st.common.out);
}

memcap::cli::Register reg("ramnet", 10, [](CLI::App& tool) {
  auto st = std::make_shared<KernelState>();
  auto* sub = tool.add_subcommand(
      "kernel",
      "The address-overlap kernel κ_A(q,k) = |A| Σ_a r(a) w(a) (exact, factorised over the U factors) of one pair\n"
      "(--q, --k: 2U numbers each) or of a batch (--in FILE.h5 with datasets q and k, N x 2U), with the\n"
      "continuous-codebook limit κ_∞, the target exp(β_rβ_w/2 q·k), the exact errors e_tot = log κ_A − target,\n"
      "e_fin = log κ_A − log κ_∞, e_cont = log κ_∞ − target, M, ξ and the bounds of Theorem 2 (eqs. 16, 17, 20, 11;\n"
      "'none' when ξ >= 1), and the hard-write limit β_w → ∞ (spec ramnet.md §2). β defaults to β* = sqrt(2/τ).\n"
      "Writes /summary (one row: the pair, or the batch's maxima and violation counts) and, for --in,\n"
      "/runs/pairs/<quantity> arrays of length N (docs/ramnet.md).\n"
      "Example: ramnet kernel --dp 4 --U 2 --beta-r 1 --beta-w 1 --q 0.5,0.2,-0.4,0.3 --k 0.3,-0.1,-0.2,0.5");
  app::add_model_options(sub, st->model, app::kModel, 1);
  sub->add_option("--q", st->q, "One query: 2U comma-separated numbers, beta_r|q_u| <= 1e4 per block")->delimiter(',');
  sub->add_option("--k", st->k, "One key: 2U comma-separated numbers, beta_w|k_u| <= 1e4 per block")->delimiter(',');
  sub->add_option("--in", st->in, "HDF5 file with datasets q and k (N x 2U each): one pair per row (same bounds)");
  cli::add_common(sub, st->common);
  sub->callback([sub, st]() { run(sub, *st); });
});

}  // namespace
