// `hebb capacity`: storage capacity of fact-storing MLPs (spec hebbian.md §4.2, Fig. 2c / Fig. 11):
// per (method, d, F, fact-set seed) the smallest width m* whose MLP stores every fact, and W(m*),
// as a sweep (dry run, shards, resume down to the probe, merge), spread over the host's GPUs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>

#include "cli/app.hpp"
#include "cli/preset.hpp"
#include "core/error.hpp"
#include "margin/capacity_job.hpp"
#include "margin/capacity_probe.hpp"
#include "mlp/method.hpp"
#include "sweep/sweep.hpp"
#include "sweep/gpu_workers.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#endif

namespace {

using namespace memcap;
namespace fs = std::filesystem;

constexpr std::int64_t kMaxFacts = std::numeric_limits<int>::max();  // the fact map holds int rows
constexpr std::int64_t kDefaultHi = 65536;                           // spec §4.2 search range [1, 65536]
const std::vector<double> kPaperAlphas = {1.0 / 32, 1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 3.0 / 4, 1.0};

struct CapState {
  cli::CommonOptions common;  // --seed: the methods' feature / initialisation seed (spec: 0)
  sweep::Options sweep;
  std::string preset;
  std::vector<std::string> methods = {"hebbian:whitened"};
  std::vector<std::int64_t> dims = {64};
  std::vector<double> facts, alphas;
  double beta = 0;
  int seeds = 1;
  std::uint64_t fact_seed = 42;
  std::string search = "fast";
  double threshold = 1.0;
  std::int64_t min_width = 1, max_width = 0, start_width = 0;
  double growth = 0;  // 0 = the default (margin::default_search_start)
  std::string devices = "all";
  int jobs_per_gpu = 1;
  double cpu_max_tflop = 20;
  double checkpoint_every = margin::kGdProbeCheckpointEvery;  // seconds between a gd probe's training checkpoints
  CLI::Option *facts_opt = nullptr, *alpha_opt = nullptr;
};

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / double(1 << 30)); }

struct Point {
  std::int64_t dim, facts;
};

std::vector<Point> points_of(const CapState& st) {
  require(st.facts.empty() || st.alphas.empty(),
          "give the fact counts either as --facts or as --alpha (F = int(alpha d^2)), not both");
  std::vector<Point> pts;
  for (std::int64_t d : st.dims) {
    require(d >= 2 && d <= 65536, "--dim must be in [2, 65536] (got {})", d);
    if (!st.facts.empty()) {
      for (double f : st.facts) {
        require(std::isfinite(f) && f == std::floor(f) && f >= 2, "--facts must be integers >= 2 (got {:g})", f);
        require(f <= static_cast<double>(kMaxFacts), "--facts {:g} is too large: at most {} facts", f, kMaxFacts);
        pts.push_back({d, static_cast<std::int64_t>(f)});
      }
    } else {
      for (double a : st.alphas.empty() ? kPaperAlphas : st.alphas) {
        require(std::isfinite(a) && a > 0, "--alpha must be finite and > 0 (got {:g})", a);
        const double f = std::floor(a * static_cast<double>(d) * static_cast<double>(d));  // int(α d²)
        require(f >= 2, "--alpha {:g} at d = {} gives F = int(alpha d^2) = {:g} facts; need F >= 2", a, d, f);
        require(f <= static_cast<double>(kMaxFacts), "--alpha {:g} at d = {} gives F = {:g}: at most {} facts", a, d,
                f, kMaxFacts);
        pts.push_back({d, static_cast<std::int64_t>(f)});
      }
    }
  }
  std::set<std::pair<std::int64_t, std::int64_t>> seen;
  for (const auto& p : pts)
    require(seen.insert({p.dim, p.facts}).second, "the (d, F) point ({}, {}) is listed twice", p.dim, p.facts);
  return pts;
}

void run_capacity(CLI::App* sub, CapState& st) {
  if (!st.preset.empty()) {
    const bool user_facts = st.facts_opt->count() > 0, user_alpha = st.alpha_opt->count() > 0;
    cli::apply_preset(sub, st.preset);
    // A preset's fact grid gives way to the other form given on the command line.
    if (user_facts && !user_alpha) st.alphas.clear();
    if (user_alpha && !user_facts) st.facts.clear();
  }
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;

  // ---- every flag checked before anything is allocated or created ----
  require(st.seeds >= 1 && st.seeds <= 100000, "--seeds must be in [1, 100000] (got {})", st.seeds);
  require(st.jobs_per_gpu >= 1 && st.jobs_per_gpu <= 64, "--jobs-per-gpu must be in [1, 64] (got {})",
          st.jobs_per_gpu);
  require(std::isfinite(st.beta) && st.beta >= 0, "--beta must be finite and >= 0 (got {:g})", st.beta);
  require(st.min_width >= 1, "--min-width must be >= 1 (got {})", st.min_width);
  require(st.max_width >= 0, "--max-width must be >= 1, or 0 for the default (got {})", st.max_width);
  require(st.start_width >= 0, "--start-width must be >= 1, or 0 for the default (got {})", st.start_width);
  require(std::isfinite(st.growth) && (st.growth == 0 || st.growth > 1),
          "--growth must be > 1, or 0 for the default (got {:g})", st.growth);
  require(st.max_width == 0 || st.max_width >= st.min_width, "--max-width ({}) must be >= --min-width ({})",
          st.max_width, st.min_width);
  require(std::isfinite(st.cpu_max_tflop) && st.cpu_max_tflop > 0, "--cpu-max-tflop must be > 0 (got {:g})",
          st.cpu_max_tflop);
  require(std::isfinite(st.checkpoint_every) && st.checkpoint_every >= 0,
          "--checkpoint-every must be >= 0 seconds (got {:g})", st.checkpoint_every);
  const mlp::SearchMode mode = mlp::parse_search_mode(st.search);
  const auto method_texts = mlp::split_method_list(st.methods);
  require(!method_texts.empty(), "--methods is empty");
  std::vector<mlp::MethodSpec> methods;
  for (const auto& t : method_texts) {
    methods.push_back(mlp::parse_method(t));
    require(methods.back().kind != mlp::MethodKind::exact_k2,
            "hebbian:exact-k2 has the fixed width d(d+1)/2, so it has no capacity search; use hebbian, "
            "hebbian:whitened, hebbian:data-dependent, ntk or gd");
    for (std::size_t k = 0; k + 1 < methods.size(); ++k)
      require(methods[k].text != t, "--methods lists '{}' twice", t);
  }
  const std::vector<Point> points = points_of(st);
  if (!st.sweep.dry_run && !st.sweep.resume)  // --resume: the engine checks (a finished OUT is a no-op)
    io::check_output_path(st.common.out);

  // Jobs: (method, d, F, seed); fact-set seed = --fact-seed + i.
  sweep::Plan plan;
  plan.grid_axes = {"method_id", "dim", "alpha", "seed"};
  plan.grid_values = {"m_star", "params_star"};
  plan.finalizer = margin::kCapacityFinalizer;
  std::vector<margin::CapacityJobSpec> specs;
  for (std::size_t mi = 0; mi < methods.size(); ++mi)
    for (const auto& p : points)
      for (int s = 0; s < st.seeds; ++s) {
        margin::CapacityJobSpec js;
        js.method = methods[mi];
        js.method_id = static_cast<std::int64_t>(mi);
        js.dim = p.dim;
        js.facts = p.facts;
        js.beta = st.beta;
        js.fact_seed = st.fact_seed + static_cast<std::uint64_t>(s);
        js.feature_seed = st.common.seed;
        const bool gd = margin::is_gd_method(js.method);
        // gd: cap the range at 64F/d (spec §7.2: GD probes are the expensive ones).
        const std::int64_t auto_hi =
            gd ? std::clamp<std::int64_t>((64 * p.facts + p.dim - 1) / p.dim, 1, kDefaultHi) : kDefaultHi;
        js.search.mode = mode;
        js.search.threshold = st.threshold;
        js.search.lo = st.min_width;
        js.search.hi = st.max_width > 0 ? st.max_width : std::max(auto_hi, st.min_width);
        // gd starts near the expected m* with small steps (a failing GD probe trains every epoch), closed forms
        // at 1 doubling; the result does not depend on it when success is monotone in m.
        const margin::SearchStart auto_start = margin::default_search_start(js.method, p.dim, p.facts, st.beta);
        js.search.start =
            std::clamp(st.start_width > 0 ? st.start_width : auto_start.start, js.search.lo, js.search.hi);
        js.search.growth = st.growth > 0 ? st.growth : auto_start.growth;
        js.search.validate();
        sweep::Job j;
        j.index = static_cast<std::int64_t>(plan.jobs.size());
        j.seed = js.fact_seed;
        j.key = fmt::format("method={}/dim={}/facts={}/seed={}", js.method.text, p.dim, p.facts, j.seed);
        j.params = {{"method", js.method.text}, {"dim", p.dim}, {"facts", p.facts}, {"seed", j.seed}};
        js.key = j.key;
        j.detail = mode == mlp::SearchMode::fast
                       ? fmt::format("search fast from m = {} (x{:g}) in [{}, {}]", js.search.start, js.search.growth,
                                     js.search.lo, js.search.hi)
                       : fmt::format("search reference in [{}, {}]", js.search.lo, js.search.hi);
        // Start order only (sweep::Job::cost): the closed forms grow like F² d per probe; the data-dependent
        // CG and GD training cost far more per probe at the same F.
        j.cost = static_cast<double>(p.facts) * static_cast<double>(p.facts) * static_cast<double>(p.dim) *
                 (gd ? 100.0 : js.method.kind == mlp::MethodKind::data_dependent ? 10.0 : 1.0);
        plan.jobs.push_back(j);
        specs.push_back(js);
      }

  // Where jobs run, and whether the largest probe of every job fits there.
  const Device device = prep.ctx.device.device;
  const std::vector<int> ords = sweep::gpu_ordinals(st.devices, device, st.common.device);
  sweep::WorkerPool pool(ords, st.jobs_per_gpu);
  st.sweep.workers = pool.workers();
  // Size problems stop a real run before anything is allocated; a dry run reports them and goes on. Jobs that
  // --resume skips (done, perhaps on another device) are not checked: a sweep begun on a GPU may end on the CPU.
  const std::set<std::int64_t> done = sweep::finished_jobs(plan, st.sweep, prep.ctx, st.common.out);
  std::string size_problem;
  auto refuse = [&](const std::string& msg) {
    if (size_problem.empty()) size_problem = msg;
  };
  const margin::CapacityJobSpec* worst = nullptr;
  double worst_bytes = 0;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const margin::CapacityJobSpec& js = specs[k];
    if (done.count(plan.jobs[k].index)) continue;
    const double b = device == Device::cuda
                         ? margin::cuda_probe_bytes(js.method, js.facts, js.facts, js.dim, js.search.hi)
                         : margin::cpu_probe_bytes(js.method, js.facts, js.facts, js.dim, js.search.hi);
    if (!worst || b > worst_bytes) worst = &js, worst_bytes = b;
    if (device == Device::cpu) {
      const double tflop = margin::probe_flops(js.method, js.facts, js.facts, js.dim, js.search.start) / 1e12;
      if (tflop > st.cpu_max_tflop)
        refuse(fmt::format("{} at d = {}, F = {}: one probe needs about {:.3g} TFLOP on the CPU already at the first "
                           "width m = {} (limit --cpu-max-tflop {:g}); run it on a GPU, or raise the limit",
                           js.method.text, js.dim, js.facts, tflop, js.search.start, st.cpu_max_tflop));
    }
  }
  const double host_have = margin::host_available_bytes();
  if (device == Device::cpu && worst && host_have > 0 && worst_bytes > 0.9 * host_have)
    refuse(fmt::format("{} at d = {}, F = {} needs about {} of host memory at the search's largest width m = {}, but "
                       "only {} are available; lower --max-width",
                       worst->method.text, worst->dim, worst->facts, gib(worst_bytes), worst->search.hi,
                       gib(host_have)));
#ifdef MEMCAP_HAVE_CUDA
  if (device == Device::cuda && worst) {
    for (int o : ords) {
      gpu::set_device(o);
      const double free = static_cast<double>(gpu::memory_info().free);
      const double need = worst_bytes * st.jobs_per_gpu;
      if (need > 0.95 * free)
        refuse(fmt::format("{} at d = {}, F = {} needs about {} of GPU memory at the search's largest width m = {} "
                           "({} job(s) per GPU), but GPU {} has {} free; lower --max-width or --jobs-per-gpu",
                           worst->method.text, worst->dim, worst->facts, gib(need), worst->search.hi,
                           st.jobs_per_gpu, o, gib(free)));
    }
    gpu::set_device(ords.front());
  }
#endif
  if (!size_problem.empty()) {
    if (!st.sweep.dry_run) throw UserError(size_problem);
    std::fprintf(stderr, "hebb capacity: warning: %s (a real run stops here)\n", size_problem.c_str());
  }

  if (st.sweep.dry_run) {
    std::string where = device == Device::cuda ? fmt::format("GPUs {}", fmt::join(ords, ",")) : "cpu";
    std::printf("hebb capacity: %zu methods x %zu (d, F) points x %d seeds; search %s, threshold %g; device %s, "
                "%d worker(s); largest probe about %s (%s at d=%lld F=%lld m=%lld)\n",
                methods.size(), points.size(), st.seeds, mlp::to_string(mode), st.threshold, where.c_str(),
                st.sweep.workers, gib(worst_bytes).c_str(), worst ? worst->method.text.c_str() : "-",
                worst ? static_cast<long long>(worst->dim) : 0LL, worst ? static_cast<long long>(worst->facts) : 0LL,
                worst ? static_cast<long long>(worst->search.hi) : 0LL);
  }
  margin::register_capacity_finalizer();

  const int rc = sweep::run_parallel(plan, st.sweep, prep.ctx, st.common.out,
                                     [&](const sweep::Job& j, const sweep::JobContext& jc) {
    const margin::CapacityJobSpec& js = specs[static_cast<std::size_t>(j.index)];
    std::string path;
    gpu::Handles* handles = pool.handles(jc, path);
    margin::CapacityJobResult r =
        margin::run_capacity_job(js, device, handles, jc.scratch, path, st.checkpoint_every);
    sweep::JobOutput out;
    out.row = std::move(r.row);
    auto search = std::make_shared<mlp::SearchResult>(std::move(r.search));
    out.write_run = [search](h5::Group& g) { margin::write_probes(g, *search); };
    return out;
  });
  if (rc != 0) throw UserError("capacity sweep failed", rc);
  if (st.sweep.dry_run) return;
  if (sweep::Shard::parse(st.sweep.shard).count == 1 && fs::exists(st.common.out))
    margin::print_capacity_points(st.common.out);
}

// Registered at start-up so that `hebb merge` rebuilds /points of merged capacity shards too.
const bool kCapacityFinalizerRegistered = (margin::register_capacity_finalizer(), true);

memcap::cli::Register reg("hebb", 40, [](CLI::App& tool) {
  auto* sub = tool.add_subcommand(
      "capacity",
      "Storage capacity of fact-storing MLPs (spec hebbian.md §4.2; Fig. 2c isotropic, Fig. 11 anisotropic):\n"
      "for each (method, d, F, fact-set seed) the smallest hidden width m* at which the MLP stores every fact\n"
      "(argmax accuracy over all F facts >= --threshold), and W(m*) (spec §3.7). Tied sphere table, random\n"
      "permutation map, fact-set seeds --fact-seed + i. Search 'fast' (default: gallop from a start width, then\n"
      "integer bisection) or 'reference' (the released code's continuous bisection on [1, 65536]); both\n"
      "give the same m* when success is monotone in m. Every probe is recorded; a killed run resumes from\n"
      "its recorded probes and a gd training in flight from its checkpoint (--resume, --checkpoint-every).\n"
      "Jobs spread over --devices (one worker per GPU x --jobs-per-gpu).\n"
      "Presets: fig2c, fig11, reduced (experiments/presets/NAME.toml; also usable with --config).\n"
      "Writes /summary (one row per job: method, dim, facts, alpha, seed, m_star, params_star, accuracy_star,\n"
      "status found|not-found, probes, path, ...; m_star/params_star NaN when not found), /grid/{m_star,\n"
      "params_star} over (method_id, dim, alpha, seed), /points (per (method, d, F): m50, m100, m_median,\n"
      "params50, params100 over seeds), /runs/<job>/probes/{m,accuracy,success,min_margin,wall_s,cached}.\n"
      "Example: hebb capacity --methods gd,hebbian:whitened,ntk --dim 64 --facts 256 --seeds 5 --out cap.h5\n"
      "See docs/hebb-capacity.md.");
  auto st = std::make_shared<CapState>();
  cli::add_common(sub, st->common, "capacity.h5");
  sub->get_option("--seed")->description(
      "Seed of the methods' random features, NTK gate/projection and GD init (spec §4.2: 0); the fact sets use "
      "--fact-seed");
  cli::add_sweep(sub, st->sweep);
  sub->add_option("--preset", st->preset,
                  "Named preset (fig2c, fig11, reduced, or a .toml path); flags and --config override it")
      ->configurable(false);
  sub->add_option("--methods", st->methods,
                  "Methods, comma-separated (options stay with their method: hebbian:whitened,ridge=1e-6,ntk):\n"
                  "hebbian, hebbian:whitened, hebbian:data-dependent, ntk, gd[:...]")
      ->capture_default_str();
  sub->add_option("--dim", st->dims, "Embedding dimensions d (comma list)")->delimiter(',')->capture_default_str();
  st->facts_opt = sub->add_option("--facts", st->facts, "Fact counts F (comma list); or use --alpha")->delimiter(',');
  st->alpha_opt = sub->add_option("--alpha", st->alphas,
                                  "Fact ratios alpha = F/d^2, F = int(alpha d^2) (comma list; default when neither "
                                  "--facts nor --alpha is given: 1/32,1/16,1/8,1/4,1/2,3/4,1)")
                      ->delimiter(',');
  sub->add_option("--beta", st->beta, "Spike strength on both tied tables (spec §1.3; Fig. 11: 1.5); 0 = isotropic")
      ->capture_default_str();
  sub->add_option("--seeds", st->seeds, "Fact-set seeds per point: --fact-seed .. --fact-seed+N-1")
      ->capture_default_str();
  sub->add_option("--fact-seed", st->fact_seed, "First fact-set seed (spec §4.2: 42)")
      ->capture_default_str()
      ->check(cli::Uint64);
  sub->add_option("--search", st->search, "Search mode: fast (gallop + integer bisection) or reference (§4.2)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fast", "reference"}));
  sub->add_option("--threshold", st->threshold, "Success: accuracy >= this (1.0 = every fact; Qwen variant 0.98)")
      ->capture_default_str();
  sub->add_option("--min-width", st->min_width, "Smallest width searched")->capture_default_str();
  sub->add_option("--max-width", st->max_width,
                  "Largest width searched; 0 = 65536 (spec §4.2), for gd min(65536, ceil(64 F/d)) (spec §7.2)")
      ->capture_default_str();
  sub->add_option("--start-width", st->start_width,
                  "fast: first width of the gallop (up from it while widths fail, down while they succeed); "
                  "0 = 1; for plain gd (any precision but tf32/bf16) at beta <= 1.5 round(0.6645 F^1.1133 / d), "
                  "the m* of the fig2c grid within 3%; for other gd round(1.5 F/d)")
      ->capture_default_str();
  sub->add_option("--growth", st->growth,
                  fmt::format("fast: first gallop factor, squared after each step up to max(factor, 2); 0 = 2, "
                              "for gd {} with the fig2c fit as start, else 1.25",
                              margin::kGdFitGrowth))
      ->capture_default_str();
  sub->add_option("--devices", st->devices, "GPUs to spread jobs over: all, or numbers such as 0,1")
      ->capture_default_str();
  sub->add_option("--jobs-per-gpu", st->jobs_per_gpu, "Concurrent jobs per GPU (each on its own stream)")
      ->capture_default_str();
  sub->add_option("--cpu-max-tflop", st->cpu_max_tflop,
                  "On the CPU, refuse jobs whose first probe (at the start width) needs more than this many TFLOP")
      ->capture_default_str();
  sub->add_option("--checkpoint-every", st->checkpoint_every,
                  "Seconds between checkpoints of a gd probe's training, kept in OUT.partial/ beside the job's probe "
                  "log: a killed run resumes the training in flight (--resume) instead of restarting it; 0 = at every "
                  "host sync. Results do not depend on it")
      ->capture_default_str();
  sub->callback([sub, st] { run_capacity(sub, *st); });
});

}  // namespace
