// `kata bounds welch|rankin|psd|random|table1`: the capacity bounds of spec kata.md §3.2–3.8 evaluated
// on the given grids, printed as a table and (with --out) written as /summary rows. "no bound" is
// printed as such and stored as +inf; inputs outside a formula's domain are errors (exit 2).
#include <fmt/format.h>

#include <cmath>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "io/output_file.hpp"
#include "kata/bounds.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using namespace memcap::kata;

struct BoundsState {
  cli::CommonOptions common;
  std::string kind;
  std::vector<std::int64_t> dims;
  std::vector<double> keys, eps, mu;
  std::vector<std::int64_t> ps;
  std::string convention = "both";
};

std::string grouped(std::int64_t v) {
  std::string s = std::to_string(v), out;
  const int n = static_cast<int>(s.size());
  for (int i = 0; i < n; ++i) {
    out += s[i];
    if ((n - 1 - i) % 3 == 0 && i != n - 1 && s[i] != '-') out += ',';
  }
  return out;
}

std::string num(double v, const char* inf_text = "no bound") {
  if (std::isinf(v)) return inf_text;
  return fmt::format("{:.10g}", v);
}

// Largest T: 2^53, the largest integer a double holds exactly (T is converted to a 64-bit integer).
constexpr double kMaxKeys = 9007199254740992.0;

void check_keys(const std::vector<double>& keys) {
  for (double T : keys) {
    require(std::isfinite(T) && T >= 1, "--keys: T = {} must be a number of keys >= 1", T);
    require(T <= kMaxKeys, "--keys: T = {:g} is too large (max 2^53 = {:.0f})", T, kMaxKeys);
  }
}

// Largest --dim D of welch: D*D (the complex Gerzon bound) must fit in a 64-bit integer.
constexpr std::int64_t kMaxWelchDim = 3037000499;

void run(CLI::App* sub, BoundsState& st) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  if (!st.common.out.empty()) io::check_output_path(st.common.out);
  io::Table table;
  const double nan = std::nan("");
  const std::string& k = st.kind;
  require(k == "welch" || k == "rankin" || k == "psd" || k == "random" || k == "table1",
          "unknown bounds kind '{}'; use welch, rankin, psd, random or table1", k);
  sweep::require_distinct(st.dims, "--dim");
  sweep::require_distinct(st.keys, "--keys");
  sweep::require_distinct(st.eps, "--eps");
  sweep::require_distinct(st.mu, "--mu");
  sweep::require_distinct(st.ps, "--p");
  if (k == "welch") {
    if (st.dims.empty()) st.dims = {128};
    if (st.keys.empty()) st.keys = {130, 1e5};
    if (st.eps.empty()) st.eps = {0.01};
    if (st.mu.empty()) st.mu = {0.05, 0.20};
    check_keys(st.keys);
    for (std::int64_t D : st.dims)
      require(D <= kMaxWelchDim, "--dim: D = {} is too large (max {}; D^2 must fit in 64 bits)", D, kMaxWelchDim);
    fmt::print("{:<4} {:>8} {:>12} {:>10} {:>10}  {}\n", "form", "D", "T", "eps/mu", "value", "meaning");
    auto add = [&](const char* form, double D, double T, double e, double m, double v, const std::string& note) {
      io::Row r;
      r.set("form", form).set("D", D).set("T", T).set("eps", e).set("mu", m).set("value", v).set("meaning", note);
      table.append(r);
    };
    for (std::int64_t D : st.dims) {
      for (double T : st.keys) {
        require(T == std::floor(T), "--keys: T = {} must be an integer for W1", T);
        const double m2 = welch_mu_sq(D, static_cast<std::int64_t>(T));
        fmt::print("{:<4} {:>8} {:>12} {:>10} {:>10.6g}  mu^2 >= {:.6e} (T <= D gives 0)\n", "W1", D, T, "-",
                   std::sqrt(m2), m2);
        add("W1", D, T, nan, nan, std::sqrt(m2), "mu >= sqrt((T-D)/(D(T-1)))");
      }
      for (double e : st.eps) {
        const double w2 = welch_max_keys_unsquared(D, e), w3 = welch_max_keys_squared(D, e);
        fmt::print("{:<4} {:>8} {:>12} {:>10} {:>10}  T <= D(1-eps^2)/(1-D eps^2) (eps on |<u,v>|)\n", "W2", D, "-",
                   e, num(w2));
        fmt::print("{:<4} {:>8} {:>12} {:>10} {:>10}  T <= D(1-eps)/(1-D eps) (eps on <u,v>^2)\n", "W3", D, "-", e,
                   num(w3));
        add("W2", D, nan, e, nan, w2, "max keys, unsquared tolerance (inf = no bound, eps >= 1/sqrt(D))");
        add("W3", D, nan, e, nan, w3, "max keys, squared tolerance (inf = no bound, eps >= 1/D)");
      }
      fmt::print("{:<4} {:>8} {:>12} {:>10} {:>10}  real ETF needs T <= D(D+1)/2 (complex: {})\n", "Gz", D, "-", "-",
                 gerzon_real(D), gerzon_complex(D));
      add("Gerzon", D, nan, nan, nan, static_cast<double>(gerzon_real(D)), "real ETF max T = D(D+1)/2");
    }
    for (double T : st.keys)
      for (double m : st.mu) {
        const double d = welch_min_dim(T, m);
        fmt::print("{:<4} {:>8} {:>12} {:>10} {:>10}  D >= T/(1+mu^2(T-1)) = {:.6g}\n", "W4", "-", T, m,
                   welch_min_dim_ceil(T, m), d);
        add("W4", nan, T, nan, m, static_cast<double>(welch_min_dim_ceil(T, m)), "min dimension (rounded up)");
      }
  } else if (k == "rankin") {
    if (st.dims.empty()) st.dims = {128};
    if (st.eps.empty()) st.eps = {0, 0.10, 0.25, 0.40, 0.45, 0.49, 0.5};
    std::vector<LorentzConvention> convs;
    require(st.convention == "both" || st.convention == "ambient" || st.convention == "raw",
            "--convention must be ambient, raw or both (got '{}')", st.convention);
    if (st.convention == "both") convs = {LorentzConvention::Ambient, LorentzConvention::Raw};
    else convs = {parse_lorentz_convention(st.convention)};
    fmt::print("{:<8} {:>6} {:>8} {:>12} {:>8}\n", "conv", "d", "eps", "wall", "keys");
    for (auto c : convs)
      for (std::int64_t d : st.dims)
        for (double e : st.eps) {
          const double w = rankin_wall(d, e, c);
          const std::int64_t n = rankin_wall_keys(d, e, c);
          const char* cn = c == LorentzConvention::Ambient ? "ambient" : "raw";
          fmt::print("{:<8} {:>6} {:>8} {:>12.6g} {:>8}\n", cn, d, e, w, n);
          io::Row r;
          r.set("convention", cn).set("d", d).set("eps", e).set("wall", w).set("keys", n);
          table.append(r);
        }
  } else if (k == "psd") {
    if (st.ps.empty()) st.ps = {16, 32, 64, 128};
    if (st.eps.empty()) st.eps = {0.10, 0.25, 0.50};
    fmt::print("{:>6} {:>8} {:>8} {:>14} {:>14} {:>12} {:>12}  {}\n", "p", "eps", "a", "paper_LB", "exact_cap_LB",
               "log10_paper", "log10_exact", "welch_ceiling (eps < 1/p)");
    for (std::int64_t p : st.ps)
      for (double e : st.eps) {
        const double lp = log_psd_cap_lb_paper(p, e), le = log_psd_cap_lb_exact(p, e);
        const double vp = psd_cap_lb_paper(p, e), ve = psd_cap_lb_exact(p, e), wc = psd_welch_ceiling(p, e);
        const bool vacuous = vp < 1.0;
        fmt::print("{:>6} {:>8.6g} {:>8.4f} {:>14} {:>14} {:>12.5f} {:>12.5f}  {}{}\n", p, e, std::sqrt(e),
                   num(vp, "overflow"), num(ve, "overflow"), lp / std::log(10.0), le / std::log(10.0),
                   num(wc, "none (eps >= 1/p)"), vacuous ? "   [paper bound vacuous: < 1]" : "");
        io::Row r;
        r.set("p", p)
            .set("eps", e)
            .set("a", std::sqrt(e))
            .set("paper_lb", vp)
            .set("exact_cap_lb", ve)
            .set("log10_paper_lb", lp / std::log(10.0))
            .set("log10_exact_cap_lb", le / std::log(10.0))
            .set("welch_ceiling", wc)
            .set("paper_vacuous", static_cast<std::int64_t>(vacuous));
        table.append(r);
      }
  } else if (k == "random") {
    if (st.keys.empty()) st.keys = {1e5};
    if (st.mu.empty()) st.mu = {0.05, 0.20};
    check_keys(st.keys);
    fmt::print("{:>12} {:>8} {:>14}\n", "T", "mu", "D ~ 4 ln T/mu^2");
    for (double T : st.keys)
      for (double m : st.mu) {
        const double d = random_code_dim(T, m);
        fmt::print("{:>12} {:>8} {:>14.6g}\n", T, m, d);
        io::Row r;
        r.set("T", T).set("mu", m).set("dim", d);
        table.append(r);
      }
  } else {  // table1
    const double T = st.keys.empty() ? 1e5 : st.keys[0];
    require(st.keys.size() <= 1, "table1 takes one --keys value (T), got {}", st.keys.size());
    check_keys({T});
    require(T <= 1e12, "--keys: table1 T = {:g} is too large (max 1e12; the MUB search steps through s up to sqrt(T))",
            T);
    if (st.mu.empty()) st.mu = {0.05, 0.20};
    const auto rows = table1(T, st.mu);
    fmt::print("Table 1: ambient dimension d needed for T = {} keys at coherence mu\n", grouped(std::llround(T)));
    fmt::print("{:<8}", "row");
    for (const auto& e : rows) fmt::print(" {:>22}", fmt::format("mu = {:.2f}", e.mu));
    fmt::print("\n{:<8}", "Welch");
    for (const auto& e : rows) fmt::print(" {:>22}", grouped(e.welch_d));
    fmt::print("\n{:<8}", "Random");
    for (const auto& e : rows) fmt::print(" {:>22}", grouped(e.random_d));
    fmt::print("\n{:<8}", "MUB");
    for (const auto& e : rows) fmt::print(" {:>22}", fmt::format("{} (s={})", grouped(e.mub_d), e.mub_s));
    fmt::print("\n{:<8}", "DeVore");
    for (const auto& e : rows)
      fmt::print(" {:>22}", fmt::format("{} (s={}, r={})", grouped(e.devore_d), e.devore_s, e.devore_r));
    fmt::print("\n");
    for (const auto& e : rows) {
      io::Row r;
      r.set("T", T)
          .set("mu", e.mu)
          .set("welch_d", e.welch_d)
          .set("random_d", e.random_d)
          .set("random_d_exact", e.random_d_exact)
          .set("mub_s", e.mub_s)
          .set("mub_d", e.mub_d)
          .set("devore_s", e.devore_s)
          .set("devore_r", e.devore_r)
          .set("devore_d", e.devore_d);
      table.append(r);
    }
  }
  if (st.common.out.empty()) return;
  io::OutputFile out(st.common.out, prep.ctx);
  out.root().attr("bounds_kind", k);
  out.root().attr("formula_source", "paper (Thm 3, 4, 9, Lemma 6, Table 1); exact-cap form: spec kata.md 3.4");
  out.write_summary(table);
  out.commit();
  fmt::print(stderr, "kata bounds: wrote {}\n", st.common.out);
}

memcap::cli::Register reg("kata", 20, [](CLI::App& tool) {
  auto st = std::make_shared<BoundsState>();
  auto* sub = tool.add_subcommand(
      "bounds",
      "Capacity bounds of the KATA paper (spec kata.md §3.2-3.8), printed and optionally written (--out):\n"
      "  welch   W1 mu >= sqrt((T-D)/(D(T-1))) per (--dim, --keys); W2/W3 max keys at tolerance --eps\n"
      "          (unsquared / squared); W4 min dimension per (--keys, --mu); Gerzon D(D+1)/2\n"
      "  rankin  Lorentz wall min{d, 1+1/(1-2eps)} (ambient: cone L^d_+) or min{d+1, ...} (raw keys in R^d);\n"
      "          eps = 1/2 gives the cross-polytope 2*(spatial dim); --convention ambient|raw|both\n"
      "  psd     PSD line packing lower bounds at PSD interference --eps (a = sqrt(eps)) for each --p:\n"
      "          paper 1/2 (1-eps)^{-(p-1)/2} and exact cap 1/I_{1-a^2}((p-1)/2, 1/2); Welch ceiling below 1/p\n"
      "  random  random-code estimate D ~ 4 ln T / mu^2\n"
      "  table1  the paper's Table 1 (T = 1e5, mu = 0.05, 0.20): Welch, random, MUB, DeVore dimensions\n"
      "Writes /summary (one row per printed line; not-applicable fields NaN, 'no bound' = inf).\n"
      "Example: kata bounds psd --p 64 --eps 0.25 --out psd.h5");
  sub->add_option("kind", st->kind, "welch | rankin | psd | random | table1")
      ->required();
  sub->add_option("--dim,-D", st->dims, "welch: dimensions D; rankin: d (default 128)")->delimiter(',');
  sub->add_option("--keys,-T", st->keys, "numbers of keys T (welch default 130,1e5; random/table1 default 1e5)")
      ->delimiter(',');
  sub->add_option("--eps", st->eps,
                  "welch: tolerance for W2/W3 (default 0.01); rankin: interference in [0, 1/2]; psd: PSD "
                  "interference in [0, 1) (default 0.1,0.25,0.5)")
      ->delimiter(',');
  sub->add_option("--mu", st->mu, "coherence for W4 / random / table1 (default 0.05,0.2)")->delimiter(',');
  sub->add_option("--p", st->ps, "psd: side p of the PSD cone, p >= 2 (default 16,32,64,128)")->delimiter(',');
  sub->add_option("--convention", st->convention, "rankin: ambient | raw | both")
      ->capture_default_str();
  cli::add_common(sub, st->common);
  sub->callback([sub, st]() { run(sub, *st); });
});

}  // namespace
