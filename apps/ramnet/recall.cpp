// `ramnet recall`: E7 associative-recall capacity (spec ramnet.md §3 E7) of RAM-Net against softmax,
// κ-attention, dense RAM features as linear attention, elu+1 linear attention and FAVOR+, one job per
// (mixer, dp, U, K, β), all seeds inside the job; on the sweep engine (dry run, shards, resume down to
// the measured points, progress), spread over GPUs like `hebb capacity`. Every size is checked and the
// worst-case work is estimated before anything is created.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/app.hpp"
#include "sweep/gpu_workers.hpp"
#include "cli/preset.hpp"
#include "core/error.hpp"
#include "memory_axes.hpp"
#include "options.hpp"
#include "recall_job.hpp"
#include "ramnet/recall.hpp"
#include "sweep/sweep.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#include "ramnet/recall_cuda.hpp"
#endif

namespace {

using namespace memcap;
using namespace memcap::ramnet;

struct RecallState {
  cli::CommonOptions common;
  sweep::Options sweep;
  std::string preset;
  app::ModelOptions gate;  // --readout --gamma --eps (the shared flags)
  std::vector<std::string> mixers = {"ramnet"};
  app::ModelAxes axes;  // --dp --U --beta --beta-factor --beta-r --beta-w --tau --topk (default K = 0)
  std::string keys = "torus";
  double sigma_q = 0;
  int dv = 64, seeds = 10;
  std::int64_t n_min = 1, n_max = 0;
  std::vector<std::int64_t> n_list;
  std::string devices = "all";
  int jobs_per_gpu = 1;
  double cpu_max_tflop = 20;
};

using JobSpec = app::RecallJobSpec;

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / double(1 << 30)); }

// ---- the plan -----------------------------------------------------------------------------------

std::vector<JobSpec> build_specs(RecallState& st) {
  std::vector<Mixer> mixers;
  std::vector<std::string> names;
  for (const auto& m : st.mixers) {
    if (m == "all") {
      for (Mixer x : all_mixers()) mixers.push_back(x), names.push_back(to_string(x));
    } else {
      mixers.push_back(parse_mixer(m));
      names.push_back(m);
    }
  }
  require(!mixers.empty(), "--mixers is empty");
  sweep::require_distinct(names, "--mixers");
  auto shown = [](const auto& v) {
    std::vector<std::string> s;
    for (const auto& x : v) s.push_back(fmt::format("{}", x));
    return s;
  };
  require(!st.axes.dps.empty() && !st.axes.Us.empty() && !st.axes.topks.empty(),
          "--dp, --U and --topk need at least one value");
  sweep::require_distinct(shown(st.axes.dps), "--dp");
  sweep::require_distinct(shown(st.axes.Us), "--U");
  sweep::require_distinct(shown(st.axes.topks), "--topk");
  sweep::require_distinct(shown(st.axes.betas), "--beta");
  sweep::require_distinct(shown(st.axes.beta_factors), "--beta-factor");
  require(st.axes.betas.empty() || st.axes.beta_factors.empty(),
          "give the beta axis as --beta or as --beta-factor, not both");
  for (double b : st.axes.betas) require(std::isfinite(b) && b > 0, "--beta {} must be a finite number > 0", b);
  for (double f : st.axes.beta_factors) require(std::isfinite(f) && f > 0, "--beta-factor {} must be a finite number > 0", f);
  require(st.n_list.empty() || st.n_min == 1, "--n-min belongs to the capacity search; drop it with --N");
  require(st.n_list.empty() || st.n_max == 0, "--n-max belongs to the capacity search; drop it with --N");
  sweep::require_distinct(shown(st.n_list), "--N");
  const KeyModel keys = KeyModel::parse(st.keys);
  const std::size_t nb = std::max<std::size_t>(1, std::max(st.axes.betas.size(), st.axes.beta_factors.size()));
  sweep::job_count({{"mixers", static_cast<std::int64_t>(mixers.size())},
                    {"dp values", static_cast<std::int64_t>(st.axes.dps.size())},
                    {"U values", static_cast<std::int64_t>(st.axes.Us.size())},
                    {"K values", static_cast<std::int64_t>(st.axes.topks.size())},
                    {"beta values", static_cast<std::int64_t>(nb)}});

  std::vector<JobSpec> specs;
  std::string first_skip;
  std::vector<std::string> notes;  // printed once the plan is known to hold a job
  for (std::size_t mi = 0; mi < mixers.size(); ++mi)
    for (int dp : st.axes.dps)
      for (int U : st.axes.Us)
        for (std::size_t bi = 0; bi < nb; ++bi)
          for (std::int64_t K : st.axes.topks) {
            const Mixer mx = mixers[mi];
            if (mx != Mixer::ramnet && K != st.axes.topks.front()) continue;  // K is a RAM-Net parameter
            app::ModelOptions o = app::point_options(st.axes, st.gate, dp, U, bi, mx == Mixer::ramnet ? K : 0);
            if (mx == Mixer::ramnet && o.dp >= 2 && o.U >= 1 && std::pow(double(dp), U) < 4e18 &&
                static_cast<double>(K) > std::pow(double(dp), U)) {
              const std::string why = fmt::format("--topk {} is larger than the address space dp^U = {}^{} = {:.0f}", K,
                                                  dp, U, std::pow(double(dp), U));
              if (first_skip.empty()) first_skip = why;
              notes.push_back(fmt::format("ramnet recall: skipping K={} at dp={} U={}: {}", K, dp, U, why));
              continue;
            }
            app::resolve(o, app::kAll);
            JobSpec js;
            RecallConfig& c = js.cfg;
            c.model.mixer = mx;
            c.model.params = o.params;
            // Softmax / FAVOR+ temperature: --tau, else 2/(β_r β_w), where κ-attention matches softmax to
            // first order (§2.6; the default β = β* gives back τ = sqrt(2U)).
            c.model.tau = st.axes.tau > 0 ? o.tau_resolved : 2.0 / o.params.beta_r / o.params.beta_w;
            require(std::isfinite(c.model.tau) && c.model.tau > 0,
                    "beta_r = {:g}, beta_w = {:g} make the softmax temperature 2/(beta_r beta_w) = {:g} leave the "
                    "finite positive numbers; give concentrations nearer 1, or --tau",
                    o.params.beta_r, o.params.beta_w, c.model.tau);
            c.model.topk = o.topk;
            c.model.mass_readout = o.readout == "mass";
            c.model.gamma = o.gamma_value;
            c.model.eps = o.eps;
            c.keys = keys;
            c.sigma_q = st.sigma_q;
            c.dv = st.dv;
            c.seeds = st.seeds;
            c.seed = st.common.seed;
            c.n_min = st.n_min;
            c.n_max = st.n_max;
            c.n_list = st.n_list;
            c.search = st.n_list.empty();
            validate(c);
            js.mixer_id = static_cast<std::int64_t>(mi);
            js.beta_id = static_cast<std::int64_t>(bi);
            js.key = fmt::format("mixer={}/dp={}/U={}/K={}/beta={:.6g}", to_string(mx), dp, U, c.model.topk,
                                 c.model.params.beta_r);
            if (c.model.params.beta_w != c.model.params.beta_r) js.key += fmt::format(",{:.6g}", c.model.params.beta_w);
            specs.push_back(std::move(js));
          }
  if (specs.empty()) throw UserError(first_skip.empty() ? std::string("no job in the plan") : first_skip);
  for (const auto& n : notes) fmt::print(stderr, "{}\n", n);
  return specs;
}

// ---- the command ----------------------------------------------------------------------------------

void run_command(CLI::App* sub, RecallState& st) {
  if (!st.preset.empty()) cli::apply_preset(sub, st.preset);
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  app::check_given_values(sub, st.axes);  // an explicit --tau/--beta-r/--beta-w 0 is refused, not "default"
  require(st.jobs_per_gpu >= 1 && st.jobs_per_gpu <= 64, "--jobs-per-gpu must be in [1, 64] (got {})", st.jobs_per_gpu);
  require(std::isfinite(st.cpu_max_tflop) && st.cpu_max_tflop > 0, "--cpu-max-tflop must be > 0 (got {:g})",
          st.cpu_max_tflop);
  require(!st.common.out.empty() || st.sweep.dry_run, "--out FILE.h5 is required");
  std::vector<JobSpec> specs = build_specs(st);
  const Device device = prep.ctx.device.device;
  const std::vector<int> ords = sweep::gpu_ordinals(st.devices, device, st.common.device);
  st.sweep.workers = device == Device::cuda ? static_cast<int>(ords.size()) * st.jobs_per_gpu : 1;

  // Sizes and work, before anything is created: the largest evaluation of every job must fit, and on the
  // CPU a job's worst-case search must stay under --cpu-max-tflop. A dry run reports and goes on.
  std::string problem;
  auto refuse = [&](const std::string& msg) {
    if (problem.empty()) problem = msg;
  };
  double total_flops = 0, worst_flops = 0, worst_bytes = 0;
  const JobSpec* worst = nullptr;
  for (const auto& js : specs) {
    const std::int64_t n_max = effective_n_max(js.cfg);
    const double f = search_flops(js.cfg);
    total_flops += f;
    if (!worst || f > worst_flops) worst = &js, worst_flops = f;
    const double b = device == Device::cuda ? trial_device_bytes(js.cfg.model, n_max, js.cfg.dv)
                                            : trial_bytes(js.cfg.model, n_max, js.cfg.dv);
    worst_bytes = std::max(worst_bytes, b);
    const RecallModel& m = js.cfg.model;
    if (device == Device::cuda && m.mixer == Mixer::kappa && m.params.U * m.params.dp > 400)
      refuse(fmt::format("{}: kappa on the GPU supports U * dp <= 400 (got {}); use --device cpu", js.key,
                         m.params.U * m.params.dp));
    if (device == Device::cpu && f / 1e12 > st.cpu_max_tflop)
      refuse(fmt::format("{}: the capacity search may need up to {:.3g} TFLOP on the CPU ({} seeds, N up to {}; "
                         "limit --cpu-max-tflop {:g}); run it on a GPU, lower --n-max or --seeds, or raise the limit",
                         js.key, f / 1e12, js.cfg.seeds, n_max, st.cpu_max_tflop));
  }
  const double host = static_cast<double>(sweep::available_memory());
  const double host_need = device == Device::cpu ? worst_bytes : 0.0;
  if (host > 0 && host_need > 0.9 * host)
    refuse(fmt::format("the largest recall evaluation needs about {} of host memory, {} are available; lower --n-max "
                       "or --dv", gib(host_need), gib(host)));
#ifdef MEMCAP_HAVE_CUDA
  if (device == Device::cuda) {
    for (int o : ords) {
      gpu::set_device(o);
      const double free = static_cast<double>(gpu::memory_info().free);
      if (worst_bytes * st.jobs_per_gpu > 0.9 * free)
        refuse(fmt::format("the largest recall evaluation needs about {} of GPU memory ({} job(s) per GPU), GPU {} has "
                           "{} free; lower --n-max, --dv or --jobs-per-gpu",
                           gib(worst_bytes * st.jobs_per_gpu), st.jobs_per_gpu, o, gib(free)));
    }
    gpu::set_device(ords.front());
  }
#endif
  if (!problem.empty()) {
    if (!st.sweep.dry_run) throw UserError(problem);
    std::fprintf(stderr, "ramnet recall: warning: %s (a real run stops here)\n", problem.c_str());
  }
  if (st.sweep.dry_run) {
    const std::string where = device == Device::cuda ? fmt::format("GPUs {}", fmt::join(ords, ",")) : "cpu";
    fmt::print("ramnet recall: {} jobs, {} seeds each, {} ({}); device {}, {} worker(s); worst case {:.3g} TFLOP in all, "
               "largest job {} ({:.3g} TFLOP); largest evaluation about {} of {} memory\n",
               specs.size(), st.seeds, st.n_list.empty() ? "capacity search" : "N list", st.keys, where,
               st.sweep.workers, total_flops / 1e12, worst->key, worst_flops / 1e12, gib(worst_bytes),
               device == Device::cuda ? "GPU" : "host");
  }
  if (!st.sweep.dry_run && !st.sweep.resume) io::check_output_path(st.common.out);

  sweep::Plan plan;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    sweep::Job j;
    j.index = static_cast<std::int64_t>(i);
    j.key = specs[i].key;
    const RecallModel& m = specs[i].cfg.model;
    j.params = {{"mixer", to_string(m.mixer)}, {"dp", m.params.dp},         {"U", m.params.U},
                {"K", m.topk},                {"beta_r", m.params.beta_r}, {"beta_w", m.params.beta_w}};
    j.seed = st.common.seed;
    plan.jobs.push_back(j);
  }
  plan.grid_axes = {"mixer_id", "dp", "U", "K", "beta_id"};
  plan.grid_values = {"n_star_01", "n_star_05"};
  if (!st.sweep.dry_run) app::print_recall_header();

  sweep::WorkerPool pool(ords, st.jobs_per_gpu);
  const bool verbose = cli::verbosity() > 0;
  const int rc = sweep::run_parallel(plan, st.sweep, prep.ctx, st.common.out,
                                     [&](const sweep::Job& j, const sweep::JobContext& jc) {
    const JobSpec& js = specs[static_cast<std::size_t>(j.index)];
    RecallBackend backend = evaluate_trial_cpu;
    std::string path;
    gpu::Handles* h = pool.handles(jc, path);  // nullptr on the CPU; path "cpu" or "cuda:<ordinal>"
#ifdef MEMCAP_HAVE_CUDA
    if (h) backend = [h](const RecallModel& m, const RecallInputs& in) { return evaluate_trial_cuda(m, in, *h); };
#else
    (void)h;
#endif
    const std::vector<RecallPoint> known = app::read_scratch(jc.scratch, js.key);
    if (!known.empty())
      std::fprintf(stderr, "ramnet recall: %s: resumed from %zu recorded points\n", js.key.c_str(), known.size());
    std::ofstream log;
    if (!jc.scratch.empty()) {
      log.open(jc.scratch, known.empty() ? std::ios::trunc : std::ios::app);
      if (known.empty()) log << nlohmann::json{{"job", js.key}}.dump() << '\n' << std::flush;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const RecallResult r = run_recall(js.cfg, backend, path, known, [&](const RecallPoint& p) {
      if (log.is_open()) log << app::point_json(p).dump() << '\n' << std::flush;
      if (verbose)
        std::fprintf(stderr, "  %s N=%lld %s acc=%.4f nmse=%.4f dead=%.4f\n", js.key.c_str(),
                     static_cast<long long>(p.N), p.stage.c_str(), p.acc, p.nmse, p.dead);
    });
    const double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return app::recall_job_output(js, r, eval_s);
  });
  if (rc != 0) throw UserError("recall sweep failed", rc);
}

memcap::cli::Register reg("ramnet", 70, [](CLI::App& tool) {
  auto st = std::make_shared<RecallState>();
  auto* sub = tool.add_subcommand(
      "recall",
      "Associative-recall capacity (spec ramnet.md §3 E7): write N (key, value) pairs, keys torus(rho) or\n"
      "gauss(sigma), values N(0, I_dv); read with q = k + N(0, sigma_q^2); decode by argmax cosine over the N\n"
      "stored values. N*_0.1 and N*_0.5 (largest N with accuracy >= 0.9 / 0.5, pooled over --seeds) by doubling\n"
      "from --n-min, then integer bisection; with --N only those N are measured. Mixers: ramnet (GSU memory:\n"
      "--topk, --gamma, --eps, --readout), softmax (logits q.k/tau), kappa (kappa_A attention), ram-linear (dense\n"
      "RAM features as linear attention: equals mass-aware cumulative RAM-Net), elu (elu+1 linear attention on\n"
      "the 2U-dim key), favor (FAVOR+ with dp^U positive orthogonal random features); 'all' = every one.\n"
      "tau: --tau, else 2/(beta_r beta_w). One job per (mixer, dp, U, K, beta); grids by comma lists.\n"
      "Writes /summary (n_star_01, n_star_05, censored flags, the hard-write prediction pred_n_star_*, state_size,\n"
      "...), /grid/{n_star_01,n_star_05} over (mixer_id, dp, U, K, beta_id), /runs/<job>/ (N, acc, acc_seeds,\n"
      "nmse, dead, pred_acc, recency_hits, recency_count, recency_age_lo). Preset: ramnet-e7 (the E7 table).\n"
      "Example: ramnet recall --mixers all --dp 4 --U 3 --beta 4 --out recall.h5   (see docs/ramnet.md)");
  cli::add_common(sub, st->common, "recall.h5");
  sub->get_option("--seed")->description("Base seed: seed s of a job draws with derive_seed(base, 'ramnet-recall/seed=s')");
  cli::add_sweep(sub, st->sweep);
  sub->add_option("--preset", st->preset, "Named preset (ramnet-e7, or a .toml path); flags and --config override it")
      ->configurable(false);
  sub->add_option("--mixers", st->mixers, "Mixers (comma list): ramnet, softmax, kappa, ram-linear, elu, favor, or all")
      ->delimiter(',')
      ->capture_default_str();
  st->axes.topks = {0};
  sub->add_option("--dp", st->axes.dps, "Codes per factor, 2..4096 (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--U", st->axes.Us, "Number of factors (comma list); keys live in R^{2U}, |A| = dp^U")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--beta", st->axes.betas, "beta_r = beta_w (comma list: one job each; default beta* = sqrt(2/sqrt(2U)))")
      ->delimiter(',');
  sub->add_option("--beta-factor", st->axes.beta_factors, "beta = f beta* (comma list), instead of --beta")->delimiter(',');
  sub->add_option("--beta-r", st->axes.beta_r, "Read concentration (overrides --beta / --beta-factor for reads)");
  sub->add_option("--beta-w", st->axes.beta_w, "Write concentration (overrides --beta / --beta-factor for writes)");
  sub->add_option("--tau", st->axes.tau, "Softmax / FAVOR+ temperature, > 0 (default 2/(beta_r beta_w))");
  sub->add_option("--topk", st->axes.topks, "RAM-Net Top-K (comma list; 0 = full distributions); K > dp^U is skipped")
      ->delimiter(',')
      ->capture_default_str();
  app::add_model_options(sub, st->gate, app::kReadout | app::kGate);
  sub->add_option("--keys", st->keys, "Key model: torus[:rho=R] (blocks on the circle of radius R, default 1) or "
                                      "gauss[:sigma=S] (iid N(0, S^2), default 1)")
      ->capture_default_str();
  sub->add_option("--sigma-q", st->sigma_q, "Query noise: q = k + N(0, sigma_q^2 I)")->capture_default_str();
  sub->add_option("--dv", st->dv, "Value dimension")->capture_default_str();
  sub->add_option("--seeds", st->seeds, "Seeds per N (accuracy pooled over them)")->capture_default_str();
  sub->add_option("--n-min", st->n_min, "First N of the doubling grid")->capture_default_str();
  sub->add_option("--n-max", st->n_max, "Largest N searched (0 = clamp(4 dp^U, 64, 131072)); a capacity still met "
                                        "there is reported as n_max with *_censored = 1")
      ->capture_default_str();
  sub->add_option("--N", st->n_list, "Measure only these N (comma list; no search)")->delimiter(',');
  sub->add_option("--devices", st->devices, "GPUs to spread jobs over: all, or numbers such as 0,1")
      ->capture_default_str();
  sub->add_option("--jobs-per-gpu", st->jobs_per_gpu, "Concurrent jobs per GPU (each on its own stream)")
      ->capture_default_str();
  sub->add_option("--cpu-max-tflop", st->cpu_max_tflop,
                  "On the CPU, refuse jobs whose worst-case search needs more than this many TFLOP")
      ->capture_default_str();
  sub->callback([sub, st] { run_command(sub, *st); });
});

}  // namespace
