// Shared plumbing of the MQAR sweeps (mqar_sweeps.hpp): flags, checks, the plan printout and memory
// check, and the loop that runs one training per job through sweep::run_parallel, on the CPU (--jobs at
// once, the threads split between them) or on the GPUs of --devices (--jobs per GPU).
#include "mqar_sweeps.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "cli/preset.hpp"
#include "core/error.hpp"
#include "core/threads.hpp"
#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#include "kata/mqar_train_cuda.hpp"
#endif
#include "sweep/gpu_workers.hpp"

namespace memcap::kata_app {

using namespace memcap::kata;

namespace {

#ifdef MEMCAP_HAVE_CUDA
constexpr bool kHaveCudaTrainer = true;
#else
constexpr bool kHaveCudaTrainer = false;
#endif

// Which trainer runs a job: the CPU one, or (gpu) the CUDA one on the worker's current GPU.
void set_train_device(MqarTrainConfig& cfg, bool gpu) { cfg.device = gpu ? "cuda" : "cpu"; }

// --device cuda needs the CUDA trainer; auto falls back to the CPU (and says so) when it is not built.
void check_device(const SweepState& st, Prepared& p, const char* what) {
  if (p.ctx.device.device != Device::cuda || kHaveCudaTrainer) return;
  if (st.common.device == "cuda")
    throw DeviceError(fmt::format("{}: the CUDA path of the MQAR trainer is not in this build; use --device cpu", what));
  p.ctx.device.device = Device::cpu;
  p.ords.clear();
  if (cli::verbosity() >= 0) std::fprintf(stderr, "device: cpu (auto: the MQAR trainer has no CUDA path in this build)\n");
}

}  // namespace

void add_model_options(CLI::App* sub, kata::MqarModelConfig& m, const std::string& vocab_help) {
  sub->add_option("--d-model", m.d_model, "Model width d_model")->capture_default_str();
  sub->add_option("--layers", m.n_layers,
                  "Blocks (zoology, zoology-mlp: even, BaseConv and mixer alternate; transformer: a mixer in each)")
      ->capture_default_str();
  sub->add_option("--backbone", m.backbone,
                  "zoology (" + kata::MqarModel::backbone_description("zoology") + "), transformer (" +
                      kata::MqarModel::backbone_description("transformer") + ") or zoology-mlp (" +
                      kata::MqarModel::backbone_description("zoology-mlp") +
                      ": E.2's other reading, 'aligned on the Zoology backbone')")
      ->capture_default_str()
      ->check(CLI::IsMember(kata::MqarModel::backbones()));
  sub->add_option("--heads", m.heads, "Mixer heads (0 = softmax 1, others d_model/64)")->capture_default_str();
  sub->add_option("--vocab", m.vocab, vocab_help)->capture_default_str();
  sub->add_option("--chunk", m.chunk, "Delta-rule chunk size C")->capture_default_str();
  sub->add_option("--map-eps", m.map_eps, "Feature-map eps (< 0 = §4.4: 1e-4 PSD, 1e-6 orthant)")
      ->capture_default_str();
  sub->add_flag("--rope", m.rope, "RoPE on the mixer's q and k, after the short convs");
  sub->add_option("--rope-base", m.rope_base, "RoPE base theta (with --rope; spec: 1e4, U4: 500, 5e4)")
      ->capture_default_str();
}

void add_ow_examples_option(CLI::App* sub, std::string& ow_examples, const std::string& what) {
  sub->add_option("--ow-examples", ow_examples,
                  "Training set of " + what +
                      ":\nfresh (a new set of each slice's size every epoch) or fixed (one set repeated every epoch,\n"
                      "as MQAR without --fresh-examples). A fixed set is memorized (training loss ~1e-5, held-out loss\n"
                      "~7 at the training K) and KATA-M2 then falls far below Table 2 past K = 64; fresh reproduces it\n"
                      "(docs/kata-mqar.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fresh", "fixed"}));
}

bool overwrite_fresh(const std::string& ow_examples, bool fresh_examples) {
  require(!(fresh_examples && ow_examples == "fixed"),
          "--ow-examples fixed and --fresh-examples (a new set for every training) contradict each other");
  return fresh_examples || ow_examples == "fresh";
}

void add_shared(CLI::App* sub, SweepState& st, const std::string& default_out) {
  cli::add_common(sub, st.common, default_out);
  sub->get_option("--seed")->description("First seed; the seeds of a row are SEED, SEED+1, ... (--seeds of them)");
  cli::add_sweep(sub, st.sweep);
  sub->add_option("--preset", st.preset, "Named preset (experiments/presets/NAME.toml) or a .toml path; flags win")
      ->configurable(false);
  auto& c = st.cfg;
  sub->add_option("--mixers", st.mixers,
                  "Sequence mixers (comma list): softmax, m1, m2, m4, sigma2, sigma4, orthant, lorentz, delta-m1, "
                  "delta-m2, delta-<map>, gated-<map>, convex-<map>, gated-delta-<map> (gated: CPU only)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--lrs", st.lrs, "Peak learning rates (comma list); the best per row is kept")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--seeds", st.seeds, "Seeds per (mixer, learning rate)")->capture_default_str();
  sub->add_option("--devices", st.devices, "GPUs to spread trainings over: all, or numbers such as 0,1")
      ->capture_default_str();
  sub->add_option("--jobs", st.jobs,
                  "Trainings at once per device (CPU: the threads are split between them; GPU: per GPU)")
      ->capture_default_str();
  add_model_options(sub, c.model, "Vocabulary V");
  sub->add_option("--eval-examples", st.eval_examples, "Examples per evaluation slice")->capture_default_str();
  sub->add_option("--batch", c.batch, "Sequences per step")->capture_default_str();
  sub->add_option("--lr-min", c.lr_min, "Final learning rate of the cosine")->capture_default_str();
  sub->add_option("--weight-decay", c.weight_decay, "AdamW weight decay (every parameter)")->capture_default_str();
  sub->add_option("--beta2", c.beta2, "AdamW beta2")->capture_default_str();
  sub->add_option("--clip", c.clip, "Global gradient-norm clip (0 = none)")->capture_default_str();
  sub->add_option("--early-stop", c.early_stop, "Stop once every evaluation slice reaches this accuracy (>1 = never)")
      ->capture_default_str();
  sub->add_flag("--fresh-examples", c.fresh_examples, kFreshExamplesHelp);
  sub->add_option("--precision", c.precision,
                  "Forward/backward precision: f32, f64 (float64 reference) or tf32 (GPU only: TF32 tensor-core products)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f64", "tf32"}));
  sub->add_option("--mixer-kernel", c.mixer_kernel,
                  "GPU mixer core: auto, gemm, tiled, chunked-eval or gemm-psi (kata mqar train --help); recorded "
                  "per job as mixer_kernel")
      ->capture_default_str();
  sub->add_option("--micro-tokens", c.micro_tokens, "Tokens per micro-batch (results do not depend on --threads)")
      ->capture_default_str();
  sub->add_option("--checkpoint-every", c.checkpoint_every,
                  "Steps between training checkpoints in OUT.partial/ (0 = after each evaluation only)")
      ->capture_default_str();
}

Prepared prepare_sweep(CLI::App* sub, SweepState& st, const char* what) {
  if (!st.preset.empty()) cli::apply_preset(sub, st.preset);
  {  // the gated mixers have no CUDA path yet: refused before the device is even looked at
    MqarModelConfig mc = st.cfg.model;
    bool cpu_only = false;
    for (const auto& m : st.mixers) {
      mc.mixer = m;
      if (mc.cpu_only()) {
        cpu_only = true;
        if (st.common.device == "cuda") mc.require_cuda_support();
      }
    }
    if (cpu_only && st.common.device == "cuda") mc.require_cuda_support();
    if (cpu_only && st.common.device == "auto") {
      st.common.device = "cpu";
      if (cli::verbosity() >= 0)
        std::fprintf(stderr, "device: cpu (auto: gated mixers run on the CPU only for now)\n");
    }
  }
  const auto prep = cli::prepare(sub, st.common);
  Prepared p;
  p.done = prep.done;
  if (p.done) return p;
  p.ctx = prep.ctx;
  require(st.seeds >= 1 && st.seeds <= 1000, "--seeds must be in [1, 1000] (got {})", st.seeds);
  require(st.jobs >= 1 && st.jobs <= 64, "--jobs must be in [1, 64] (got {})", st.jobs);
  require(st.eval_examples >= 1, "--eval-examples {} must be >= 1", st.eval_examples);
  require(!st.mixers.empty(), "--mixers is empty");
  for (const auto& m : st.mixers) require(!m.empty(), "--mixers has an empty item");
  require_list_items(sub, "--lrs");
  require(!st.lrs.empty(), "--lrs is empty");
  std::vector<std::string> shown;
  for (double lr : st.lrs) {
    require(std::isfinite(lr) && lr > 0 && lr <= 10, "--lrs: learning rate {} must be in (0, 10]", lr);
    shown.push_back(fmt::format("{:g}", lr));
  }
  sweep::require_distinct(shown, "--lrs");
  sweep::require_distinct(st.mixers, "--mixers");
  for (const auto& m : st.mixers) {
    MqarModelConfig mc = st.cfg.model;
    mc.mixer = m;
    mc.validate();  // unknown mixer, heads, g | d_head: refused before anything runs
  }
  p.ords = sweep::gpu_ordinals(st.devices, p.ctx.device.device, st.common.device);
  check_device(st, p, what);
  // Every job's configuration is validated against the device the sweep runs on (--precision tf32 is GPU only).
  set_train_device(st.cfg, p.ctx.device.device == Device::cuda);
  if (!st.sweep.dry_run && !st.sweep.resume) io::check_output_path(st.common.out);
  return p;
}

void require_slice_list_given(CLI::App* sub, const std::string& flag, const std::string& text) {
  require(sub->get_option(flag)->count() == 0 || !text.empty(),
          "{} is empty: give T:K[:N] items separated by commas, e.g. 64:4,128:8:2000", flag);
}

void require_distinct_slices(const std::vector<TaskSlice>& slices, const std::string& flag, bool eval) {
  std::vector<std::string> shown;
  for (const auto& s : slices)
    shown.push_back(eval ? fmt::format("{}:{}", s.seq_len, s.keys)
                         : fmt::format("{}:{}:{}", s.seq_len, s.keys, s.examples));
  sweep::require_distinct(shown, flag);
}

void require_list_items(CLI::App* sub, const std::string& flag) {
  const auto* opt = sub->get_option(flag);
  if (opt->count() == 0) return;
  const auto& raw = opt->results();
  const bool all_empty = std::all_of(raw.begin(), raw.end(), [](const std::string& x) { return x.empty(); });
  require(!all_empty, "{} is empty: give a comma list", flag);
  for (const auto& x : raw) require(!x.empty(), "{} has an empty item", flag);
}

// The job's training configuration with everything set but the hooks.
MqarTrainConfig job_config(const SweepState& st, const std::string& mixer, double lr, std::uint64_t seed,
                           std::vector<TaskSlice> train, std::vector<TaskSlice> eval) {
  MqarTrainConfig c = st.cfg;
  c.model.mixer = mixer;
  c.lr = lr;
  c.seed = seed;
  c.train = std::move(train);
  c.eval = std::move(eval);
  c.validate();
  return c;
}

// Prints the per-mixer plan (parameters, state, memory) of a dry run; checks memory before a real run.
void plan_models(const SweepState& st, const Prepared& p, const std::vector<JobSpec>& specs, const char* what) {
  const bool gpu = p.ctx.device.device == Device::cuda;
  const int workers = st.jobs * std::max<int>(1, static_cast<int>(p.ords.size()));
  const int threads = std::max(1, max_threads() / (gpu ? 1 : st.jobs));
  std::set<std::string> done;
  double worst = 0;
  std::string worst_what;
  if (st.sweep.dry_run)
    fmt::print("{} plan: {} trainings, {} at once ({}), {} thread(s) each\n", what, specs.size(), workers,
               gpu ? fmt::format("{} per GPU on {} GPU(s)", st.jobs, p.ords.size()) : std::string("cpu"), threads);
  for (const auto& js : specs) {
    const std::string key = js.task + "/" + js.cfg.model.mixer;
    const double bytes = mqar_memory_bytes(js.cfg, threads);
    if (bytes > worst) {
      worst = bytes;
      worst_what = fmt::format("one {} training of {} ({} at once, {} thread(s) each with its own workspace{})",
                               js.task, js.cfg.model.mixer, st.jobs, threads,
                               js.data_from.empty() ? std::string() : "; data sized by " + js.data_from);
    }
    if (!st.sweep.dry_run || !done.insert(key).second) continue;
    const MqarModel model = MqarModel::build(js.cfg.model);
    std::int64_t longest = 0;
    for (const auto& s : js.cfg.eval) longest = std::max(longest, s.seq_len);
    std::string tr, ev;
    for (const auto& s : js.cfg.train) tr += fmt::format("{}{}:{}:{}", tr.empty() ? "" : ",", s.seq_len, s.keys, s.examples);
    for (const auto& s : js.cfg.eval) ev += fmt::format("{}{}:{}:{}", ev.empty() ? "" : ",", s.seq_len, s.keys, s.examples);
    fmt::print("  {:<9} {:<9} params {:>9}  state {:>9} (T = {})  steps {} ({} epochs x {})  cpu memory ~{:.0f} MB\n"
               "            train {}  eval {}\n",
               js.task, js.cfg.model.mixer, model.param_count(), model.state_size(longest), longest,
               js.cfg.steps_per_epoch() * js.cfg.epochs, js.cfg.epochs, js.cfg.steps_per_epoch(), bytes / 1e6, tr, ev);
  }
#ifdef MEMCAP_HAVE_CUDA
  if (gpu && !specs.empty()) {  // the largest training's device memory x trainings per GPU, on every GPU used
    double need = 0;
    std::string who;
    for (const auto& js : specs) {
      MqarTrainConfig c = js.cfg;
      c.device = "cuda";
      const double b = static_cast<double>(mqar_cuda_memory_bytes(c));
      if (b > need) {
        need = b;
        who = fmt::format("one {} training of {}", js.task, js.cfg.model.mixer);
      }
    }
    for (int o : p.ords) {
      gpu::set_device(o);
      const double free = static_cast<double>(gpu::memory_info().free);
      if (need * st.jobs <= 0.95 * free) continue;
      const std::string msg = fmt::format("{} needs about {:.2f} GiB of GPU memory ({} per GPU) but GPU {} has {:.2f} GiB "
                                          "free; lower --jobs or --batch",
                                          who, need / (1 << 30), st.jobs, o, free / (1 << 30));
      if (!st.sweep.dry_run) throw UserError(msg);
      std::fprintf(stderr, "kata: warning: %s (a real run stops here)\n", msg.c_str());
    }
    if (!p.ords.empty()) gpu::set_device(p.ords.front());
    if (st.sweep.dry_run) fmt::print("  gpu memory ~{:.0f} MB per training (the largest)\n", need / 1e6);
  }
#endif
  if (gpu && !specs.empty() && !st.sweep.dry_run) {  // the host's share of a GPU training: its data plan
    double data = 0;
    std::string who;
    for (const auto& js : specs)
      if (const double b = mqar_data_bytes(js.cfg); b > data) {
        data = b;
        who = fmt::format("the data plan of one {} training ({} at once per GPU{})", js.task, st.jobs,
                          js.data_from.empty() ? std::string() : "; sized by " + js.data_from);
      }
    sweep::require_memory(data * workers, who);
  }
  if (!gpu && !specs.empty()) {
    if (st.sweep.dry_run) {
      const auto& mc = st.cfg.model;
      fmt::print("  model     backbone {} ({}), {} layers, d_model {}, vocab {}{}\n", mc.backbone,
                 kata::MqarModel::backbone_description(mc.backbone),
                 mc.n_layers, mc.d_model, mc.vocab, mc.rope ? fmt::format(", RoPE base {:g}", mc.rope_base) : "");
      fmt::print("  optimizer AdamW betas ({}, {}), wd {}, clip {}, cosine to {}; batch {}; precision {}; checkpoint every "
                 "{} steps\n",
                 st.cfg.beta1, st.cfg.beta2, st.cfg.weight_decay, st.cfg.clip, st.cfg.lr_min, st.cfg.batch,
                 st.cfg.precision, st.cfg.checkpoint_every);
      fmt::print("  training  {}\n", st.cfg.fresh_examples ? "a new training set every epoch (--fresh-examples)"
                                                              : "one training set, repeated every epoch");
      const std::int64_t have = sweep::available_memory();
      if (have > 0 && worst * st.jobs > 0.9 * static_cast<double>(have))
        std::fprintf(stderr, "kata: warning: %s needs about %.2f GiB of memory but %.2f GiB are available (a real run "
                     "stops here)\n", worst_what.c_str(), worst * st.jobs / (1 << 30), static_cast<double>(have) / (1 << 30));
    } else {
      sweep::require_memory(worst * st.jobs, worst_what);
    }
  }
}


// Runs the plan; `row_of` builds a job's summary row from its training.
int run_specs(SweepState& st, const Prepared& p, const sweep::Plan& plan, const std::vector<JobSpec>& specs,
              const std::function<io::Row(const JobSpec&, const MqarJobRun&)>& row_of) {
  sweep::WorkerPool pool(p.ords, st.jobs);
  const bool gpu = p.ctx.device.device == Device::cuda;
  st.sweep.workers = gpu ? pool.workers() : st.jobs;
  const int threads = std::max(1, max_threads() / (gpu ? 1 : st.jobs));
  return sweep::run_parallel(plan, st.sweep, p.ctx, st.common.out, [&](const sweep::Job& j, const sweep::JobContext& jc) {
    const JobSpec& js = specs[static_cast<std::size_t>(j.index)];
    MqarTrainConfig cfg = js.cfg;
    std::string path;
    (void)pool.handles(jc, path);  // on a GPU: selects the worker's GPU; path "cuda:<n>" or "cpu"
    set_train_device(cfg, gpu);
    omp_set_num_threads(threads);  // this worker thread's OpenMP teams
    const std::string ckpt = jc.scratch.empty() ? std::string() : jc.scratch + "-ckpt";
    const MqarJobRun run = run_mqar_training(cfg, ckpt, gpu ? "cuda" : "cpu");
    if (run.diverged)
      std::fprintf(stderr, "kata: %s: %s (recorded as status diverged)\n", j.key.c_str(), run.message.c_str());
    sweep::JobOutput out;
    out.row = row_of(js, run);
    // The trainer's path with the GPU's ordinal: "cuda:f32" on GPU 1 -> "cuda:1:f32".
    std::string ran = run.diverged ? path : run.res.path;
    if (gpu && !run.diverged && ran.rfind("cuda", 0) == 0) ran = path + ran.substr(4);
    out.row.set("path", ran);
    out.row.set("mixer_kernel", run.diverged ? std::string() : run.res.mixer_kernel);
    out.row.set("status", run.diverged ? "diverged" : "done");
    if (!run.diverged) {
      const MqarTrainConfig c = js.cfg;
      const MqarTrainResult res = run.res;
      out.write_run = [c, res](h5::Group& g) { write_mqar_curves(g, c, res); };
    }
    return out;
  });
}


std::uint64_t seed_of(const SweepState& st, int i) { return st.common.seed + static_cast<std::uint64_t>(i); }

}  // namespace memcap::kata_app
