// `hebb bench`: times the whitened construction (spec §2.3) phase by phase at capacity scale and
// compares its FLOP rate with this machine's dense DGEMM rate measured in the same run.
// Validates the phased pipeline against build_mlp on a small problem before timing.
#include <fmt/format.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "cli/app.hpp"
#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "core/threads.hpp"
#include "io/output_file.hpp"
#include "margin/capacity_probe.hpp"
#include "margin/margins.hpp"
#include "mlp/constructions.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using Clock = std::chrono::steady_clock;

struct BenchState {
  cli::CommonOptions common;
  std::int64_t dim = 128, facts = 16384, width = 4096, gemm_n = 2048, repeats = 3;
  double ridge = 1e-6;
};

double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double peak_rss_gib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss in KiB on Linux
}

// Process CPU seconds (all threads): on a shared machine wall time includes time the process
// was not running; rates per CPU-second compare phases and DGEMM under the same contention.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Phase {
  std::string name;
  double flops = 0, seconds = 0, cpu_seconds = 0;
};

struct Timer {
  Clock::time_point wall = Clock::now();
  double cpu = cpu_now();
  void reset() { wall = Clock::now(), cpu = cpu_now(); }
  Phase phase(const std::string& name, double flops) const { return {name, flops, secs(wall), cpu_now() - cpu}; }
};

// Whitened build + evaluation, one timed phase per dominant product. Returns W and the phases.
struct PhasedRun {
  Eigen::MatrixXd W;
  std::vector<Phase> phases;
  double accuracy = 0, min_margin = 0;
  std::string solver;
};

PhasedRun run_phased(const mlp::FactSet& fs, std::int64_t m, std::uint64_t seed, double ridge) {
  PhasedRun r;
  const double F = static_cast<double>(fs.F()), d = static_cast<double>(fs.d()), M = static_cast<double>(m),
               P = static_cast<double>(fs.P());
  Timer t;
  const auto fmap = mlp::BilinearFeatureMap::random(m, fs.d(), seed, true);
  const Eigen::MatrixXd C = fs.targets();
  r.phases.push_back(t.phase("draw A0,A1 (Philox)", 0));
  t.reset();
  const Eigen::MatrixXd phi = fmap.apply(fs.keys);
  r.phases.push_back(t.phase("features Phi (2 GEMM F x d x m)", 4 * F * M * d + 2 * F * M));
  // The readout is the library's own mlp::whitened_readout (no copy here), timed as one phase:
  // primal Gram ΦᵀΦ + Φᵀ C_f + Cholesky/solve, or dual Gram ΦΦᵀ + solve + Zᵀ Φ.
  const bool dual = m > fs.F();
  t.reset();
  mlp::WhitenedReadout wr = mlp::whitened_readout(phi, C, ridge);
  const double readout_flops = dual ? F * F * M + F * F * F / 3 + 2 * F * F * d + 2 * F * M * d
                                    : F * M * M + 2 * F * M * d + M * M * M / 3 + 2 * M * M * d;
  r.phases.push_back(t.phase(dual ? "mlp::whitened_readout (dual)"
                                  : "mlp::whitened_readout (primal)",
                             readout_flops));
  r.solver = std::string(dual ? "dual " : "primal ") + wr.solver;
  r.W = std::move(wr.W);
  // Evaluation: outputs W g(k_i) (features already formed: one GEMM), then the scores.
  t.reset();
  Eigen::MatrixXd Y(fs.F(), fs.d());
  Y.noalias() = phi * r.W.transpose();
  r.phases.push_back(t.phase("outputs Phi W^T (GEMM)", 2 * F * M * d));
  t.reset();
  const auto res = margin::margins_from_outputs(Y, fs.values, fs.map, margin::MarginConvention::normalized_output);
  r.phases.push_back(t.phase("scores Y V^T (tiled GEMM) + scan", 2 * F * P * d));
  r.accuracy = res.accuracy;
  r.min_margin = res.min_margin;
  return r;
}

double median(std::vector<double> s) {
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

// Median DGEMM rate per wall second (returned) and per CPU second (*cpu_rate).
double dgemm_rate(std::int64_t n, std::int64_t repeats, std::vector<double>* samples, double* cpu_rate) {
  const Eigen::MatrixXd a = rng::normal_matrix(n, n, 1, rng::kUser), b = rng::normal_matrix(n, n, 2, rng::kUser);
  Eigen::MatrixXd c(n, n);
  c.noalias() = a * b;  // warm-up
  std::vector<double> cpu;
  for (std::int64_t k = 0; k < repeats; ++k) {
    const Timer t;
    c.noalias() = a * b;
    const Phase p = t.phase("dgemm", 2.0 * double(n) * double(n) * double(n));
    samples->push_back(p.flops / p.seconds);
    cpu.push_back(p.flops / p.cpu_seconds);
  }
  *cpu_rate = median(cpu);
  return median(*samples);
}

void run_bench(CLI::App* sub, BenchState& st) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  require(st.dim >= 1 && st.facts >= 2 && st.width >= 1, "--dim, --width must be >= 1 and --facts >= 2");
  require(st.gemm_n >= 64 && st.gemm_n <= 65536, "--gemm-n must be in [64, 65536] (got {})", st.gemm_n);
  require(st.repeats >= 1 && st.repeats <= 1000, "--repeats must be in [1, 1000] (got {})", st.repeats);
  require(std::isfinite(st.ridge) && st.ridge > 0, "--ridge must be a finite number > 0 (got {:g})", st.ridge);
  {  // before the validation step: the benchmark's problem (float64 build + evaluation) and the DGEMM's matrices
    mlp::MethodSpec whitened;
    whitened.kind = mlp::MethodKind::whitened;
    const double n = static_cast<double>(st.gemm_n);
    const double problem = margin::cpu_probe_bytes(whitened, st.facts, st.facts, st.dim, st.width);
    sweep::require_memory(std::max(problem, 24 * n * n),
                          fmt::format("hebb bench with --dim {}, --facts {}, --width {}, --gemm-n {}", st.dim,
                                      st.facts, st.width, st.gemm_n));
  }
  if (!st.common.out.empty()) io::check_output_path(st.common.out);

  // 1. Validate the phased pipeline against the library construction on a small problem.
  {
    mlp::FactSetSpec s;
    s.dim = 16;
    s.facts = 256;
    s.tied = true;
    s.map = "permutation";
    s.seed = 7;
    const auto fs = mlp::make_factset(s);
    const auto ref = mlp::build_mlp(mlp::parse_method("hebbian:whitened"), fs, 64, 7);
    const auto ph = run_phased(fs, 64, 7, 1e-6);
    const double err = (ph.W - ref.B).norm() / ref.B.norm();
    require(err < 1e-12, "bench validation failed: phased readout differs from build_mlp by {:.2e}", err);
    fmt::print(stderr, "validation: phased whitened readout == build_mlp (rel. diff {:.1e})\n", err);
  }
  // 2. Reference DGEMM rate in this run.
  std::vector<double> samples;
  double gemm_cpu = 0;
  const double gemm = dgemm_rate(st.gemm_n, st.repeats, &samples, &gemm_cpu);
  // 3. The construction at full size.
  mlp::FactSetSpec s;
  s.dim = st.dim;
  s.facts = st.facts;
  s.tied = true;
  s.map = "permutation";
  s.seed = st.common.seed;
  auto t = Clock::now();
  const auto fs = mlp::make_factset(s);
  const double factset_s = secs(t);
  t = Clock::now();
  const PhasedRun run = run_phased(fs, st.width, st.common.seed, st.ridge);
  const double total_s = secs(t);

  fmt::print("hebb bench: hebbian:whitened d={} F={} m={} ({} threads, {})\n", st.dim, st.facts, st.width,
             max_threads(), run.solver);
  fmt::print("DGEMM {}x{}x{}: median {:.2f} GFLOP/s over {} repeats\n", st.gemm_n, st.gemm_n, st.gemm_n, gemm / 1e9,
             st.repeats);
  fmt::print("  (per CPU-second: {:.2f} GFLOP/cpu-s; the 'cpu' columns below use CPU time, robust to other load)\n",
             gemm_cpu / 1e9);
  fmt::print("{:<36} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}\n", "phase", "GFLOP", "wall s", "cpu s", "GFLOP/s",
             "of GEMM", "cpu frac");
  double flops = 0, dominant_s = 0, dominant_cpu = 0;
  for (const auto& p : run.phases) {
    const double rate = p.flops > 0 ? p.flops / p.seconds : 0;
    const double cpu_rate = p.flops > 0 ? p.flops / p.cpu_seconds : 0;
    fmt::print("{:<36} {:>9.2f} {:>9.3f} {:>9.3f} {:>9.2f} {:>8.2f} {:>8.2f}\n", p.name, p.flops / 1e9, p.seconds,
               p.cpu_seconds, rate / 1e9, rate / gemm, cpu_rate / gemm_cpu);
    if (p.flops > 0) flops += p.flops, dominant_s += p.seconds, dominant_cpu += p.cpu_seconds;
  }
  const double fraction = flops / dominant_s / gemm;
  const double cpu_fraction = flops / dominant_cpu / gemm_cpu;
  const double rss = peak_rss_gib();
  fmt::print("dominant products: {:.1f} GFLOP in {:.2f} s = {:.2f} GFLOP/s = {:.2f} of DGEMM rate (wall); "
             "{:.2f} by CPU time\n",
             flops / 1e9, dominant_s, flops / dominant_s / 1e9, fraction, cpu_fraction);
  fmt::print("fact set {:.2f} s, construction+evaluation {:.2f} s wall; accuracy {:.6f}, min margin {:.4g}; "
             "peak RSS {:.2f} GiB\n",
             factset_s, total_s, run.accuracy, run.min_margin, rss);

  if (st.common.out.empty()) return;
  io::OutputFile out(st.common.out, prep.ctx);
  {
    auto g = out.root().child("phases");
    std::vector<std::string> names;
    std::vector<double> fl, sec;
    for (const auto& p : run.phases) names.push_back(p.name), fl.push_back(p.flops), sec.push_back(p.seconds);
    g.write("name", names);
    g.write("flops", std::span<const double>(fl));
    g.write("seconds", std::span<const double>(sec));
    std::vector<double> cs;
    for (const auto& p : run.phases) cs.push_back(p.cpu_seconds);
    g.write("cpu_seconds", std::span<const double>(cs));
    g.write("dgemm_samples", std::span<const double>(samples));
  }
  io::Row row;
  row.set("method", "hebbian:whitened")
      .set("dim", st.dim)
      .set("facts", st.facts)
      .set("width", st.width)
      .set("threads", max_threads())
      .set("dgemm_gflops", gemm / 1e9)
      .set("construction_gflops", flops / dominant_s / 1e9)
      .set("fraction_of_gemm", fraction)
      .set("fraction_of_gemm_cpu_time", cpu_fraction)
      .set("dgemm_gflops_per_cpu_s", gemm_cpu / 1e9)
      .set("total_s", total_s)
      .set("peak_rss_gib", rss)
      .set("accuracy", run.accuracy)
      .set("min_margin", run.min_margin)
      .set("solver", run.solver)
      .set("path", "cpu");
  io::Table tab;
  tab.append(row);
  out.write_summary(tab);
  out.commit();
  fmt::print("wrote {}\n", st.common.out);
}

memcap::cli::Register reg("hebb", 90, [](CLI::App& tool) {
  auto* sub = tool.add_subcommand(
      "bench",
      "Benchmark: build and evaluate hebbian:whitened (tied table, random permutation map) and report the\n"
      "FLOP rate of each dominant product (features, Gram, readout, Cholesky, outputs, scores) as a fraction\n"
      "of a DGEMM measured in the same run (median of --repeats), wall time per phase and peak RSS.\n"
      "Defaults are the issue-2 acceptance size d=128, F=16384, m=4096 (about 1.5 GiB, 0.4 TFLOP).\n"
      "Example: hebb bench --dim 64 --facts 4096 --width 1024");
  auto st = std::make_shared<BenchState>();
  cli::add_common(sub, st->common);
  sub->add_option("--dim,-d", st->dim, "Embedding dimension d")->capture_default_str();
  sub->add_option("--facts,-F", st->facts, "Number of facts F")->capture_default_str();
  sub->add_option("--width,-m", st->width, "Hidden units m (primal solve when m <= F)")->capture_default_str();
  sub->add_option("--ridge", st->ridge, "Ridge lambda of the whitened readout")->capture_default_str();
  sub->add_option("--gemm-n", st->gemm_n, "Size n of the reference n x n x n DGEMM")->capture_default_str();
  sub->add_option("--repeats", st->repeats, "Timed DGEMM repeats (median reported), after one warm-up")
      ->capture_default_str();
  sub->callback([sub, st] { run_bench(sub, *st); });
});

}  // namespace
