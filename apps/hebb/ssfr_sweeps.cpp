// `hebb ssfr capacity`, `hebb ssfr noise`, `hebb ssfr usability`: the SSFR sweeps of spec
// hebbian.md §4.6/§4.7 (Fig. 3b, Fig. 10), §4.4 (Fig. 3a) and §4.3 (Fig. 2a, Fig. 7) on the sweep
// engine (dry run, shards, resume down to the training checkpoint, merge, progress), jobs spread
// over --devices x --jobs-per-gpu. The jobs themselves are in src/margin/ssfr_*_job.cpp.
#include "ssfr_sweeps.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>

#include "cli/app.hpp"
#include "cli/preset.hpp"
#include "core/error.hpp"
#include "sweep/gpu_workers.hpp"
#include "margin/capacity_probe.hpp"
#include "margin/ssfr_jobs.hpp"
#include "mlp/constructions.hpp"
#include "mlp/method.hpp"
#include "sweep/sweep.hpp"

namespace memcap::hebb_app {

namespace {

namespace fs = std::filesystem;

// Flags every SSFR sweep has.
struct SsfrSweepState {
  cli::CommonOptions common;
  sweep::Options sweep;
  std::string preset;
  int seeds = 1;
  std::string devices = "all";
  int jobs_per_gpu = 1;
  nn::SsfrTrainConfig train;
  std::int64_t junk_vocab = 0;  // 0: = J (paper)
  // capacity
  std::string protocol = "fact-adaptive";
  std::vector<std::string> methods = {"gd", "hebbian", "hebbian:whitened", "hebbian:data-dependent", "ntk"};
  std::vector<std::int64_t> dims = {128}, facts = {}, widths = {}, junks = {9};
  std::string search = "reference";
  double tolerance = 16, threshold = -1, gate = -1;
  std::int64_t search_lo = 1, search_hi = 0;
  // noise
  std::int64_t noise_batches = 64, noise_batch = 512;
  bool attn_residual = false, no_attn_residual = false;
  // usability
  std::string mlp = "gd";
};

void add_shared(CLI::App* sub, SsfrSweepState& st, const std::string& default_out, std::int64_t default_steps) {
  cli::add_common(sub, st.common, default_out);
  st.common.seed = 42;
  sub->get_option("--seed")
      ->description("First seed; job seeds are SEED + 10000 i, i < --seeds (spec §4: 42, 10042, ...): fact set, maps, "
                    "junk rows, method seed, attention init and batches")
      ->default_str("42");
  cli::add_sweep(sub, st.sweep);
  sub->add_option("--preset", st.preset, "Named preset (experiments/presets/NAME.toml) or a .toml path; flags win")
      ->configurable(false);
  sub->add_option("--seeds", st.seeds, "Seeds per point")->capture_default_str();
  sub->add_option("--devices", st.devices, "GPUs to spread jobs over: all, or numbers such as 0,1")
      ->capture_default_str();
  sub->add_option("--jobs-per-gpu", st.jobs_per_gpu, "Concurrent trainings per GPU (each on its own stream)")
      ->capture_default_str();
  st.train.steps = default_steps;
  sub->add_option("--steps", st.train.steps, "Training steps per training (one fresh batch each)")
      ->capture_default_str();
  sub->add_option("--batch", st.train.batch, "Sequences per batch (training and evaluation)")->capture_default_str();
  sub->add_option("--lr", st.train.lr, "AdamW learning rate (constant)")->capture_default_str();
  sub->add_option("--weight-decay", st.train.weight_decay, "AdamW weight decay (every 2-D tensor)")
      ->capture_default_str();
  sub->add_option("--eval-every", st.train.eval_every, "Evaluate after every step whose index is a multiple of this")
      ->capture_default_str();
  sub->add_option("--eval-batches", st.train.eval_batches,
                  "Fresh batches per evaluation and map (0 = 10 max(1, floor(F/1280)))")
      ->capture_default_str();
  sub->add_option("--precision", st.train.precision, "GPU arithmetic: f32 (the released code's) or f64")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f64"}));
  sub->add_option("--junk-vocab", st.junk_vocab, "V_J, distinct junk tokens (0 = J, the paper's choice)")
      ->capture_default_str();
}

struct Prepared {
  io::RunContext ctx;
  std::vector<int> ords;
  bool done = false;
};

// Preset, common flags, the shared checks; nothing created yet.
Prepared prepare_sweep(CLI::App* sub, SsfrSweepState& st) {
  if (!st.preset.empty()) cli::apply_preset(sub, st.preset);
  const auto prep = cli::prepare(sub, st.common);
  Prepared p;
  p.done = prep.done;
  if (p.done) return p;
  p.ctx = prep.ctx;
  // an empty list value ('--widths ""') would read as 0: say what it is
  for (const char* name : {"--dim", "--facts", "--widths", "--junk"})
    if (const CLI::Option* o = sub->get_option_no_throw(name); o && o->count() > 0)
      for (const std::string& v : o->results()) require(!v.empty(), "{} is empty; give at least one value", name);
  require(st.seeds >= 1 && st.seeds <= 100000, "--seeds must be in [1, 100000] (got {})", st.seeds);
  require(st.jobs_per_gpu >= 1 && st.jobs_per_gpu <= 64, "--jobs-per-gpu must be in [1, 64] (got {})",
          st.jobs_per_gpu);
  require(st.junk_vocab >= 0, "--junk-vocab must be >= 0 (0 = J; got {})", st.junk_vocab);
  st.train.seed = st.common.seed;
  st.train.validate();
  p.ords = sweep::gpu_ordinals(st.devices, p.ctx.device.device, st.common.device);
  if (!st.sweep.dry_run && !st.sweep.resume) io::check_output_path(st.common.out);
  return p;
}

std::uint64_t seed_of(const SsfrSweepState& st, int i) {
  return st.common.seed + 10000ull * static_cast<std::uint64_t>(i);
}

void check_dims(const std::vector<std::int64_t>& v, const char* flag, std::int64_t lo, std::int64_t hi) {
  require(!v.empty(), "{} is empty", flag);
  std::set<std::int64_t> seen;
  for (auto x : v) {
    require(x >= lo && x <= hi, "{} values must be in [{}, {}] (got {})", flag, lo, hi, x);
    require(seen.insert(x).second, "{} lists {} twice", flag, x);
  }
}

// A memory check's finding: refused before any job, or on a dry run only a warning.
void report_memory_problem(const SsfrSweepState& st, const std::string& problem) {
  if (problem.empty()) return;
  if (!st.sweep.dry_run) throw UserError(problem);
  std::fprintf(stderr, "hebb ssfr: warning: %s (a real run stops here)\n", problem.c_str());
}

// Memory of one training on the chosen device, checked before any job (a dry run only warns).
// method: the inserted MLP built at width m (its construction's memory counts too), or nullptr.
void check_training_memory(const SsfrSweepState& st, const Prepared& p, const nn::SsfrTask& task, std::int64_t d,
                           std::int64_t m, const std::string& what, const mlp::MethodSpec* method = nullptr) {
  std::string problem;
  const bool gpu_run = p.ctx.device.device == Device::cuda;
  const double build = method == nullptr ? 0.0
                       : gpu_run ? margin::cuda_probe_bytes(*method, task.facts, task.facts, d, m)
                                 : margin::cpu_probe_bytes(*method, task.facts, task.facts, d, m);
  if (gpu_run) {
#ifdef MEMCAP_HAVE_CUDA
    const double need = (static_cast<double>(nn::ssfr_cuda_bytes(task, d, m, st.train)) + build) * st.jobs_per_gpu;
    for (int o : p.ords) {
      gpu::set_device(o);
      const double free = static_cast<double>(gpu::memory_info().free);
      if (need > 0.95 * free)
        problem = fmt::format("{} needs about {:.2f} GiB of GPU memory ({} job(s) per GPU) but GPU {} has {:.2f} GiB "
                              "free; lower --jobs-per-gpu, --batch or the width",
                              what, need / (1 << 30), st.jobs_per_gpu, o, free / (1 << 30));
    }
    if (!p.ords.empty()) gpu::set_device(p.ords.front());
#endif
  } else {
    const double need = nn::ssfr_cpu_bytes(task, d, m, st.train.batch) + build;
    const double have = margin::host_available_bytes();
    if (have > 0 && need > 0.9 * have)
      problem = fmt::format("{} needs about {:.2f} GiB of memory but {:.2f} GiB are available; lower --batch or the "
                            "width",
                            what, need / (1 << 30), have / (1 << 30));
  }
  report_memory_problem(st, problem);
}

// Host memory of `hebb ssfr noise`'s measurement after the training (on the CPU whatever the device): the float64
// block on --noise-batch rows and every measured distance (--noise-batches x --noise-batch), checked before any job.
void check_noise_memory(const SsfrSweepState& st, const margin::SsfrNoiseSpec& js, const std::string& what) {
  const double n = static_cast<double>(js.noise_batches) * static_cast<double>(js.noise_batch);
  const double need = nn::ssfr_cpu_bytes(js.task(), js.dim, 0, js.noise_batch) + 8 * n;
  const double have = margin::host_available_bytes();
  if (have <= 0 || need <= 0.9 * have) return;
  report_memory_problem(st, fmt::format("{} needs about {:.2f} GiB of memory ({} distances) but {:.2f} GiB are "
                                        "available; lower --noise-batches or --noise-batch",
                                        what, need / (1 << 30), n, have / (1 << 30)));
}

int run_plan(const sweep::Plan& plan, SsfrSweepState& st, const Prepared& p, sweep::WorkerPool& pool,
             const std::function<margin::SsfrJobOutput(const sweep::Job&, const margin::SsfrRunner&,
                                                       const sweep::JobContext&)>& job) {
  st.sweep.workers = pool.workers();
  const Device device = p.ctx.device.device;
  return sweep::run_parallel(plan, st.sweep, p.ctx, st.common.out,
                             [&](const sweep::Job& j, const sweep::JobContext& jc) {
    margin::SsfrRunner run;
    std::string path;
    run.device = device;
    run.handles = pool.handles(jc, path);
    margin::SsfrJobOutput o = job(j, run, jc);
    sweep::JobOutput out;
    out.row = std::move(o.row);
    out.row.set("path", path);
    out.write_run = std::move(o.write_run);
    return out;
  });
}

// ---------------------------------------------------------------- capacity
void run_capacity(CLI::App* sub, SsfrSweepState& st) {
  Prepared p = prepare_sweep(sub, st);
  if (p.done) return;
  const bool t99 = st.protocol == "train99";
  require(st.dims.size() == 1, "--dim takes one dimension for hebb ssfr capacity (got {})", st.dims.size());
  const std::int64_t d = st.dims.front();
  require(d >= 2 && d <= 4096, "--dim must be in [2, 4096] (got {})", d);
  require(st.junks.size() == 1, "--junk takes one value for hebb ssfr capacity (got {})", st.junks.size());
  const std::int64_t J = st.junks.front();
  const std::int64_t vj = st.junk_vocab > 0 ? st.junk_vocab : J;
  require(std::isfinite(st.tolerance) && st.tolerance > 0, "--search-tolerance must be > 0 (got {:g})", st.tolerance);
  // not given: the protocol's value (a value given is checked, -1 included)
  const bool th_given = sub->get_option("--threshold")->count() > 0;
  const bool gate_given = sub->get_option("--gate")->count() > 0;
  require(!th_given || (std::isfinite(st.threshold) && st.threshold > 0 && st.threshold <= 1),
          "--threshold must be in (0, 1] (got {:g})", st.threshold);
  require(!gate_given || (std::isfinite(st.gate) && st.gate >= 0 && st.gate <= 1),
          "--gate must be in [0, 1] (got {:g})", st.gate);
  const double threshold = th_given ? st.threshold : (t99 ? 0.99 : 1.0);
  const double gate = gate_given ? st.gate : (t99 ? 0.0 : 1.0);
  require(st.search_lo >= 1, "--search-lo must be >= 1 (got {})", st.search_lo);
  require(st.search_hi >= 0, "--search-hi must be >= 1, or 0 for the protocol's default (got {})", st.search_hi);
  if (t99) {
    require(st.facts.empty(), "--facts is for --protocol fact-adaptive; train99 searches F at each of --widths");
    if (st.widths.empty()) st.widths = {44, 88, 176, 352, 704, 1408};  // spec §4.7
    check_dims(st.widths, "--widths", 1, 1 << 24);
  } else {
    require(st.widths.empty(), "--widths is for --protocol train99; fact-adaptive searches the width at each --facts");
    if (st.facts.empty()) st.facts = {64, 128, 256, 512, 1024, 2048, 4096, 8192};  // spec §4.6
    check_dims(st.facts, "--facts", 2, 1 << 24);
  }
  std::vector<mlp::SsfrMlpChoice> methods;
  for (const auto& t : mlp::split_method_list(st.methods)) {
    methods.push_back(mlp::parse_ssfr_mlp(t));
    require(methods.back().kind == mlp::SsfrMlpKind::method,
            "--methods takes method specs (gd, hebbian, hebbian:whitened, hebbian:data-dependent, ntk); '{}' is not one",
            t);
    require(methods.back().method.kind != mlp::MethodKind::exact_k2,
            "hebbian:exact-k2 has the fixed width d(d+1)/2, so it has no capacity search");
  }
  require(!methods.empty(), "--methods is empty");
  for (std::size_t i = 0; i < methods.size(); ++i)
    for (std::size_t k = 0; k < i; ++k)
      require(methods[i].text != methods[k].text, "--methods lists '{}' twice", methods[i].text);

  sweep::Plan plan;
  plan.grid_axes = {"method_id", t99 ? "search_width" : "search_facts", "seed"};
  plan.grid_values = {t99 ? "facts" : "width", "params"};
  std::vector<margin::SsfrCapacitySpec> specs;
  const auto& points = t99 ? st.widths : st.facts;
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> worst;  // method -> largest (F, m) of its probes
  for (std::size_t mi = 0; mi < methods.size(); ++mi)
    for (const std::int64_t x : points)
      for (int s = 0; s < st.seeds; ++s) {
        margin::SsfrCapacitySpec js;
        js.mode = t99 ? margin::SsfrCapacityMode::train99 : margin::SsfrCapacityMode::fact_adaptive;
        js.mlp = methods[mi];
        js.dim = d;
        js.junk = J;
        js.junk_vocab = vj;
        js.seed = seed_of(st, s);
        js.train = st.train;
        js.train.early_stop = false;
        js.block.vo_trainable = t99;   // §4.6: W_v = W_o = I frozen; §4.7: trained
        js.block.attn_residual = t99;  // §4.6: off; §4.7: on (code)
        js.gate = gate;
        js.search.mode = mlp::parse_search_mode(st.search);
        js.search.tolerance = st.tolerance;
        js.search.threshold = threshold;
        js.search.lo = st.search_lo;
        if (t99) {
          js.width = x;
          // Code range: [1, min(65536, round(0.75 d m))] (spec §4.7, §7.3.7).
          const auto code_hi = std::min<std::int64_t>(65536, std::llround(0.75 * static_cast<double>(d * x)));
          js.search.hi = st.search_hi > 0 ? st.search_hi : std::max<std::int64_t>(code_hi, st.search_lo + 1);
          js.facts = js.search.hi;  // the largest F a probe can use (checked below)
        } else {
          js.facts = x;
          // [1, 65536] (spec §4.6); gd capped at ceil(64 F/d) as in hebb capacity (spec §7.2: each GD probe
          // trains two MLPs of that width, and the bisection's first probe would be m = 32768).
          const std::int64_t gd_hi = std::clamp<std::int64_t>((64 * x + d - 1) / d, st.search_lo + 1, 65536);
          js.search.hi = st.search_hi > 0 ? st.search_hi : margin::is_gd_method(js.mlp.method) ? gd_hi : 65536;
        }
        require(js.search.hi > js.search.lo, "--search-hi ({}) must be > --search-lo ({})", js.search.hi,
                js.search.lo);
        js.search.start = js.search.lo;
        js.search.validate();
        (void)nn::SsfrTask::make(js.facts, J, J, vj);  // J too long, vocabulary too large: refused now
        auto& [worst_f, worst_m] = worst[js.mlp.text];
        worst_m = std::max(worst_m, t99 ? x : js.search.hi);
        worst_f = std::max(worst_f, js.facts);
        sweep::Job j;
        j.index = static_cast<std::int64_t>(plan.jobs.size());
        j.seed = js.seed;
        j.key = t99 ? fmt::format("mlp={}/width={}/seed={}", js.mlp.text, x, js.seed)
                    : fmt::format("mlp={}/facts={}/seed={}", js.mlp.text, x, js.seed);
        j.params = {{"mlp", js.mlp.text}, {t99 ? "width" : "facts", x}, {"seed", js.seed}};
        js.key = j.key;
        // Start order only (sweep::Job::cost): larger F first; a GD probe trains two MLPs (F² logits each).
        j.cost = static_cast<double>(js.facts) * static_cast<double>(js.facts) *
                 (margin::is_gd_method(js.mlp.method) ? 10.0 : 1.0);
        plan.jobs.push_back(j);
        specs.push_back(js);
      }
  for (const auto& m : methods) {
    const auto [worst_f, worst_m] = worst[m.text];  // each method's own largest probe (gd: m <= ceil(64 F/d))
    check_training_memory(st, p, nn::SsfrTask::make(worst_f, J, J, vj), d, worst_m,
                          fmt::format("the largest {} probe (d = {}, F = {}, m = {}, batch {})", m.text, d, worst_f,
                                      worst_m, st.train.batch),
                          &m.method);
  }
  if (st.sweep.dry_run)
    std::printf("hebb ssfr capacity: protocol %s, %zu methods x %zu %s x %d seeds; search %s over %s in [%lld, %s], "
                "tolerance %g, success %s >= %g, gate %g\n",
                st.protocol.c_str(), methods.size(), points.size(), t99 ? "widths" : "fact counts", st.seeds,
                st.search.c_str(), t99 ? "F" : "m", static_cast<long long>(st.search_lo),
                st.search_hi > 0 ? std::to_string(st.search_hi).c_str()
                                : (t99 ? "min(65536, 0.75 d m)" : "65536 (gd: ceil(64 F/d))"),
                st.tolerance, t99 ? "best_train_acc" : "best_acc", threshold, gate);
  sweep::WorkerPool pool(p.ords, st.jobs_per_gpu);
  const int rc = run_plan(plan, st, p, pool, [&](const sweep::Job& j, const margin::SsfrRunner& r,
                                                  const sweep::JobContext& jc) {
    const auto& js = specs[static_cast<std::size_t>(j.index)];
    margin::SsfrRunner run = r;
    run.checkpoint = jc.scratch.empty() ? std::string() : jc.scratch + "-ckpt";
    margin::SsfrJobOutput o = margin::run_ssfr_capacity_job(js, run, jc.scratch);
    const auto mi = std::find_if(methods.begin(), methods.end(), [&](const auto& m) { return m.text == js.mlp.text; });
    o.row.set("method_id", static_cast<std::int64_t>(mi - methods.begin()));
    o.row.set(t99 ? "search_width" : "search_facts", t99 ? js.width : js.facts);
    return o;
  });
  if (rc != 0) throw UserError("hebb ssfr capacity failed", rc);
}

// ---------------------------------------------------------------- noise
void run_noise(CLI::App* sub, SsfrSweepState& st) {
  Prepared p = prepare_sweep(sub, st);
  if (p.done) return;
  check_dims(st.dims, "--dim", 2, 4096);
  check_dims(st.facts, "--facts", 2, 1 << 24);
  require(st.dims.size() == st.facts.size(),
          "--dim and --facts are paired (d_i, F_i): give as many dimensions ({}) as fact counts ({})", st.dims.size(),
          st.facts.size());
  check_dims(st.junks, "--junk", 0, 509);
  require(st.noise_batches >= 1 && st.noise_batches <= 1 << 20, "--noise-batches must be in [1, 1048576] (got {})",
          st.noise_batches);
  require(st.noise_batch >= 1 && st.noise_batch <= 1 << 20, "--noise-batch must be in [1, 1048576] (got {})",
          st.noise_batch);
  sweep::Plan plan;
  plan.grid_axes = {"dim", "junk", "seed"};
  plan.grid_values = {"eps_attn", "dist_mean"};
  std::vector<margin::SsfrNoiseSpec> specs;
  for (std::size_t k = 0; k < st.dims.size(); ++k)
    for (const std::int64_t J : st.junks)
      for (int s = 0; s < st.seeds; ++s) {
        margin::SsfrNoiseSpec js;
        js.dim = st.dims[k];
        js.facts = st.facts[k];
        js.junk = J;
        js.junk_vocab = st.junk_vocab > 0 ? st.junk_vocab : J;
        js.seed = seed_of(st, s);
        js.train = st.train;
        js.train.early_stop = true;  // §4.4 / §6.3: stop at 0.99
        js.block.vo_trainable = true;
        js.block.attn_residual = st.attn_residual;
        js.noise_batches = st.noise_batches;
        js.noise_batch = st.noise_batch;
        (void)js.task();
        check_training_memory(st, p, js.task(), js.dim, 0,
                              fmt::format("the training at d = {}, F = {}, J = {}", js.dim, js.facts, J));
        check_noise_memory(st, js, fmt::format("the noise measurement at d = {}, F = {}, J = {}", js.dim, js.facts, J));
        sweep::Job j;
        j.index = static_cast<std::int64_t>(plan.jobs.size());
        j.seed = js.seed;
        j.key = fmt::format("dim={}/facts={}/junk={}/seed={}", js.dim, js.facts, J, js.seed);
        j.params = {{"dim", js.dim}, {"facts", js.facts}, {"junk", J}, {"seed", js.seed}};
        js.key = j.key;
        plan.jobs.push_back(j);
        specs.push_back(js);
      }
  sweep::WorkerPool pool(p.ords, st.jobs_per_gpu);
  const int rc = run_plan(plan, st, p, pool, [&](const sweep::Job& j, const margin::SsfrRunner& r,
                                                  const sweep::JobContext& jc) {
    margin::SsfrRunner run = r;
    run.checkpoint = jc.scratch;
    return margin::run_ssfr_noise_job(specs[static_cast<std::size_t>(j.index)], run);
  });
  if (rc != 0) throw UserError("hebb ssfr noise failed", rc);
}

// ---------------------------------------------------------------- usability
void run_usability(CLI::App* sub, SsfrSweepState& st) {
  Prepared p = prepare_sweep(sub, st);
  if (p.done) return;
  require(st.dims.size() == 1 && st.facts.size() <= 1 && st.junks.size() == 1,
          "hebb ssfr usability takes one --dim, one --facts and one --junk");
  const std::int64_t d = st.dims.front(), F = st.facts.empty() ? 2048 : st.facts.front(), J = st.junks.front();
  require(d >= 2 && d <= 4096, "--dim must be in [2, 4096] (got {})", d);
  require(F >= 2 && F <= (1 << 24), "--facts must be in [2, 16777216] (got {})", F);
  check_dims(st.widths, "--widths", 1, 1 << 24);
  const mlp::SsfrMlpChoice choice = mlp::parse_ssfr_mlp(st.mlp);
  require(choice.kind == mlp::SsfrMlpKind::method && choice.method.kind != mlp::MethodKind::exact_k2,
          "--mlp takes a method spec with a width (gd, hebbian, hebbian:whitened, hebbian:data-dependent, ntk; got '{}')",
          st.mlp);
  sweep::Plan plan;
  plan.grid_axes = {"width", "seed"};
  plan.grid_values = {"mlp_acc", "combined_acc", "gamma_min"};
  plan.finalizer = margin::kSsfrUsabilityFinalizer;
  std::vector<margin::SsfrUsabilitySpec> specs;
  for (const std::int64_t w : st.widths)
    for (int s = 0; s < st.seeds; ++s) {
      margin::SsfrUsabilitySpec js;
      js.mlp = choice;
      js.dim = d;
      js.facts = F;
      js.junk = J;
      js.junk_vocab = st.junk_vocab > 0 ? st.junk_vocab : J;
      js.width = w;
      js.seed = seed_of(st, s);
      js.train = st.train;
      js.train.early_stop = true;  // §4.3 / §6.3 pre-training: stop at train accuracy 0.99
      js.block.vo_trainable = true;
      js.block.attn_residual = !st.no_attn_residual;
      (void)js.task();
      sweep::Job j;
      j.index = static_cast<std::int64_t>(plan.jobs.size());
      j.seed = js.seed;
      j.key = fmt::format("width={}/seed={}", w, js.seed);
      j.params = {{"width", w}, {"seed", js.seed}};
      js.key = j.key;
      plan.jobs.push_back(j);
      specs.push_back(js);
    }
  check_training_memory(st, p, specs.front().task(), d, *std::max_element(st.widths.begin(), st.widths.end()),
                        fmt::format("the largest {} point (d = {}, F = {})", choice.text, d, F), &choice.method);
  margin::register_ssfr_finalizers();
  sweep::WorkerPool pool(p.ords, st.jobs_per_gpu);
  const int rc = run_plan(plan, st, p, pool, [&](const sweep::Job& j, const margin::SsfrRunner& r,
                                                  const sweep::JobContext& jc) {
    const auto& js = specs[static_cast<std::size_t>(j.index)];
    std::string pre;
    if (!jc.scratch.empty())
      pre = (fs::path(jc.scratch).parent_path() / fmt::format("scratch-pretrain-seed={}.h5", js.seed)).string();
    return margin::run_ssfr_usability_job(js, r, pre);
  });
  if (rc != 0) throw UserError("hebb ssfr usability failed", rc);
}

const bool kFinalizers = (margin::register_ssfr_finalizers(), true);

}  // namespace

void add_ssfr_sweeps(CLI::App* ssfr) {
  (void)kFinalizers;
  {
    auto* sub = ssfr->add_subcommand(
        "capacity",
        "Transformer storage capacity with an inserted fact MLP (spec hebbian.md §4.6, Fig. 3b; §4.7, Fig. 10).\n"
        "--protocol fact-adaptive (§4.6, A.4.3): per (method, F, seed) the smallest width m whose MLP makes the\n"
        "trained attention reach best_acc >= --threshold (1.0) on map B with MLP_B; W_q, W_k trained, W_v = W_o =\n"
        "I, no residual; an MLP_A below --gate (1.0) standalone accuracy fails without training. --protocol\n"
        "train99 (§4.7, A.5.1): per (method, width m, seed) the largest F with best_train_acc >= 0.99; all four\n"
        "weights trained, residual on, F in [1, min(65536, 0.75 d m)]. Bisection as released: mid = (lo+hi)/2,\n"
        "stop when hi - lo < --search-tolerance (16). Every probe (gated or trained) is recorded; a killed run\n"
        "resumes from its recorded probes and the training in flight from its checkpoint (--resume).\n"
        "Writes /summary (protocol, mlp, dim, facts, width, params, found, accuracy_star, probes, trainings,\n"
        "gated, ...), /grid, /runs/<job>/probes/{width,facts,accuracy,success,cached,wall_s,note}.\n"
        "Presets: fig3b (fact-adaptive), fig10 (train99). See docs/hebb-ssfr.md.\n"
        "Example: hebb ssfr capacity --preset fig3b --facts 64,128 --out fig3b.h5");
    auto st = std::make_shared<SsfrSweepState>();
    add_shared(sub, *st, "ssfr_capacity.h5", 4000);
    sub->add_option("--protocol", st->protocol, "fact-adaptive (§4.6) or train99 (§4.7)")
        ->capture_default_str()
        ->check(CLI::IsMember({"fact-adaptive", "train99"}));
    sub->add_option("--methods", st->methods,
                    "Inserted-MLP methods, comma-separated (options stay with their method: gd,precision=tf32,ntk)")
        ->capture_default_str();
    sub->add_option("--dim", st->dims, "Model dimension d")->delimiter(',')->capture_default_str();
    sub->add_option("--facts", st->facts, "fact-adaptive: fact counts F (comma list)")->delimiter(',');
    sub->add_option("--widths", st->widths, "train99: MLP widths m (comma list)")->delimiter(',');
    sub->add_option("--junk", st->junks, "J: junk tokens before and after the key")
        ->delimiter(',')
        ->capture_default_str();
    sub->add_option("--search", st->search, "reference (bisection with --search-tolerance, as released) or fast")
        ->capture_default_str()
        ->check(CLI::IsMember({"reference", "fast"}));
    sub->add_option("--search-tolerance", st->tolerance, "reference: stop when hi - lo < this (spec: 16)")
        ->capture_default_str();
    sub->add_option("--search-lo", st->search_lo, "Smallest m (fact-adaptive) or F (train99) searched")
        ->capture_default_str();
    sub->add_option("--search-hi", st->search_hi,
                    "Largest m or F searched (0: fact-adaptive 65536, for gd ceil(64 F/d); train99 "
                    "min(65536, round(0.75 d m)))")
        ->capture_default_str();
    sub->add_option("--threshold", st->threshold, "Success level (default: 1.0 fact-adaptive, 0.99 train99)");
    sub->add_option("--gate", st->gate,
                    "Standalone accuracy MLP_A must reach before a training (default: 1.0 fact-adaptive, 0 train99)");
    sub->callback([sub, st] { run_capacity(sub, *st); });
  }
  {
    auto* sub = ssfr->add_subcommand(
        "noise",
        "Attention-noise ceiling (spec hebbian.md §4.4, Fig. 3a): per ((d, F), J, seed) attention-only\n"
        "pre-training (identity map, identity MLP, all four weights trained, early stop at 0.99, residual per\n"
        "--attn-residual), then over --noise-batches fresh batches of --noise-batch sequences (seed + 123456) the\n"
        "distance ||o_Q - e_k|| between the unit output at Q and the key's unit embedding: eps_attn = its maximum,\n"
        "with mean, std, p95, the largest angle and per-key maxima. --dim and --facts are paired lists.\n"
        "Writes /summary (eps_attn, dist_mean, dist_std, dist_p95, max_angle_deg, best_train_acc, ...), /grid,\n"
        "/runs/<job>/{loss,...,per_key_max_distance,weights}. Preset: fig3a. See docs/hebb-ssfr.md.\n"
        "Example: hebb ssfr noise --preset fig3a --out fig3a.h5");
    auto st = std::make_shared<SsfrSweepState>();
    st->dims = {64, 96, 128};
    st->facts = {512, 1152, 2048};
    st->junks = {2, 4, 8, 16};
    add_shared(sub, *st, "ssfr_noise.h5", 4000);
    sub->add_option("--dim", st->dims, "Model dimensions d (comma list, paired with --facts)")
        ->delimiter(',')
        ->capture_default_str();
    sub->add_option("--facts", st->facts, "Fact counts F (comma list, paired with --dim)")
        ->delimiter(',')
        ->capture_default_str();
    sub->add_option("--junk", st->junks, "Junk lengths J (comma list)")->delimiter(',')->capture_default_str();
    sub->add_flag("--attn-residual", st->attn_residual, "Residual z = a + x_Q (the code's default is off)");
    sub->add_option("--noise-batches", st->noise_batches, "Measurement batches (spec: 64)")->capture_default_str();
    sub->add_option("--noise-batch", st->noise_batch, "Sequences per measurement batch (spec: 512)")
        ->capture_default_str();
    sub->callback([sub, st] { run_noise(sub, *st); });
  }
  {
    auto* sub = ssfr->add_subcommand(
        "usability",
        "Margins govern usability (spec hebbian.md §4.3, Fig. 2a and Fig. 7): per seed the attention is\n"
        "pre-trained once with the identity MLP (identity map, all four weights, residual on, early stop at\n"
        "0.99); per (width, seed) a fact MLP (--mlp, default gd) is built on a fresh map B with the same\n"
        "embeddings, its standalone accuracy and per-key normalized-output margins gamma_i are measured, and\n"
        "attention + MLP is evaluated on SSFR(B) without further training. Writes /summary (mlp_acc, gamma_min,\n"
        "frac_positive, combined_acc, ...), /grid, /runs/<job>/key_margins, /usability (per width: means and\n"
        "stds over seeds, frac(gamma_i > tau) at tau = 0, 0.1, 0.2, 0.3, tau*; attribute tau_star). Preset:\n"
        "fig2a (fig7 reads the same file). See docs/hebb-ssfr.md.\n"
        "Example: hebb ssfr usability --preset fig2a --out fig2a.h5");
    auto st = std::make_shared<SsfrSweepState>();
    st->widths = {16, 19, 23, 28, 34, 40, 49, 58, 70, 84, 102, 122, 147, 177, 213, 256};
    st->facts = {2048};
    add_shared(sub, *st, "ssfr_usability.h5", 4000);
    sub->add_option("--mlp", st->mlp, "Inserted-MLP method (spec: gd = gd:transformer)")->capture_default_str();
    sub->add_option("--widths", st->widths, "MLP widths m (comma list)")->delimiter(',')->capture_default_str();
    sub->add_option("--dim", st->dims, "Model dimension d")->delimiter(',')->capture_default_str();
    sub->add_option("--facts", st->facts, "Fact count F")->capture_default_str();
    sub->add_option("--junk", st->junks, "J: junk tokens before and after the key")
        ->delimiter(',')
        ->capture_default_str();
    sub->add_flag("--no-attn-residual", st->no_attn_residual, "Pre-train without the residual (spec target: on)");
    sub->callback([sub, st] { run_usability(sub, *st); });
  }
}

}  // namespace memcap::hebb_app
