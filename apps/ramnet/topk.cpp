// `ramnet topk`: experiment E5 (spec ramnet.md §3): what Top-K truncation keeps — retained read and write
// mass, |TopK(r) ∩ TopK(w)|, the fraction of pairs whose truncated kernel is 0, and ΔJS (full → Top-K)
// against the softmax teacher — over generators × dp × U × K × β on the sweep engine. With --bench: the
// exact K-best decoder's throughput against the dense enumerate-and-select baseline (validated equal first).
#include <fmt/format.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "cli/app.hpp"
#include "options.hpp"
#include "core/error.hpp"
#include "core/threads.hpp"
#include "core/timing.hpp"
#include "io/output_file.hpp"
#include "memory_axes.hpp"
#include "ramnet/attention.hpp"
#include "ramnet/topk.hpp"
#include "sweep/sweep.hpp"

namespace {

using namespace memcap;
using namespace memcap::ramnet;

struct TopkState {
  cli::CommonOptions common;
  sweep::Options sweep;
  app::ModelAxes axes;
  std::vector<std::string> generators = {"torus:rho=1"};
  std::int64_t T = 64, n = 64, trials = 20;
  int dv = 16;
  bool bench = false;
  std::int64_t bench_queries = 1'000'000, bench_dense = 200;
  int repeats = 5;
};

std::vector<Generator> parse_generators(const std::vector<std::string>& pieces, std::vector<std::string>& shown) {
  const auto out = app::parse_generators(app::join_spec_pieces(pieces), shown);
  require(!out.empty(), "--generators needs at least one value");
  sweep::require_distinct(shown, "--generators");
  return out;
}

// ---- benchmark ----------------------------------------------------------------------------------

struct BenchRow {
  std::string method;
  int threads = 1;
  std::int64_t queries = 0;
  double median_s = 0, qps = 0;
  double cpu_s = 0;  // process CPU time (all threads) of the median repeat: on a shared machine cpu_s/median_s
                     // says how many cores the run actually got
};

double process_cpu_seconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-6 * static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

// Median wall time of `repeats` runs of f and the CPU time of that same run.
template <class F>
std::pair<double, double> time_median(int repeats, F&& f) {
  std::vector<std::pair<double, double>> ts;
  for (int r = 0; r < repeats; ++r) {
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ts.emplace_back(seconds_since(t0), process_cpu_seconds() - c0);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

void run_bench(CLI::App* sub, TopkState& st) {
  app::require_cpu_only(st.common, "ramnet topk --bench (it times the CPU decoder)");
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  require(st.axes.dps.size() == 1 && st.axes.Us.size() == 1 && st.axes.topks.size() == 1,
          "--bench takes one --dp, one --U and one --topk");
  require(st.axes.betas.size() <= 1 && st.axes.beta_factors.size() <= 1, "--bench takes at most one beta");
  require(st.bench_queries >= 1 && st.bench_queries <= 100'000'000, "--bench-queries {} must be in [1, 1e8]",
          st.bench_queries);
  require(st.bench_dense >= 1 && st.bench_dense <= 100'000, "--bench-dense {} must be in [1, 1e5]", st.bench_dense);
  require(st.repeats >= 1 && st.repeats <= 1000, "--repeats {} must be in [1, 1000]", st.repeats);
  const bool write = sub->count("--out") > 0;  // --bench writes a file only when asked to
  if (write) io::check_output_path(st.common.out);
  const auto pts = app::expand_model_axes(st.axes, app::ModelOptions{}, true);
  const Params p = pts[0].o.params;
  const std::int64_t K = pts[0].o.topk;
  require(K >= 1, "--bench needs --topk >= 1");
  require_dense(p, 16.0, "the dense Top-K baseline of --bench");
  std::vector<std::string> shown;
  const Generator g = parse_generators(st.generators, shown)[0];
  const int dp = p.dp, U = p.U;
  const std::int64_t A = address_count(p), tw = static_cast<std::int64_t>(U) * dp;
  const std::int64_t distinct = std::min<std::int64_t>(st.bench_queries, 65536);
  sweep::require_memory(static_cast<double>(distinct) * (8.0 * static_cast<double>(tw) + 16.0 * static_cast<double>(K)) +
                            static_cast<double>(A) * 16.0,
                        "the Top-K benchmark (tables, outputs, dense baseline)");
  const std::int64_t passes = (st.bench_queries + distinct - 1) / distinct, total = passes * distinct;
  const AttnSample smp = generate(g, dp, U, 1, distinct, 1, st.common.seed, 0);
  const CodebookSet cb = make_codebooks(CodebookKind::circular, dp, U, g, 0);
  std::vector<double> tables(static_cast<std::size_t>(distinct * tw));
  {
    const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> Qr = smp.Q;
    for (std::int64_t i = 0; i < distinct; ++i) factor_rows(cb, p.beta_r, Qr.row(i).data(), tables.data() + i * tw);
  }
  const int threads = max_threads();
  fmt::print("Top-K benchmark: dp={} U={} ({} addresses) K={} beta_r={:.6g}, queries from {}, {} thread(s) available\n",
             dp, U, A, K, p.beta_r, g.spec(), threads);

  // 1. Validate: heap decoders (both searches) == dense reference on the first queries.
  const std::int64_t nval = std::min(st.bench_dense, distinct);
  {
    DenseTopK dense(dp, U, K);
    TopKDecoder tree(dp, U, K, TopKSearch::tree), visited(dp, U, K, TopKSearch::visited);
    std::vector<std::int64_t> f0(K), f1(K);
    std::vector<double> l0(K), l1(K);
    for (std::int64_t i = 0; i < nval; ++i) {
      dense.decode(tables.data() + i * tw, f0.data(), l0.data());
      for (TopKDecoder* d : {&tree, &visited}) {
        d->decode(tables.data() + i * tw, f1.data(), l1.data());
        if (f0 != f1 || l0 != l1)
          throw NumericError(fmt::format("validation failed: the {} heap decoder differs from the dense reference at "
                                         "query {}",
                                         topk_search_name(d->search()), i));
      }
    }
    fmt::print("validated: {} queries, heap (tree and visited) == dense enumerate-and-select (flat indices and "
               "log-probabilities, bit for bit)\n",
               nval);
  }

  // 2. Time.
  std::vector<BenchRow> rows;
  std::vector<std::int64_t> flat(static_cast<std::size_t>(distinct * K));
  std::vector<double> lp(flat.size());
  {
    DenseTopK dense(dp, U, K);
    const auto [w, c] = time_median(st.repeats, [&] {
      for (std::int64_t i = 0; i < nval; ++i) dense.decode(tables.data() + i * tw, flat.data() + i * K, lp.data() + i * K);
    });
    rows.push_back({"dense enumerate+select", 1, nval, w, static_cast<double>(nval) / w, c});
  }
  std::vector<int> thread_counts = {1};
  if (threads > 1) thread_counts.push_back(threads);
  for (TopKSearch search : {TopKSearch::tree, TopKSearch::visited})
    for (int th : thread_counts) {
      omp_set_num_threads(th);
      topk_batch(dp, U, K, tables.data(), distinct, flat.data(), lp.data(), search);  // warm-up
      const auto [w, c] = time_median(st.repeats, [&] {
        for (std::int64_t pass = 0; pass < passes; ++pass)
          topk_batch(dp, U, K, tables.data(), distinct, flat.data(), lp.data(), search);
      });
      rows.push_back({fmt::format("heap {}", topk_search_name(search)), th, total, w, static_cast<double>(total) / w, c});
    }
  {  // end to end: factor tables from the 2U vectors, then the tree decoder
    omp_set_num_threads(threads);
    const auto [w, c] = time_median(st.repeats, [&] {
      const TopKLists l = topk_of_vectors(p, cb.factor[0], p.beta_r, smp.Q, K);
      if (l.flat.empty()) throw NumericError("no output");
    });
    rows.push_back({"tables + heap tree", threads, distinct, w, static_cast<double>(distinct) / w, c});
  }
  const double dense_qps = rows[0].qps;
  fmt::print("{:<24} {:>7} {:>10} {:>10} {:>12} {:>9} {:>10} {:>14}\n", "method", "threads", "queries", "median_s",
             "queries/s", "vs dense", "cores got", "queries/cpu-s");
  for (const auto& r : rows)
    fmt::print("{:<24} {:>7} {:>10} {:>10.4g} {:>12.4g} {:>8.1f}x {:>10.2f} {:>14.4g}\n", r.method, r.threads, r.queries,
               r.median_s, r.qps, r.qps / dense_qps, r.cpu_s / r.median_s, static_cast<double>(r.queries) / r.cpu_s);
  double best = 0, per_core = 0;
  for (const auto& r : rows)
    if (r.method == "heap tree") {
      best = std::max(best, r.qps);
      per_core = std::max(per_core, static_cast<double>(r.queries) / r.cpu_s);
    }
  fmt::print("acceptance (>= 1e6 queries/s, heap tree): best measured {:.3g} queries/s: {}; {:.3g} queries per CPU-second, "
             "so {} free core(s) would give {:.3g}/s\n",
             best, best >= 1e6 ? "met" : "NOT met", per_core, threads, per_core * threads);
  if (!write) return;
  io::OutputFile out(st.common.out, prep.ctx);
  io::Table t;
  for (const auto& r : rows) {
    io::Row row;
    row.set("method", r.method).set("threads", r.threads).set("queries", r.queries).set("median_s", r.median_s);
    row.set("queries_per_s", r.qps).set("speedup_vs_dense", r.qps / dense_qps).set("cpu_s", r.cpu_s);
    t.append(row);
  }
  out.write_summary(t);
  out.root().attr("dp", dp);
  out.root().attr("U", U);
  out.root().attr("topk", K);
  out.root().attr("beta_r", p.beta_r);
  out.root().attr("validated_queries", nval);
  out.root().attr("generator", g.spec());
  out.commit();
  fmt::print(stderr, "ramnet topk: wrote {}\n", st.common.out);
}

// ---- E5 sweep -----------------------------------------------------------------------------------

void run_sweep(CLI::App* sub, TopkState& st) {
  app::require_cpu_only(st.common, "ramnet topk");
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  std::vector<std::string> shown;
  const auto gens = parse_generators(st.generators, shown);
  const auto points = app::expand_model_axes(st.axes, app::ModelOptions{}, true);
  for (const auto& pt : points) require(pt.o.topk >= 1, "--topk must be >= 1 for the Top-K statistics (got 0)");
  sweep::job_count({{"generators", static_cast<std::int64_t>(gens.size())},
                    {"model points", static_cast<std::int64_t>(points.size())}});
  require(!st.common.out.empty(), "--out FILE.h5 is required");
  std::vector<AttnConfig> configs;
  sweep::Plan plan;
  plan.grid_axes = {"generator_id", "dp", "U", "topk", "beta_factor"};
  plan.grid_values = {"read_mass", "write_mass", "intersection", "zero_kernel_fraction", "delta_js"};
  for (std::size_t gi = 0; gi < gens.size(); ++gi)
    for (const auto& pt : points) {
      AttnConfig c;
      c.params = pt.o.params;
      c.tau = pt.o.tau_resolved;
      c.topk = pt.o.topk;
      c.gen = gens[gi];
      c.T = st.T;
      c.n = st.n;
      c.trials = st.trials;
      c.dv = st.dv;
      c.seed = st.common.seed;
      c.students = {"kappa", "topk"};
      validate(c);
      app::add_job(plan, st.common.seed, fmt::format("gen={}/{}", shown[gi], pt.key),
                   {{"generator", shown[gi]}, {"generator_id", gi}, {"beta_factor", pt.beta_factor}});
      configs.push_back(c);
    }
  auto print_header = app::print_once([] {
    fmt::print("{:<20} {:>3} {:>2} {:>5} {:>8} | {:>9} {:>9} {:>8} {:>8} | {:>9} {:>9} {:>9} {:>7}\n", "generator", "dp",
               "U", "K", "beta", "read_mass", "wrt_mass", "|cap|", "k^K=0", "JS full", "JS top-K", "dJS", "dead");
  });
  const int rc = sweep::run(plan, st.sweep, prep.ctx, st.common.out, [&](const sweep::Job& j) {
    print_header();
    const AttnConfig& c = configs[static_cast<std::size_t>(j.index)];
    const AttnResult r = run_attention(c);
    const StudentStats *full = r.find("kappa"), *tk = r.find("topk");
    sweep::JobOutput jo;
    io::Row& row = jo.row;
    app::set_generator_columns(row, j)
        .set("dp", c.params.dp)
        .set("U", c.params.U)
        .set("topk", c.topk)
        .set("addresses", address_count(c.params))
        .set("beta_factor", j.params["beta_factor"].get<double>())
        .set("beta_r", c.params.beta_r)
        .set("beta_w", c.params.beta_w)
        .set("tau", c.tau)
        .set("T", c.T)
        .set("queries", c.n)
        .set("trials", c.trials)
        .set("read_mass", r.read_mass)
        .set("write_mass", r.write_mass)
        .set("intersection", r.intersection)
        .set("zero_kernel_fraction", r.zero_kernel_fraction)
        .set("js_full", full->js)
        .set("js_topk", tk->js)
        .set("delta_js", tk->js - full->js)
        .set("nmse_full", full->nmse)
        .set("nmse_topk", tk->nmse)
        .set("dead_topk", tk->dead_rate);
    fmt::print("{:<20} {:>3} {:>2} {:>5} {:>8.4g} | {:>9.4f} {:>9.4f} {:>8.3f} {:>8.3f} | {:>9.4g} {:>9.4g} {:>9.4g} "
               "{:>7.3f}\n",
               c.gen.spec(), c.params.dp, c.params.U, c.topk, c.params.beta_r, r.read_mass, r.write_mass, r.intersection,
               r.zero_kernel_fraction, full->js, tk->js, tk->js - full->js, tk->dead_rate);
    return jo;
  });
  if (rc != 0) throw UserError("ramnet topk failed", rc);
}

memcap::cli::Register reg("ramnet", 45, [](CLI::App& tool) {
  auto st = std::make_shared<TopkState>();
  auto* sub = tool.add_subcommand(
      "topk",
      "Experiment E5 (spec ramnet.md §3): Top-K truncation (keep the K largest read and write probabilities, not\n"
      "renormalised). Per job (generator, dp, U, K, beta): mean retained read mass sum r^K over queries, retained\n"
      "write mass over keys, mean |TopK(r) cap TopK(w)| and the fraction of (query, key) pairs with kappa_A^K = 0,\n"
      "JS of kappa-attention (full) and of the Top-K kernel against softmax(q.k/tau), their difference dJS, NMSE\n"
      "and the dead-query rate (all kappa^K = 0). K-best lists are exact (best-first search on the rank lattice,\n"
      "never enumerating dp^U; ties by smaller flat index). Default: torus rho = 1, dp = 4, U = 5, K = 32, beta =\n"
      "f beta* on 10^{k/10}, k = -3..5. Writes /summary and /grid/{read_mass,write_mass,intersection,\n"
      "zero_kernel_fraction,delta_js} over (generator_id, dp, U, topk, beta_factor).\n"
      "--bench: queries/s of the exact decoder (both searches, 1 and all threads) against the dense\n"
      "enumerate-and-select baseline in the same run, validated equal first (default dp = 8, U = 6, K = 32,\n"
      "beta = beta*); --out optional there.\n"
      "Examples: ramnet topk --beta 0.5,0.795,1,1.26,2,4 --out e5.h5;  ramnet topk --bench");
  cli::add_common(sub, st->common, "topk.h5");
  cli::add_sweep(sub, st->sweep);
  app::add_model_axes(sub, st->axes, "K (comma list, >= 1)", "10^{k/10}, k = -3..5; --bench: 1");
  app::add_generators_option(sub, st->generators);
  sub->add_option("--T", st->T, "Keys per trial")->capture_default_str();
  sub->add_option("--queries", st->n, "Queries per trial")->capture_default_str();
  sub->add_option("--trials", st->trials, "Independent trials")->capture_default_str();
  sub->add_option("--dv", st->dv, "Value dimension of the head NMSE")->capture_default_str();
  sub->add_flag("--bench", st->bench, "Benchmark the exact decoder instead of the E5 sweep");
  sub->add_option("--bench-queries", st->bench_queries, "--bench: decodes per timed repeat")->capture_default_str();
  sub->add_option("--bench-dense", st->bench_dense, "--bench: queries validated against and timed for the dense baseline")
      ->capture_default_str();
  sub->add_option("--repeats", st->repeats, "--bench: timed repeats (median reported)")->capture_default_str();
  sub->callback([sub, st]() {
    app::check_given_values(sub, st->axes);
    if (st->bench) {
      if (sub->count("--dp") == 0) st->axes.dps = {8};
      if (sub->count("--U") == 0) st->axes.Us = {6};
      run_bench(sub, *st);
      return;
    }
    if (st->axes.betas.empty() && st->axes.beta_factors.empty() && st->axes.beta_r == 0 && st->axes.beta_w == 0)
      st->axes.beta_factors = app::default_beta_factor_grid();
    run_sweep(sub, *st);
  });
});

}  // namespace
