// `kata dict`: build a key dictionary (random, greedy line packing, realified MUB, DeVore), measure its
// coherence in raw space and in PSD (M1) space, optionally in other feature spaces, and write it to
// HDF5 (/dictionary/vectors, parameters, /summary). --bench times build + coherence and peak memory.
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/timing.hpp"
#include "io/output_file.hpp"
#include "kata/bounds.hpp"
#include "kata/dictionary.hpp"
#include "kata/finite_field.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using namespace memcap::kata;
using Clock = std::chrono::steady_clock;

struct DictState {
  cli::CommonOptions common;
  DictSpec spec;
  std::string method = "auto";
  std::int64_t block = 4096;
  std::vector<std::string> maps;
  bool no_vectors = false;
  bool bench = false;
};

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux: kilobytes
}

std::string poly_string(const GaloisField& F) {
  std::string s = "[";
  for (std::size_t i = 0; i < F.modulus().size(); ++i) s += fmt::format("{}{}", i ? "," : "", F.modulus()[i]);
  return s + "]";
}

// Bench validation of the symmetry computation: the blocked GEMM coherence of the first rows (every
// cross-basis class appears among them) and a sample of random pairs must not exceed it, and the
// GEMM value on the prefix must reach it.
void validate_against_gemm(const Eigen::MatrixXd& V, double coh, std::uint64_t seed) {
  const std::int64_t n = std::min<std::int64_t>(V.rows(), 4096);
  const double prefix = coherence(V.topRows(n), 2048);
  double sampled = 0;
  for (std::int64_t t = 0; t < 200000; ++t) {
    const auto i = static_cast<std::int64_t>(rng::below(seed, rng::kUser + 7, 2 * t, V.rows()));
    const auto j = static_cast<std::int64_t>(rng::below(seed, rng::kUser + 7, 2 * t + 1, V.rows()));
    if (i != j) sampled = std::max(sampled, std::abs(V.row(i).dot(V.row(j))));
  }
  fmt::print(stderr, "  validation: GEMM coherence of the first {} rows = {:.15f}; max over 2e5 random pairs = {:.15f}\n",
             n, prefix, sampled);
  if (prefix > coh + 1e-12 || sampled > coh + 1e-12)
    throw NumericError(fmt::format("symmetry coherence {} is below a directly computed inner product", coh));
}

void run(CLI::App* sub, DictState& st) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  require(prep.ctx.device.device == Device::cpu || st.common.device != "cuda",
          "kata dict has only a CPU path; use --device cpu or auto");
  DictSpec sp = st.spec;
  sp.seed = st.common.seed;
  validate_dict_spec(sp);
  if ((sp.type == "mub" || sp.type == "devore") && sub->count("--dim") > 0)
    require(sp.dim == dictionary_dim(sp),
            "--dim {} disagrees with --type {}: its vectors live in R^{} ({}); drop --dim", sp.dim, sp.type,
            dictionary_dim(sp), sp.type == "mub" ? "2s" : "s^2");
  sweep::require_distinct(st.maps, "--map");
  require(st.method == "auto" || st.method == "gram" || st.method == "symmetry" || st.method == "none",
          "--coherence must be auto, gram, symmetry or none (got '{}')", st.method);
  const bool structured = sp.type == "mub" || sp.type == "devore";
  require(st.method != "symmetry" || structured, "--coherence symmetry applies only to mub and devore dictionaries");
  require(st.block >= 1, "--block must be >= 1 (got {})", st.block);
  require(st.bench || !st.common.out.empty(), "--out FILE.h5 is required (or --bench to time without writing)");
  if (!st.common.out.empty()) io::check_output_path(st.common.out);
  std::vector<FeatureMap> maps;
  const std::int64_t dim = dictionary_dim(sp);
  for (const auto& m : st.maps) maps.push_back(FeatureMap::parse(m, dim));

  const auto t_build = Clock::now();
  const Eigen::MatrixXd V = make_dictionary(sp);
  const double build_s = seconds_since(t_build);
  fmt::print(stderr, "kata dict: built {} x {} ({}) in {:.2f} s\n", V.rows(), V.cols(), sp.type, build_s);
  require(V.rows() >= 2, "the dictionary has {} vector(s); coherence needs at least 2 (raise --count or lower a)",
          V.rows());

  std::string method = st.method == "auto" ? (structured ? "symmetry" : "gram") : st.method;
  const auto t_coh = Clock::now();
  double coh = NAN;
  std::string details;
  if (method == "symmetry" && sp.type == "mub") {
    const MubCoherence mc = mub_coherence(sp.field_size);
    coh = mc.realified;
    details = fmt::format("orthogonality error {:.2e}, max ||<u,v>|^2 - 1/s| {:.2e}, vs standard basis {:.15f}",
                          mc.max_orthogonality_error, mc.max_unbiased_error, mc.realified_vs_standard);
  } else if (method == "symmetry") {
    const DevoreCoherence dc = devore_coherence(sp.field_size, sp.degree);
    coh = dc.value;
    details = fmt::format("overlap counts 0..{} ({} distinct)", dc.overlap_counts.back(), dc.overlap_counts.size());
  } else if (method == "gram") {
    coh = coherence(V, st.block);
  }
  const double coh_s = seconds_since(t_coh);
  const bool have_coh = method != "none";
  // PSD (M1) coherence of unit rows is exactly the raw coherence squared: <uu^T, vv^T>_F = <u,v>².
  const double psd = have_coh ? coh * coh : NAN;
  std::vector<double> fcoh;
  for (const auto& m : maps) fcoh.push_back(feature_coherence(V, m, std::min<std::int64_t>(st.block, 2048)));
  const double welch = welch_mu(V.cols(), V.rows());

  fmt::print("{:<8} {:>10} {:>8} {:>18} {:>14} {:>12}\n", "type", "count", "dim", "coherence", "psd_coherence",
             "welch_mu");
  fmt::print("{:<8} {:>10} {:>8} {:>18} {:>14} {:>12.6f}\n", sp.type, V.rows(), V.cols(),
             have_coh ? fmt::format("{:.15f}", coh) : "-", have_coh ? fmt::format("{:.8g}", psd) : "-", welch);
  for (std::size_t i = 0; i < maps.size(); ++i)
    fmt::print("  feature coherence under {:<20} {:.10g}\n", maps[i].spec(), fcoh[i]);
  if (!details.empty()) fmt::print(stderr, "  {}\n", details);

  if (st.bench) {
    fmt::print("bench: build {:.3f} s, coherence ({}) {:.3f} s, total {:.3f} s, peak RSS {:.0f} MB\n", build_s,
               method, coh_s, build_s + coh_s, peak_rss_mb());
    if (method == "symmetry" && sp.type == "mub") {
      const auto t_val = Clock::now();
      validate_against_gemm(V, coh, sp.seed);
      fmt::print("bench: validation {:.3f} s (not part of the build + coherence time)\n", seconds_since(t_val));
    }
  }
  if (st.common.out.empty()) return;

  io::OutputFile out(st.common.out, prep.ctx);
  h5::Group g = out.root().child("dictionary");
  if (!st.no_vectors) g.write("vectors", V);
  g.attr("type", sp.type);
  if (sp.type == "mub") {
    const auto ids = mub_basis_ids(sp.field_size);
    g.write("basis_id", std::span<const std::int64_t>(ids));
    g.attr("field_poly", poly_string(GaloisField(sp.field_size)));
  } else if (sp.type == "devore") {
    const auto sup = devore_support(sp.field_size, sp.degree);
    // flattened row-major [count x s]: column of the nonzero of row i at x is indices[i*s + x]
    g.write("indices", std::span<const std::int64_t>(sup));
    g.attr("field_poly", poly_string(GaloisField(sp.field_size)));
  }
  const nlohmann::json params = {{"type", sp.type},          {"dim", V.cols()},
                                 {"count", V.rows()},        {"field_size", sp.field_size},
                                 {"degree", sp.degree},      {"max_coherence", sp.max_coherence},
                                 {"max_fail", sp.max_fail},  {"seed", sp.seed},
                                 {"coherence_method", method},
                                 {"layout", sp.type == "mub" ? "rows: standard basis, then bases a=0..s-1 x b=0..s-1; "
                                                                "cols: real parts then imaginary parts"
                                            : sp.type == "devore" ? "row sum a_i s^i; coordinate x*s + P(x)"
                                                                  : "rows = unit vectors"}};
  g.attr("params_json", params.dump());
  if (!maps.empty()) {
    h5::Group f = out.root().child("feature_coherence");
    std::vector<std::string> names;
    for (const auto& m : maps) names.push_back(m.spec());
    f.write("map", names);
    f.write("value", std::span<const double>(fcoh));
  }
  io::Table t;
  io::Row row;
  row.set("type", sp.type)
      .set("count", static_cast<std::int64_t>(V.rows()))
      .set("dim", static_cast<std::int64_t>(V.cols()))
      .set("coherence", coh)
      .set("psd_coherence", psd)
      .set("welch_mu", welch)
      .set("field_size", sp.field_size)
      .set("degree", sp.degree)
      .set("seed", static_cast<std::int64_t>(sp.seed))
      .set("coherence_method", method)
      .set("compute_path", "cpu")
      .set("build_s", build_s)
      .set("coherence_s", coh_s);
  t.append(row);
  out.write_summary(t);
  out.commit();
  fmt::print(stderr, "kata dict: wrote {}\n", st.common.out);
}

memcap::cli::Register reg("kata", 10, [](CLI::App& tool) {
  auto st = std::make_shared<DictState>();
  auto* sub = tool.add_subcommand(
      "dict",
      "Build a key dictionary of unit vectors and measure its coherence (spec kata.md §3.4–3.7).\n"
      "  random  --dim D --count N          i.i.d. uniform on S^{D-1} (seeded)\n"
      "  greedy  --dim D --max-coherence a  accept Gaussian directions with max|<u,u_i>| < a until --max-fail\n"
      "                                     consecutive rejections (or --count accepted); PSD interference a^2\n"
      "  mub     --field-size s             s(s+1) realified mutually unbiased bases in R^{2s}, s a prime power;\n"
      "                                     coherence 1/sqrt(s), PSD coherence 1/s\n"
      "  devore  --field-size s --degree r  s^{r+1} nonnegative vectors in R^{s^2} (0 <= r < s); coherence r/s\n"
      "Coherence: max_{i!=j}|<x_i,x_j>| by blocked GEMM (no full Gram), or for mub/devore exactly from the\n"
      "construction's symmetry (--coherence auto). psd_coherence = coherence^2 (the M1 feature space).\n"
      "Writes /dictionary/vectors [count x dim] (float64); mub: /dictionary/basis_id; devore: /dictionary/indices\n"
      "(count*s int64, row-major [count x s]: the nonzero columns); attributes type, field_poly, params_json;\n"
      "/summary columns count, dim, coherence, psd_coherence, welch_mu, coherence_method, build_s, coherence_s;\n"
      "/feature_coherence (map, value) for --map.\n"
      "Example: kata dict --type mub --field-size 32 --out mub32.h5\n"
      "Benchmark: kata dict --type mub --field-size 401 --bench   (time + peak memory, no file)");
  sub->add_option("--type", st->spec.type, "random | greedy | mub | devore")
      ->required();
  sub->add_option("--dim", st->spec.dim, "random/greedy: ambient dimension D (mub/devore: implied, 2s / s^2)")
      ->capture_default_str();
  sub->add_option("--count", st->spec.count, "random: number of vectors; greedy: stop after this many (0 = no cap)")
      ->capture_default_str();
  sub->add_option("--field-size,-s", st->spec.field_size, "mub/devore: field size s (a prime power)")
      ->capture_default_str();
  sub->add_option("--degree,-r", st->spec.degree, "devore: polynomial degree r (0 <= r < s)")->capture_default_str();
  sub->add_option("--max-coherence", st->spec.max_coherence,
                  "greedy: acceptance threshold a on |<u,u_i>| (raw); the PSD interference is a^2")
      ->capture_default_str();
  sub->add_option("--max-fail", st->spec.max_fail, "greedy: stop after this many consecutive rejections (at most 1e7)")
      ->capture_default_str();
  sub->add_option("--coherence", st->method,
                  "auto (symmetry for mub/devore, gram otherwise), gram (blocked GEMM over all pairs), symmetry, none")
      ->capture_default_str();
  sub->add_option("--block", st->block, "rows per GEMM block of the coherence computation")->capture_default_str();
  sub->add_option("--map", st->maps,
                  "also report the coherence in this feature map's space (repeatable; e.g. orthant:eps=0, m2, "
                  "lorentz-ray, softmax:tau=0.125); blocked closed-form kernels")
      ->delimiter(',');
  sub->add_flag("--no-vectors", st->no_vectors, "do not store /dictionary/vectors (large dictionaries)");
  sub->add_flag("--bench", st->bench,
                "print build and coherence times and peak memory (RSS); for mub also validate the symmetry value "
                "against direct inner products; --out becomes optional");
  cli::add_common(sub, st->common);
  sub->callback([sub, st]() { run(sub, *st); });
});

}  // namespace
