// `ramnet attn`: experiments E2 and E3 (spec ramnet.md §3): a softmax teacher softmax(q·k/τ) against the
// address-overlap students (κ_A, κ_∞, Top-K kernel, GSU standard / mass-aware induced weights, hard-write VQ)
// over generators × codebooks × dp × U × K × β, on the sweep engine. The finalizer divides every student's
// JS and NMSE by its value at β = β* (f = 1) of the same (generator, codebook, dp, U, K): the E2 curves.
// --device cuda: the kappa student's log-kernel matrix comes from the GPU (attention_cuda.hpp), the rest
// runs on the CPU; /summary/path records "cpu" or "cuda:<ordinal>".
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "cli/app.hpp"
#include "options.hpp"
#include "core/error.hpp"
#include "io/grid.hpp"
#include "memory_axes.hpp"
#include "ramnet/attention.hpp"
#include "sweep/gpu_workers.hpp"
#include "sweep/sweep.hpp"
#ifdef MEMCAP_HAVE_CUDA
#include "ramnet/attention_cuda.hpp"
#endif

namespace {

using namespace memcap;
using namespace memcap::ramnet;

constexpr const char* kRelativeFinalizer = "ramnet-attn-relative";

struct AttnState {
  cli::CommonOptions common;
  sweep::Options sweep;
  app::ModelAxes axes;
  app::ModelOptions gate;  // --gamma --eps
  std::vector<std::string> generators = {"gauss:sigma=0.5", "gauss:sigma=1", "gauss:sigma=1.5"};
  std::vector<std::string> codebooks = {"circular"};
  std::vector<std::string> students = {"kappa", "kinf", "topk", "gsu-standard", "gsu-mass", "vq"};
  std::int64_t T = 64, n = 64, trials = 20;
  int dv = 16;
};

bool is_one(double f) { return std::abs(f - 1.0) < 1e-9; }

// /relative: every student's JS and NMSE over its value at f = 1 in the same (generator, codebook, dp, U, K).
void relative_finalizer(io::OutputFile& out, const io::Table& summary, const nlohmann::json&) {
  if (summary.rows() == 0 || !summary.find("beta_factor")) return;
  const auto gen = summary.strings("generator"), cb = summary.strings("codebook"), job = summary.strings("job");
  const auto gid = summary.numbers("generator_id"), cid = summary.numbers("codebook_id");
  const auto dp = summary.numbers("dp"), U = summary.numbers("U"), K = summary.numbers("topk"),
             f = summary.numbers("beta_factor"), br = summary.numbers("beta_r"), bw = summary.numbers("beta_w");
  std::vector<std::string> students;
  for (const auto& n : summary.names)
    if (n.rfind("nmse_", 0) == 0) students.push_back(n.substr(5));
  auto group = [&](std::size_t i) {
    return fmt::format("{}|{}|{}|{}|{}|{}", gen[i], cb[i], dp[i], U[i], K[i], br[i] == bw[i] ? 1 : 0);
  };
  std::map<std::string, std::size_t> ref;
  for (std::size_t i = 0; i < summary.rows(); ++i)
    if (is_one(f[i])) ref[group(i)] = i;
  io::Table rel;
  for (std::size_t i = 0; i < summary.rows(); ++i) {
    io::Row row;
    row.set("job", job[i]).set("generator", gen[i]).set("generator_id", gid[i]).set("codebook", cb[i]);
    row.set("codebook_id", cid[i]).set("dp", dp[i]).set("U", U[i]).set("topk", K[i]).set("beta_factor", f[i]);
    const auto it = ref.find(group(i));
    for (const auto& s : students)
      for (const char* q : {"js_", "nmse_"}) {
        const auto col = summary.numbers(q + s);
        const double v = it == ref.end() ? NAN : col[i] / col[it->second];
        row.set(std::string(q) + s + "_rel", v);
      }
    rel.append(row);
  }
  h5::Group g = out.root().child("relative");
  rel.write(g);
  g.attr("definition",
         "js_S_rel, nmse_S_rel: student S's JS / NMSE divided by its value at beta_factor = 1 (beta = beta*) of the "
         "same generator, codebook, dp, U, topk (NaN when that job is not in the file); spec ramnet.md §3 E2");
  std::vector<std::string> values;
  for (const auto& s : students) values.push_back("js_" + s + "_rel"), values.push_back("nmse_" + s + "_rel");
  io::write_grid(g, rel, {"generator_id", "codebook_id", "dp", "U", "topk", "beta_factor"}, values);
}

void print_relative(const std::string& path) {
  h5::File f = h5::File::open_read(path);
  if (!f.exists("relative")) return;
  const io::Table t = io::Table::read(f.open_group("relative"));
  if (!t.find("js_kappa_rel")) return;
  const auto gen = t.strings("generator"), cb = t.strings("codebook");
  const auto dp = t.numbers("dp"), U = t.numbers("U"), K = t.numbers("topk"), fac = t.numbers("beta_factor");
  const auto js = t.numbers("js_kappa_rel"), nm = t.numbers("nmse_kappa_rel");
  fmt::print("\nE2: kappa-attention JS and NMSE relative to beta = beta* (f = beta/beta*)\n");
  std::map<std::string, std::vector<std::size_t>> groups;
  std::vector<std::string> order;
  for (std::size_t i = 0; i < t.rows(); ++i) {
    const std::string g = fmt::format("{} codebook={} dp={} U={} K={}", gen[i], cb[i], dp[i], U[i], K[i]);
    if (!groups.count(g)) order.push_back(g);
    groups[g].push_back(i);
  }
  for (const auto& g : order) {
    auto idx = groups[g];
    std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return fac[a] < fac[b]; });
    std::size_t best_js = idx[0], best_nm = idx[0];
    for (auto i : idx) {
      if (js[i] < js[best_js]) best_js = i;
      if (nm[i] < nm[best_nm]) best_nm = i;
    }
    fmt::print("{}: argmin JS at f = {:.3g}, argmin NMSE at f = {:.3g}\n", g, fac[best_js], fac[best_nm]);
    fmt::print("  {:>7} {:>10} {:>10}\n", "f", "JS/JS*", "NMSE/NMSE*");
    for (auto i : idx)
      fmt::print("  {:>7} {:>10} {:>10}\n", app::factor_text(fac[i]), app::num(js[i]), app::num(nm[i]));
  }
}

void run(CLI::App* sub, AttnState& st) {
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  const Device device = prep.ctx.device.device;
  const std::vector<int> all = sweep::gpu_ordinals("all", device, st.common.device);
  // Jobs run one at a time, on the first GPU.
  const std::vector<int> ords(all.begin(), all.begin() + std::min<std::ptrdiff_t>(1, std::ssize(all)));
  st.sweep.workers = 1;
  app::resolve(st.gate, app::kGate);
  const auto gens = app::join_spec_pieces(st.generators);
  require(!gens.empty() && !st.codebooks.empty() && !st.students.empty(),
          "--generators, --codebooks and --students need at least one value");
  std::vector<std::string> gshown;
  const auto gparsed = app::parse_generators(gens, gshown);
  sweep::require_distinct(gshown, "--generators");
  sweep::require_distinct(st.codebooks, "--codebooks");
  sweep::require_distinct(st.students, "--students");
  for (const auto& c : st.codebooks) parse_codebook(c);
  const auto points = app::expand_model_axes(st.axes, st.gate, true);
  sweep::job_count({{"generators", static_cast<std::int64_t>(gens.size())},
                    {"codebooks", static_cast<std::int64_t>(st.codebooks.size())},
                    {"model points", static_cast<std::int64_t>(points.size())}});
  std::vector<AttnConfig> configs;
  sweep::Plan plan;
  plan.grid_axes = {"generator_id", "codebook_id", "dp", "U", "topk", "beta_factor"};
  for (const auto& s : st.students) {
    plan.grid_values.push_back("js_" + app::column_suffix(s));
    plan.grid_values.push_back("nmse_" + app::column_suffix(s));
  }
  plan.finalizer = kRelativeFinalizer;
  for (std::size_t gi = 0; gi < gparsed.size(); ++gi)
    for (std::size_t ci = 0; ci < st.codebooks.size(); ++ci)
      for (const auto& pt : points) {
        AttnConfig c;
        c.params = pt.o.params;
        c.tau = pt.o.tau_resolved;
        c.topk = pt.o.topk;
        c.gamma = st.gate.gamma_value;
        c.eps = st.gate.eps;
        c.gen = gparsed[gi];
        c.codebook = parse_codebook(st.codebooks[ci]);
        c.T = st.T;
        c.n = st.n;
        c.trials = st.trials;
        c.dv = st.dv;
        c.seed = st.common.seed;
        c.students = st.students;
        validate(c);
        app::add_job(plan, st.common.seed, fmt::format("gen={}/codebook={}/{}", gshown[gi], st.codebooks[ci], pt.key),
                     {{"generator", gshown[gi]}, {"generator_id", gi}, {"codebook", st.codebooks[ci]},
                      {"codebook_id", ci}, {"beta_factor", pt.beta_factor}, {"beta_id", pt.beta_id}});
        configs.push_back(c);
      }
  require(!st.common.out.empty(), "--out FILE.h5 is required");
  auto print_header = app::print_once([&] {
    fmt::print("{:<24} {:<10} {:>3} {:>2} {:>4} {:>6} |", "generator", "codebook", "dp", "U", "K", "f");
    for (const auto& s : st.students) fmt::print(" {:>12}", "JS " + s);
    fmt::print("\n");
  });
  sweep::WorkerPool pool(ords, 1);
  const int rc = sweep::run_parallel(plan, st.sweep, prep.ctx, st.common.out,
                                     [&](const sweep::Job& j, const sweep::JobContext& jc) {
    print_header();
    const AttnConfig& c = configs[static_cast<std::size_t>(j.index)];
    std::string path;
    gpu::Handles* h = pool.handles(jc, path);  // nullptr on the CPU; path "cpu" or "cuda:<ordinal>"
    LogKappaFn kappa;
#ifdef MEMCAP_HAVE_CUDA
    if (h) kappa = cuda_log_kappa(*h, ords.front());
#else
    (void)h;
#endif
    const AttnResult r = run_attention(c, kappa);
    sweep::JobOutput jo;
    io::Row& row = jo.row;
    row.set("path", path);
    app::set_generator_columns(row, j)
        .set("codebook", j.params["codebook"].get<std::string>())
        .set("codebook_id", j.params["codebook_id"].get<std::int64_t>())
        .set("dp", c.params.dp)
        .set("U", c.params.U)
        .set("topk", c.topk)
        .set("beta_factor", j.params["beta_factor"].get<double>())
        .set("beta_id", j.params["beta_id"].get<std::int64_t>())
        .set("beta_r", c.params.beta_r)
        .set("beta_w", c.params.beta_w)
        .set("tau", c.tau)
        .set("gamma", c.gamma)
        .set("eps", c.eps)
        .set("T", c.T)
        .set("queries", c.n)
        .set("trials", c.trials)
        .set("d_v", c.dv);
    app::set_student_columns(row, r, c.gen.kind == Generator::Kind::planted);
    row.set("read_mass", r.read_mass)
        .set("write_mass", r.write_mass)
        .set("intersection", r.intersection)
        .set("zero_kernel_fraction", r.zero_kernel_fraction)
        .set("gsu_empty_reads", r.gsu_empty_reads);
    fmt::print("{:<24} {:<10} {:>3} {:>2} {:>4} {:>6} |", c.gen.spec(), codebook_name(c.codebook), c.params.dp,
               c.params.U, c.topk, app::factor_text(j.params["beta_factor"].get<double>()));
    for (const auto& s : r.students) fmt::print(" {:>12}", app::num(s.js));
    fmt::print("\n");
    return jo;
  });
  if (rc != 0) throw UserError("ramnet attn failed", rc);
  if (!st.sweep.dry_run && h5::is_hdf5(st.common.out)) print_relative(st.common.out);
}

memcap::cli::Register reg("ramnet", 40, [](CLI::App& tool) {
  sweep::register_finalizer(kRelativeFinalizer, relative_finalizer);
  auto st = std::make_shared<AttnState>();
  auto* sub = tool.add_subcommand(
      "attn",
      "Experiments E2/E3 (spec ramnet.md §3): attention of a softmax teacher softmax(q.k/tau) against\n"
      "address-overlap students over T keys and n queries per trial: kappa (kappa_A, normalised), kinf (kappa_inf,\n"
      "circular codebooks), topk (truncated kernel |A| sum_{TopK(r) cap TopK(w)} r w), gsu-standard / gsu-mass\n"
      "(token weights induced by a GSU memory with --topk, --gamma, --eps), vq (hard-write: softmax(beta_r q.k^)).\n"
      "Per student: JS (nats, bits), smoothed KL, head NMSE with random values, missing mass, dead-query rate;\n"
      "planted generators add the mass on and top-1 hit of the planted key. Generators: gauss[:sigma=S],\n"
      "torus[:rho=R], planted[:sigma_q=S,sigma=S], rope[:sigma=S] (keys at positions 0..T-1, queries at T; add\n"
      "the student cape for CAPE shifts of the unrotated vectors), teacher[:dk=D,dmodel=M,sigma=S] (random W_Q, W_K\n"
      "on Gaussian hidden states, students on the NoPE init to 2U dims; S, R <= 1e3); codebooks: circular, random,\n"
      "orthogonal, kmeans, pq (E3 ablation). Default: the E2 beta sweep f = beta/beta* = 10^{k/10}, k = -3..5\n"
      "(includes 1.26 and 1.58), gauss sigma = 0.5, 1, 1.5, dp = 4, U = 5, K = 32, T = 64, 20 trials. One job per\n"
      "(generator, codebook, dp, U, K, beta). Writes /summary, /grid/{js_S,nmse_S} over (generator_id,\n"
      "codebook_id, dp, U, topk, beta_factor), and /relative (JS and NMSE over their value at f = 1).\n"
      "--device cuda computes the kappa student's log-kernel matrix on the GPU (the rest on the CPU); /summary/path\n"
      "says which ran.\n"
      "Example: ramnet attn --generators gauss:sigma=1 --trials 5 --out e2.h5");
  cli::add_common(sub, st->common, "attn.h5");
  cli::add_sweep(sub, st->sweep);
  app::add_model_axes(sub, st->axes, "Top-K of the topk and GSU students (comma list; 0 = full distributions)",
                      "10^{k/10}, k = -3..5");
  st->axes.beta_factors.clear();
  app::add_model_options(sub, st->gate, app::kGate);
  app::add_generators_option(sub, st->generators, "Key/query generators (comma list)");
  sub->add_option("--codebooks", st->codebooks, "Codebooks: circular, random, orthogonal, kmeans, pq (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--students", st->students,
                  "Students: kappa, kinf, topk, gsu-standard, gsu-mass, vq, cape (rope generators only) (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--T", st->T, "Keys per trial")->capture_default_str();
  sub->add_option("--queries", st->n, "Queries per trial")->capture_default_str();
  sub->add_option("--trials", st->trials, "Independent trials (fresh keys, queries, values)")->capture_default_str();
  sub->add_option("--dv", st->dv, "Value dimension of the head NMSE")->capture_default_str();
  sub->callback([sub, st]() {
    app::check_given_values(sub, st->axes);
    if (st->axes.betas.empty() && st->axes.beta_factors.empty() && st->axes.beta_r == 0 && st->axes.beta_w == 0)
      st->axes.beta_factors = app::default_beta_factor_grid();
    run(sub, *st);
  });
});

}  // namespace
