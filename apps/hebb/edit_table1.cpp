// `hebb edit table1`: the hyper-parameter grid of spec hebbian.md §4.9 on the sweep engine — one job per
// (edit fraction, method, hyper-parameter point) on one base model file (MLP swapping has no grid: one
// job per fraction), /summary one row per job, /best the best score per (fraction, method) as Table 1.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>

#include "cli/preset.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/threads.hpp"
#include "edit/edit_io.hpp"
#include "edit/edit_local.hpp"
#include "edit/edit_local_cuda.hpp"
#include "edit/edit_metrics.hpp"
#include "edit/edit_pipeline.hpp"
#include "edit_common.hpp"
#include "mlp/method.hpp"
#include "nn/edit_data.hpp"
#include "sweep/gpu_workers.hpp"
#include "sweep/sweep.hpp"

namespace memcap::hebb_app {

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kTable1Finalizer = "hebb-edit-table1";
constexpr const char* kWhat = "hebb edit table1";

struct Table1State {
  cli::CommonOptions common;
  sweep::Options sweep;
  std::string preset, base, data, devices = "all";
  std::int64_t dim = 0;
  int jobs = 1;          // CPU: jobs at once
  int jobs_per_gpu = 1;  // GPU: jobs at once on each GPU of --devices
  std::vector<std::string> methods = {"swap", "memit", "alphaedit", "rome"};
  std::vector<double> fractions = {0.02, 0.05, 0.1};
  // §4.9: steps and learning rates are shared by the three local editors
  std::vector<std::int64_t> steps = {10, 25, 100};
  std::vector<double> lrs = {0.005, 0.05, 0.5};
  std::vector<double> memit_lambdas = {15000, 1500, 150, 1}, memit_clips = {0.5, 0.75, 1.0};
  std::vector<double> alpha_clips = {0.75, 0.25, 0}, alpha_tols = {0.01, 1, 10};
  std::vector<double> rome_wds = {1.5e-3, 1.5e-4, 0}, rome_stops = {0.05, 0};
};

bool is_local(const std::string& m) { return m == "memit" || m == "alphaedit" || m == "rome"; }

// One job: the method, the fraction and (local editors) the editor's settings.
struct Spec {
  std::string method;
  double fraction = 0;
  edit::LocalEditConfig lc;
};

// Paper Table 1 (spec §5): score and r_NF per (fraction, method); NaN where the paper has no cell.
struct PaperCell {
  double fraction;
  const char* method;
  double eff, para, spec, score, r_nf;
};
constexpr PaperCell kPaper[] = {
    {0.02, "swap", 1.000, 1.000, 0.999, 1.000, 1.016},  {0.02, "alphaedit", 0.896, 0.899, 0.981, 0.924, 1.000},
    {0.02, "memit", 0.643, 0.645, 0.990, 0.729, 1.000}, {0.02, "rome", 1.000, 1.000, 0.009, 0.026, 1.238},
    {0.05, "swap", 0.998, 0.998, 0.998, 0.998, 1.057},  {0.05, "alphaedit", 0.747, 0.745, 0.909, 0.794, 1.001},
    {0.05, "memit", 0.128, 0.126, 0.986, 0.179, 1.001}, {0.05, "rome", 0.991, 0.991, 0.002, 0.006, 1.642},
    {0.10, "swap", 0.998, 0.999, 0.999, 0.999, 1.021},  {0.10, "alphaedit", 0.482, 0.482, 0.766, 0.550, 1.010},
    {0.10, "memit", 0.004, 0.003, 0.995, 0.005, 1.002}, {0.10, "rome", 0.834, 0.832, 0.001, 0.003, 2.405},
};
const PaperCell* paper_cell(double fraction, const std::string& method) {
  for (const auto& c : kPaper)
    if (std::abs(c.fraction - fraction) < 1e-12 && method == c.method) return &c;
  return nullptr;
}

// ---------------------------------------------------------------- /best (finalizer, also after merge)
void table1_finalizer(io::OutputFile& out, const io::Table& s, const nlohmann::json&) {
  if (s.rows() == 0 || !s.find("method") || !s.find("score")) return;
  const auto method = s.strings("method"), status = s.strings("status"), job = s.strings("job");
  const auto frac = s.numbers("fraction"), score = s.numbers("score");
  std::vector<std::pair<double, std::string>> keys;  // (fraction, method) in order of first appearance
  for (std::size_t i = 0; i < s.rows(); ++i)
    if (std::find(keys.begin(), keys.end(), std::make_pair(frac[i], method[i])) == keys.end())
      keys.emplace_back(frac[i], method[i]);
  std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::vector<std::string> metrics = {"n_altered", "efficacy", "paraphrase", "specificity", "score",
                                            "nf_ce_before", "nf_ce_after", "r_nf"};
  const std::vector<std::string> hypers = {"steps", "edit_lr", "edit_wd", "early_stop", "clip", "lambda", "tol"};
  io::Table t;
  std::string txt = fmt::format("{:>5} {:<16} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} | {:>6} {:>7} | {:>5}  {}\n", "edit%",
                                "method", "Eff", "Para", "Spec", "Score", "r_NF", "points", "paper", "r_NF", "fails",
                                "best hyper-parameters");
  for (const auto& [f, m] : keys) {
    std::int64_t best = -1, points = 0, failed = 0;
    for (std::size_t i = 0; i < s.rows(); ++i) {
      if (frac[i] != f || method[i] != m) continue;
      ++points;
      if (status[i] != "done" || !std::isfinite(score[i])) {
        ++failed;
        continue;
      }
      if (best < 0 || score[i] > score[static_cast<std::size_t>(best)]) best = static_cast<std::int64_t>(i);
    }
    const PaperCell* pc = paper_cell(f, m);
    io::Row r;
    r.set("fraction", f).set("method", m).set("points", points).set("failed", failed);
    const io::Row br = best >= 0 ? s.row(static_cast<std::size_t>(best)) : io::Row{};
    for (const auto& c : metrics) {
      if (c == "n_altered")
        r.set(c, best >= 0 ? static_cast<std::int64_t>(br.number(c)) : std::int64_t{0});
      else
        r.set(c, best >= 0 ? br.number(c) : kNaN);
    }
    for (const auto& c : hypers) r.set(c, best >= 0 ? br.number(c) : kNaN);
    r.set("job", best >= 0 ? job[static_cast<std::size_t>(best)] : std::string());
    r.set("paper_efficacy", pc ? pc->eff : kNaN)
        .set("paper_paraphrase", pc ? pc->para : kNaN)
        .set("paper_specificity", pc ? pc->spec : kNaN)
        .set("paper_score", pc ? pc->score : kNaN)
        .set("paper_r_nf", pc ? pc->r_nf : kNaN);
    t.append(r);
    const auto num = [](double x, int w, int p) {
      return std::isfinite(x) ? fmt::format("{:>{}.{}f}", x, w, p) : fmt::format("{:>{}}", "-", w);
    };
    std::string hp;
    if (best >= 0 && is_local(m)) {
      hp = fmt::format("steps {} lr {:g}", static_cast<std::int64_t>(br.number("steps")), br.number("edit_lr"));
      if (m == "memit") hp += fmt::format(" lambda {:g} clip {:g}", br.number("lambda"), br.number("clip"));
      if (m == "alphaedit") hp += fmt::format(" clip {:g} tol {:g}", br.number("clip"), br.number("tol"));
      if (m == "rome") hp += fmt::format(" wd {:g} early-stop {:g}", br.number("edit_wd"), br.number("early_stop"));
    }
    txt += fmt::format("{:>5.3g} {:<16} {} {} {} {} {} {:>7} | {} {} | {:>5}  {}\n", f * 100, m,
                       num(best >= 0 ? br.number("efficacy") : kNaN, 6, 3),
                       num(best >= 0 ? br.number("paraphrase") : kNaN, 6, 3),
                       num(best >= 0 ? br.number("specificity") : kNaN, 6, 3),
                       num(best >= 0 ? br.number("score") : kNaN, 6, 3), num(best >= 0 ? br.number("r_nf") : kNaN, 7, 3),
                       points, num(pc ? pc->score : kNaN, 6, 3), num(pc ? pc->r_nf : kNaN, 7, 3), failed, hp);
  }
  h5::Group g = out.root().child("best");
  t.write(g);
  std::fputs(("Table 1 (best score per edit fraction and method; /best; 'paper' = spec §5 Table 1):\n" + txt).c_str(),
             stdout);
  std::fflush(stdout);
}

void register_table1_finalizer() {
  static std::once_flag once;
  std::call_once(once, [] { sweep::register_finalizer(kTable1Finalizer, table1_finalizer); });
}

// ---------------------------------------------------------------- checks and plan
template <class T>
void require_list(const std::vector<T>& v, const char* flag, const char* why) {
  require(!v.empty(), "{} is empty (give at least one value: {})", flag, why);
  sweep::require_distinct(v, flag);
}
void check_values(const std::vector<double>& v, const char* flag, bool positive, const char* what) {
  for (double x : v)
    require(std::isfinite(x) && (positive ? x > 0 : x >= 0), "{}: {} must be {} ({})", flag, x,
            positive ? "a positive number" : ">= 0", what);
}

void check_flags(const Table1State& st) {
  require(st.jobs >= 1 && st.jobs <= 64, "--jobs must be in [1, 64] (got {})", st.jobs);
  require(st.jobs_per_gpu >= 1 && st.jobs_per_gpu <= 64, "--jobs-per-gpu must be in [1, 64] (got {})",
          st.jobs_per_gpu);
  require(st.dim >= 0, "--dim must be >= 0 (0 = the base file's); got {}", st.dim);
  require(!st.methods.empty(), "--methods is empty (swap, swap-constructed, memit, alphaedit, rome)");
  for (const auto& m : st.methods)
    require(m == "swap" || m == "swap-constructed" || is_local(m),
            "--methods: unknown method '{}' (swap, swap-constructed, memit, alphaedit, rome)", m);
  sweep::require_distinct(st.methods, "--methods");
  require(!(std::count(st.methods.begin(), st.methods.end(), "swap") &&
            std::count(st.methods.begin(), st.methods.end(), "swap-constructed")),
          "--methods lists swap and swap-constructed: a base holds one kind of expert (gd-mse for swap, "
          "data-dependent for swap-constructed); run them on their own bases");
  require_list(st.fractions, "--fractions", "edit fractions in (0, 1]");
  for (double f : st.fractions)
    require(std::isfinite(f) && f > 0 && f <= 1, "--fractions: {} must be in (0, 1] (the share of facts to edit)", f);
  const bool any_local = std::any_of(st.methods.begin(), st.methods.end(), is_local);
  if (any_local)
    for (double f : st.fractions)
      require(f < 1, "--fractions: 1 leaves no preserved facts for the local editors' key covariance; use < 1");
  const auto has = [&](const char* m) { return std::count(st.methods.begin(), st.methods.end(), m) > 0; };
  if (any_local) {
    require_list(st.steps, "--steps", "Adam steps of the residuals");
    for (auto s : st.steps) require(s >= 0 && s <= 1'000'000, "--steps: {} must be in [0, 1000000]", s);
    require_list(st.lrs, "--edit-lrs", "learning rates of the residuals");
    check_values(st.lrs, "--edit-lrs", true, "Adam learning rate of the residuals");
  }
  if (has("memit")) {
    require_list(st.memit_lambdas, "--memit-lambdas", "weights of C_p");
    check_values(st.memit_lambdas, "--memit-lambdas", false, "weight of the preserved-key covariance");
    require_list(st.memit_clips, "--memit-clips", "0 = no clip");
    check_values(st.memit_clips, "--memit-clips", false, "0 = no clip");
  }
  if (has("alphaedit")) {
    require_list(st.alpha_clips, "--alphaedit-clips", "0 = no clip");
    check_values(st.alpha_clips, "--alphaedit-clips", false, "0 = no clip");
    require_list(st.alpha_tols, "--alphaedit-tols", "null-space thresholds");
    check_values(st.alpha_tols, "--alphaedit-tols", true, "singular values below it span the null space");
  }
  if (has("rome")) {
    require_list(st.rome_wds, "--rome-wds", "weight decays");
    check_values(st.rome_wds, "--rome-wds", false, "Adam weight decay of the residuals");
    require_list(st.rome_stops, "--rome-early-stops", "0 = no early stop");
    check_values(st.rome_stops, "--rome-early-stops", false, "0 = no early stop");
  }
  // --devices: all, or GPU numbers (checked against the GPUs present by sweep::gpu_ordinals later).
  if (st.devices != "all") {
    require(st.common.device != "cpu", "--devices {} lists GPUs but this run uses the CPU (--device cpu)", st.devices);
    for (const std::string& tok : split_list(st.devices, ',', "--devices")) {
      char* end = nullptr;
      const long v = std::strtol(tok.c_str(), &end, 10);
      require(!tok.empty() && end && *end == '\0' && v >= 0 && v < 1024,
              "--devices wants all or GPU numbers separated by commas (got '{}')", st.devices);
    }
  }
}

// The plan: fraction outer, then --methods in order, then the method's grid (§4.9 order of the axes).
std::vector<Spec> build_specs(const Table1State& st) {
  std::vector<Spec> specs;
  for (double f : st.fractions)
    for (const auto& m : st.methods) {
      if (!is_local(m)) {
        specs.push_back({m, f, {}});
        continue;
      }
      for (auto steps : st.steps)
        for (double lr : st.lrs) {
          edit::LocalEditConfig c;
          c.method = m, c.steps = steps, c.lr = lr, c.weight_decay = 0, c.early_stop = 0, c.clip = 0;
          c.lambda = 0, c.tol = 10;
          if (m == "memit") {
            for (double lam : st.memit_lambdas)
              for (double clip : st.memit_clips) {
                c.lambda = lam, c.clip = clip;
                specs.push_back({m, f, c});
              }
          } else if (m == "alphaedit") {
            for (double clip : st.alpha_clips)
              for (double tol : st.alpha_tols) {
                c.clip = clip, c.tol = tol;
                specs.push_back({m, f, c});
              }
          } else {
            for (double wd : st.rome_wds)
              for (double es : st.rome_stops) {
                c.weight_decay = wd, c.early_stop = es;
                specs.push_back({m, f, c});
              }
          }
        }
    }
  for (const auto& s : specs)
    if (is_local(s.method)) s.lc.validate();
  return specs;
}

std::string job_key(const Spec& s) {
  std::string k = fmt::format("fraction={:g}/method={}", s.fraction, s.method);
  if (!is_local(s.method)) return k;
  k += fmt::format("/steps={}/lr={:g}", s.lc.steps, s.lc.lr);
  if (s.method == "memit") k += fmt::format("/lambda={:g}/clip={:g}", s.lc.lambda, s.lc.clip);
  if (s.method == "alphaedit") k += fmt::format("/clip={:g}/tol={:g}", s.lc.clip, s.lc.tol);
  if (s.method == "rome") k += fmt::format("/wd={:g}/early_stop={:g}", s.lc.weight_decay, s.lc.early_stop);
  return k;
}

// Bytes one job holds at its peak (CPU float64): a copy of the model (4 arenas: params, grads, Adam m, v),
// the activations of one 256-sequence batch (edit_model.cpp EditActs::resize), the keys, covariances and
// residuals of the local editors, or the GD expert's training on the F facts (swap).
double job_memory_bytes(const edit::EditModelConfig& c, std::int64_t F, std::int64_t K, std::int64_t T) {
  const double d = static_cast<double>(c.d), H = static_cast<double>(c.qk_hidden), h = static_cast<double>(c.fact_hidden),
               R = static_cast<double>(c.rank), N = 256.0 * static_cast<double>(T), f = static_cast<double>(F);
  const double model = 4.0 * 8.0 *
                       static_cast<double>(edit::edit_trainable_layout(c).numel() + edit::edit_frozen_layout(c).numel());
  const double acts = 8.0 * N * (31 * d + 13 + 6 * H + 6 * h + 2 * R) + 4.0 * N;
  const double local = 8.0 * (3 * h * f + 4 * h * h + 2 * d * f + d * h);
  const double swap = 8.0 * f * (2 * d + 6 * h) + 8.0 * 8.0 * h * d;
  const double preds = 3.0 * 4.0 * static_cast<double>(F * K);
  return model + acts + std::max(local, swap) + preds;
}

// What the jobs share, loaded once per process: the base model, the data, and (lazily) the pre-edit
// evaluation of every prompt, which no editor changes.
struct Shared {
  edit::BaseModelFile base;
  nn::EditCorpus corpus;
  nn::EditSequences seqs;
  std::unique_ptr<edit::EditModel> model;
  std::once_flag pre_once;
  edit::PromptEval pre;
  // CPU: evaluate_prompts; GPU: the first job's worker evaluates with the base's expert (a GPU evaluation in
  // float32: every job of the run then compares against the same pre-edit numbers).
  const edit::PromptEval& pre_eval(edit::EditGpu* eg) {
    std::call_once(pre_once, [this, eg] {
      if (eg) {
        eg->reset_expert();
        pre = eg->evaluate();
      } else {
        pre = edit::evaluate_prompts(*model, seqs);
      }
    });
    return pre;
  }
};

io::Row job_row(const Spec& s, const edit::EditSet& set) {
  io::Row r;
  r.set("method", s.method)
      .set("fraction", s.fraction)
      .set("facts", set.facts)
      .set("templates", set.templates)
      .set("n_altered", set.n_altered);
  return r;
}

// eg / hd: the worker's GPU editors and handles (nullptr: the CPU path, float64); path: "cpu" or "cuda:<ordinal>".
sweep::JobOutput run_job(Shared& sh, const Spec& s, std::uint64_t seed, int threads, edit::EditGpu* eg,
                         gpu::Handles* hd, const std::string& path) {
  omp_set_num_threads(threads);
  const auto& corpus = sh.corpus;
  const edit::EditSet set = edit::select_edit_set(corpus.num_facts(), corpus.num_templates(), s.fraction, seed);
  const edit::PromptEval& pre = sh.pre_eval(eg);
  const edit::EditMetrics m_pre = edit::edit_metrics(set, pre.predicted, corpus.author_token);
  const bool local = is_local(s.method);
  // the CPU path edits a copy of the base; the GPU path only reads it (the device model is the worker's)
  std::unique_ptr<edit::EditModel> copy = eg ? nullptr : std::make_unique<edit::EditModel>(*sh.model);
  const edit::EditModel& model = eg ? *sh.model : *copy;
  ExpertBuild ex;
  edit::LocalEditResult le;
  std::string status = "done", message;
  const auto t_edit = std::chrono::steady_clock::now();
  try {
    if (local) {
      le = eg ? eg->local_edit(set, corpus.author_token, s.lc)
              : edit::local_edit(*copy, sh.seqs, set, corpus.author_token, s.lc);
      ex.mlp = sh.base.expert;
      ex.mlp.B += le.delta;
      ex.mlp.method = fmt::format("{}+{}", sh.base.info.expert_method, s.method);
      ex.accuracy = expert_accuracy_on(ex.mlp, edit::expert_factset(model, corpus, set.target_fact), hd);
    } else {
      const mlp::FactSet fs = edit::expert_factset(model, corpus, set.target_fact);
      // swap-constructed: the base's own random factors (as `hebb edit run`'s default); swap: trained from --seed
      const std::uint64_t expert_seed = s.method == "swap-constructed" ? sh.base.info.expert_seed : seed;
      ex = build_expert(sh.base.info.expert, sh.base.info.expert_method, fs, sh.base.config.fact_hidden, expert_seed,
                        {}, eg != nullptr, hd);
    }
  } catch (const NumericError& e) {  // a diverged residual optimization (e.g. lr 0.5): recorded, the grid goes on
    status = "diverged";
    message = e.what();
    std::fprintf(stderr, "%s: %s: %s (recorded as status diverged)\n", kWhat, job_key(s).c_str(), e.what());
  }
  const double edit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_edit).count();
  edit::PromptEval post;
  edit::EditMetrics m;
  double r_nf = kNaN;
  if (status == "done") {
    if (eg) {
      eg->set_expert(ex.mlp);
      post = eg->evaluate();
    } else {
      edit::load_expert(*copy, ex.mlp);
      post = edit::evaluate_prompts(*copy, sh.seqs);
    }
    m = edit::edit_metrics(set, post.predicted, corpus.author_token);
    r_nf = edit::nonfact_ratio(pre.nonfact_ce, post.nonfact_ce);
  } else {
    m.efficacy = m.paraphrase = m.specificity = m.specificity_paraphrase = m.score = kNaN;
    post.nonfact_ce = kNaN;
  }
  const bool ok = status == "done";
  io::Row r = job_row(s, set);
  r.set("efficacy", m.efficacy)
      .set("paraphrase", m.paraphrase)
      .set("specificity", m.specificity)
      .set("specificity_paraphrase", m.specificity_paraphrase)
      .set("score", m.score)
      .set("nf_ce_before", pre.nonfact_ce)
      .set("nf_ce_after", post.nonfact_ce)
      .set("r_nf", r_nf)
      .set("efficacy_pre", m_pre.efficacy)
      .set("paraphrase_pre", m_pre.paraphrase)
      .set("specificity_pre", m_pre.specificity)
      .set("value_accuracy_pre", pre.value_accuracy)
      .set("nonfact_tokens", pre.nonfact_tokens)
      .set("steps", local ? s.lc.steps : std::int64_t{0})
      .set("edit_lr", local ? s.lc.lr : 0.0)
      .set("edit_wd", local ? s.lc.weight_decay : 0.0)
      .set("early_stop", local ? s.lc.early_stop : 0.0)
      .set("clip", local ? s.lc.clip : 0.0)
      .set("lambda", s.method == "memit" ? s.lc.lambda : 0.0)
      .set("tol", s.method == "alphaedit" ? s.lc.tol : 0.0)
      .set("residual_loss", local && ok ? le.residual_loss : (local ? kNaN : 0.0))
      .set("residual_norm", local && ok ? le.residual_norm : (local ? kNaN : 0.0))
      .set("converged", local && ok ? le.converged : std::int64_t{0})
      .set("null_dim", local && ok ? le.null_dim : std::int64_t{-1})
      .set("mlp_accuracy", ok ? ex.accuracy : kNaN)
      .set("expert_final_loss", ok ? ex.final_loss : kNaN)
      .set("expert_epochs", ok ? ex.epochs_run : std::int64_t{0})
      .set("dim", sh.base.config.d)
      .set("edit_s", edit_s)
      .set("eval_s", ok ? post.wall_s : 0.0)
      .set("path", path)
      .set("precision", eg ? "f32" : "f64")
      .set("status", status)
      .set("message", message);
  set_nonfact_split(r, pre, post, ok);  // where r_NF comes from (nn::NonfactClass)
  sweep::JobOutput out;
  out.row = std::move(r);
  return out;
}

// ---------------------------------------------------------------- the command
void run_table1(CLI::App* sub, Table1State& st) {
  if (!st.preset.empty()) cli::apply_preset(sub, st.preset);
  const auto prep = cli::prepare(sub, st.common);
  if (prep.done) return;
  io::RunContext ctx = prep.ctx;
  check_flags(st);
  require(!st.base.empty() || st.sweep.dry_run,
          "--base FILE.h5 is required (a base model written by 'hebb edit base'; --dry-run alone may omit it)");
  // --device cuda (no GPU: DeviceError from prepare) or auto on a GPU: every job on a GPU of --devices,
  // --jobs-per-gpu at once on each, in float32; the CPU: --jobs at once, float64.
  const bool on_gpu = ctx.device.device == Device::cuda;
  const std::vector<int> ords = sweep::gpu_ordinals(st.devices, ctx.device.device, st.common.device);
  const int workers = on_gpu ? static_cast<int>(ords.size()) * st.jobs_per_gpu : st.jobs;
  const std::vector<Spec> specs = build_specs(st);

  // The base: read its configuration (a dry run without --base assumes the paper's: 16,384 facts x 16
  // templates, d = 256, vocabulary 32,815, expert h = 512).
  auto sh = std::make_shared<Shared>();
  edit::EditModelConfig cfg;
  std::int64_t F = 16384, K = 16, T = 11;
  std::string where = "no --base: the paper's base assumed (16384 facts x 16 templates, d 256, vocabulary 32815, h 512)";
  if (!st.base.empty()) {
    const h5::File bf = h5::File::open_read(st.base);
    sh->base = edit::read_base_model(bf);
    cfg = sh->base.config;
    F = sh->base.info.facts;
    K = sh->base.info.templates;
    if (st.dim > 0 && st.dim != cfg.d)
      throw UserError(fmt::format("--base '{}' has d = {}, not the --dim {} asked for; train a base model with --dim {}",
                                  st.base, cfg.d, st.dim, st.dim));
    for (const auto& m : st.methods) {
      if (is_local(m)) continue;
      const std::string want = m == "swap" ? "gd-mse" : "data-dependent";
      if (sh->base.info.expert != want)
        throw UserError(fmt::format("--methods {}: swaps a {} expert, but --base '{}' holds a {} expert; {}", m, want,
                                    st.base, sh->base.info.expert,
                                    m == "swap" ? "use swap-constructed for it" : "train the base with --expert data-dependent"));
    }
    const std::string data = find_edit_data(st.data);
    sh->corpus = nn::load_edit_corpus(data, F, K);
    edit::check_base_corpus(sh->base, st.base, sh->corpus, data);
    sh->seqs = nn::pack_edit_sequences(sh->corpus, nn::EditLabels::all);
    T = sh->seqs.T;
    where = fmt::format("{} ({} facts x {} templates, d {}, vocabulary {}, {} expert h {})", st.base, F, K, cfg.d,
                        cfg.vocab, sh->base.info.expert, cfg.fact_hidden);
    // The base's identity goes into /config, so --resume and merge refuse another base at the same path.
    ctx.config["base_model"] = {{"facts", F},
                                {"templates", K},
                                {"d", cfg.d},
                                {"vocab_fingerprint", fmt::format("{:016x}", sh->base.info.vocab_fingerprint)},
                                {"expert", sh->base.info.expert},
                                {"expert_method", sh->base.info.expert_method},
                                {"seed", sh->base.info.seed}};
  }
  for (double f : st.fractions) (void)edit::altered_count(F, f);  // round(F p) >= 1, before any work

  // Plan printout (dry run) and the memory checks (host; on the GPU also every GPU of --devices), before any
  // file is created.
  const int threads = std::max(1, max_threads() / workers);
  const double per_job = job_memory_bytes(cfg, F, K, T);
  const double shared = 4.0 * 8.0 *
                            static_cast<double>(edit::edit_trainable_layout(cfg).numel() +
                                                edit::edit_frozen_layout(cfg).numel()) +
                        3.0 * 4.0 * static_cast<double>(F * K * T);
  const double need = shared + per_job * workers;
  double gpu_per_job = 0;
  if (on_gpu) {
    nn::EditSequences shape_only;  // edit_gpu_bytes reads S and T only
    shape_only.S = F * K;
    shape_only.T = T;
    // the device editors + the swap's GD expert training / the expert's accuracy (a margin of 512 MiB)
    gpu_per_job = static_cast<double>(edit::edit_gpu_bytes(cfg, shape_only, F)) + static_cast<double>(512 << 20);
  }
  std::string gpu_problem;
#ifdef MEMCAP_HAVE_CUDA
  for (int o : ords) {
    gpu::set_device(o);
    const double free = static_cast<double>(gpu::memory_info().free);
    if (gpu_per_job * st.jobs_per_gpu > 0.95 * free && gpu_problem.empty())
      gpu_problem = fmt::format("{}: {} job(s) per GPU need about {:.2f} GiB of GPU memory but GPU {} has {:.2f} GiB "
                                "free; lower --jobs-per-gpu",
                                kWhat, st.jobs_per_gpu, gpu_per_job * st.jobs_per_gpu / (1 << 30), o, free / (1 << 30));
  }
  if (!ords.empty()) gpu::set_device(ords.front());
#endif
  if (st.sweep.dry_run) {
    if (on_gpu)
      fmt::print("{} plan: {} jobs, {} at once on {} GPU(s) ({} per GPU, float32), {} thread(s) each; seed {}\n", kWhat,
                 specs.size(), workers, ords.size(), st.jobs_per_gpu, threads, st.common.seed);
    else
      fmt::print("{} plan: {} jobs, {} at once on the cpu, {} thread(s) each; seed {}\n", kWhat, specs.size(),
                 st.jobs, threads, st.common.seed);
    fmt::print("  base: {}\n", where);
    fmt::print("  {:<16} {:>6} {:>13}\n", "method", "jobs", "per fraction");
    for (const auto& m : st.methods) {
      const auto n = std::count_if(specs.begin(), specs.end(), [&](const Spec& s) { return s.method == m; });
      fmt::print("  {:<16} {:>6} {:>13}\n", m, n, n / static_cast<std::int64_t>(st.fractions.size()));
    }
    for (double f : st.fractions)
      fmt::print("  fraction {:g}: {} facts altered of {}\n", f, edit::altered_count(F, f), F);
    fmt::print("  memory ~{:.0f} MB per job, ~{:.0f} MB in all ({} at once + the shared base model and data)\n",
               per_job / 1e6, need / 1e6, workers);
    if (on_gpu)
      fmt::print("  GPU memory ~{:.0f} MB per job, ~{:.0f} MB per GPU\n", gpu_per_job / 1e6,
                 gpu_per_job * st.jobs_per_gpu / 1e6);
    if (!gpu_problem.empty()) std::fprintf(stderr, "%s: warning: %s (a real run stops here)\n", kWhat, gpu_problem.c_str());
    const std::int64_t have = sweep::available_memory();
    if (have > 0 && need > 0.9 * static_cast<double>(have))
      std::fprintf(stderr, "%s: warning: the plan needs about %.2f GiB of memory but %.2f GiB are available (a real run "
                   "stops here)\n", kWhat, need / (1 << 30), static_cast<double>(have) / (1 << 30));
  } else {
    if (!gpu_problem.empty()) throw UserError(gpu_problem);
    sweep::require_memory(need, fmt::format("{} jobs at once of the edit grid ({})", workers,
                                            on_gpu ? "GPUs x --jobs-per-gpu" : "--jobs"));
    if (!st.sweep.resume) io::check_output_path(st.common.out);
  }

  sweep::Plan plan;
  plan.finalizer = kTable1Finalizer;
  for (const auto& s : specs) {
    sweep::Job j;
    j.index = static_cast<std::int64_t>(plan.jobs.size());
    j.seed = st.common.seed;  // one edit set per fraction for every method: the same seed for every job
    j.key = job_key(s);
    // longest first: the swap's GD expert, then the local editors by altered facts x steps
    j.cost = is_local(s.method) ? s.fraction * static_cast<double>(s.lc.steps + 1) : 1e6;
    j.params = {{"method", s.method}, {"fraction", s.fraction}};
    if (is_local(s.method))
      j.params.update({{"steps", s.lc.steps}, {"edit_lr", s.lc.lr}, {"edit_wd", s.lc.weight_decay},
                       {"early_stop", s.lc.early_stop}, {"clip", s.lc.clip}, {"lambda", s.lc.lambda}, {"tol", s.lc.tol}});
    plan.jobs.push_back(j);
  }
  if (!st.sweep.dry_run) {
    sh->model = std::make_unique<edit::EditModel>(cfg);
    const h5::File bf = h5::File::open_read(st.base);
    edit::load_base_weights(bf, *sh->model);
    edit::load_expert(*sh->model, sh->base.expert);
  }
  st.sweep.workers = workers;
  sweep::WorkerPool pool(ords, st.jobs_per_gpu);
  // One GPU editor object per worker (the device model, prompts and buffers), made on first use on the worker's
  // GPU and freed with that GPU current before the pool's streams go.
  struct Slots {
    std::vector<int> ord;
    std::vector<std::unique_ptr<edit::EditGpu>> eg;
    ~Slots() {
      for (std::size_t i = 0; i < eg.size(); ++i) {
        if (!eg[i]) continue;
#ifdef MEMCAP_HAVE_CUDA
        try {
          gpu::set_device(ord[i]);
        } catch (...) {
        }
#endif
        eg[i].reset();
      }
    }
  } slots;
  slots.ord.assign(static_cast<std::size_t>(workers), 0);
  slots.eg.resize(static_cast<std::size_t>(workers));
  const int rc = sweep::run_parallel(plan, st.sweep, ctx, st.common.out,
                                     [&](const sweep::Job& j, const sweep::JobContext& jc) {
                                       std::string path;
                                       gpu::Handles* hd = pool.handles(jc, path);
                                       edit::EditGpu* eg = nullptr;
                                       if (hd) {
                                         const auto w = static_cast<std::size_t>(jc.worker);
                                         if (!slots.eg[w]) {
                                           slots.ord[w] = ords[w % ords.size()];
                                           slots.eg[w] = std::make_unique<edit::EditGpu>(*sh->model, sh->seqs, *hd);
                                         }
                                         eg = slots.eg[w].get();
                                       }
                                       return run_job(*sh, specs[static_cast<std::size_t>(j.index)], j.seed, threads,
                                                      eg, hd, path);
                                     });
  if (rc != 0) throw UserError(fmt::format("{} failed", kWhat), rc);
}

}  // namespace

void add_edit_table1(CLI::App* edit) {
  register_table1_finalizer();
  auto* sub = edit->add_subcommand(
      "table1",
      "Table 1 / Figs. 3c, 8, 9 of spec hebbian.md §4.9 on the sweep engine: one job per (edit fraction, method,\n"
      "hyper-parameter point) on one base model (--base, from 'hebb edit base'), each an 'hebb edit run': MLP\n"
      "swapping (swap, or swap-constructed on a data-dependent base; one job per fraction) and the local editors'\n"
      "grids (defaults = §4.9, 732 jobs: MEMIT --steps x --edit-lrs x --memit-lambdas x --memit-clips, AlphaEdit\n"
      "--steps x --edit-lrs x --alphaedit-clips x --alphaedit-tols, ROME --steps x --edit-lrs x --rome-wds x\n"
      "--rome-early-stops; a clip or early stop of 0 is the paper's None). Every job edits the same facts per\n"
      "fraction (--seed). /summary: one row per job (efficacy, paraphrase, specificity, score, nf_ce_before,\n"
      "nf_ce_after, r_nf and the non-fact CE by position nf_ce_{prefix,book,tail}_{before,after}, the\n"
      "hyper-parameters, status done | diverged); /best: the best score per (fraction,\n"
      "method) beside the paper's cell, printed at the end and after 'hebb merge'. --dry-run (jobs per method,\n"
      "memory), --shard i/n, --resume, --jobs (jobs at once on the CPU). --device cuda (or auto on a GPU): the\n"
      "jobs run on the GPUs of --devices, --jobs-per-gpu at once on each (float32; the closed-form dW on the CPU).\n"
      "Presets: edit-table1 (the paper's grid), edit-table1-smoke (seconds on a miniature base).\n"
      "Example: hebb edit table1 --preset edit-table1 --base base.h5 --out table1.h5");
  auto st = std::make_shared<Table1State>();
  st->common.seed = 42;
  cli::add_common(sub, st->common, "table1.h5");
  sub->get_option("--seed")->description("Seed of the edit set (which facts change, and to what) and of the swap's GD "
                                          "expert (swap-constructed rebuilds with the base's own random factors); "
                                          "every job of a fraction edits the same facts");
  cli::add_sweep(sub, st->sweep);
  sub->add_option("--preset", st->preset, "Named preset (experiments/presets/NAME.toml) or a .toml path; flags win")
      ->configurable(false);
  sub->add_option("--base", st->base, "Base model FILE.h5 from 'hebb edit base' (required except with --dry-run)");
  sub->add_option("--data", st->data, "Folder with book_authors.csv and author_templates.txt (as in hebb edit base)");
  sub->add_option("--dim,-d", st->dim, "Expected model width (0 = the base file's; another value is refused)")
      ->capture_default_str();
  sub->add_option("--methods", st->methods, "Editors (comma list): swap, swap-constructed, memit, alphaedit, rome")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--fractions", st->fractions, "Edit fractions in (0, 1] (comma list; < 1 with a local editor)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--steps", st->steps, "Local editors: Adam steps of the residual optimization (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--edit-lrs", st->lrs, "Local editors: Adam learning rates of the residuals (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--memit-lambdas", st->memit_lambdas, "MEMIT: weights lambda of C_p (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--memit-clips", st->memit_clips, "MEMIT: residual clips ||r|| <= clip ||W_out k|| (0 = none)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--alphaedit-clips", st->alpha_clips, "AlphaEdit: residual clips (0 = none, the paper's None)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--alphaedit-tols", st->alpha_tols, "AlphaEdit: null-space thresholds on the singular values of "
                                                      "Kp Kp^T (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--rome-wds", st->rome_wds, "ROME: Adam weight decays of the residuals (comma list)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--rome-early-stops", st->rome_stops, "ROME: stop a fact once its loss < this (0 = none)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--jobs", st->jobs, "Jobs at once on the CPU (the --threads are split between them)")
      ->capture_default_str();
  sub->add_option("--devices", st->devices, "GPUs to spread the jobs over: all, or numbers such as 0,1")
      ->capture_default_str();
  sub->add_option("--jobs-per-gpu", st->jobs_per_gpu,
                  "Jobs at once on each GPU (each on its own stream, with its own copy of the model on the device)")
      ->capture_default_str();
  sub->callback([sub, st] { run_table1(sub, *st); });
}

}  // namespace memcap::hebb_app
