// One job of `hebb ssfr usability` (spec hebbian.md §4.3, Fig. 2a / Fig. 7): the attention of one
// seed pre-trained with the identity MLP (§6.3; trained once per seed and kept in a file that every
// width of that seed reads), a fact MLP of width m built on a fresh map B with the same embeddings,
// its standalone accuracy and per-key normalized-output margins γ_i (§3.1 #2), and the accuracy of
// attention + inserted MLP on SSFR(B) (no further training). Plus the τ* fit and its finalizer.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "margin/margins.hpp"
#include "margin/ssfr_jobs.hpp"
#include "mlp/constructions.hpp"
#include "sweep/sweep.hpp"

namespace memcap::margin {

namespace {

struct Pretrained {
  std::vector<double> params;
  double best_train_acc = 0;
  std::int64_t steps_run = 0;
};

// One lock per pre-training file: two workers of one seed wait for one training.
std::mutex& file_lock(const std::string& path) {
  static std::mutex guard;
  static std::map<std::string, std::unique_ptr<std::mutex>> locks;
  std::lock_guard<std::mutex> g(guard);
  auto& m = locks[path];
  if (!m) m = std::make_unique<std::mutex>();
  return *m;
}

Pretrained pretrain(const nn::SsfrProblem& p, const nn::SsfrTrainConfig& cfg, const SsfrRunner& run,
                    const std::string& file) {
  const std::string fp = ssfr_fingerprint(p, "identity", 0, cfg, run.device);
  std::lock_guard<std::mutex> g(file_lock(file));
  std::error_code ec;
  if (!file.empty() && std::filesystem::exists(file, ec) && h5::is_hdf5(file)) {
    const auto f = h5::File::open_read(file);
    if (f.attr_string("fingerprint").value_or("") == fp) {
      Pretrained r;
      r.params = f.read_doubles("params");
      r.best_train_acc = f.attr_double("best_train_acc").value_or(0);
      r.steps_run = f.attr_int("steps_run").value_or(0);
      return r;
    }
  }
  SsfrRunner r = run;
  r.checkpoint = file.empty() ? std::string() : file + ".ckpt";
  const nn::SsfrTrainResult res = train_ssfr(p, cfg, fp, r);
  Pretrained out{res.params, res.best_train_acc, res.steps_run};
  if (!file.empty()) {
    const std::string tmp = file + ".tmp-" + std::to_string(getpid());
    {
      auto f = h5::File::create(tmp);
      f.attr("fingerprint", fp);
      f.attr("best_train_acc", res.best_train_acc);
      f.attr("steps_run", res.steps_run);
      f.write("params", std::span<const double>(res.params));
      f.close();
    }
    std::filesystem::rename(tmp, file);
  }
  return out;
}

}  // namespace

double fraction_above(const std::vector<double>& margins, double tau) {
  if (margins.empty()) return std::numeric_limits<double>::quiet_NaN();
  const auto n = std::count_if(margins.begin(), margins.end(), [tau](double g) { return g > tau; });
  return static_cast<double>(n) / static_cast<double>(margins.size());
}

double fit_tau_star(const std::vector<std::vector<double>>& margins_per_width, const std::vector<double>& accuracy) {
  require(!margins_per_width.empty() && margins_per_width.size() == accuracy.size(),
          "the tau* fit needs one accuracy per width ({} widths, {} accuracies)", margins_per_width.size(),
          accuracy.size());
  double best_tau = -1, best = std::numeric_limits<double>::infinity();
  for (int k = 0; k < 2001; ++k) {
    const double tau = -1.0 + 2.0 * k / 2000.0;
    double sse = 0;
    for (std::size_t w = 0; w < accuracy.size(); ++w) {
      const double e = fraction_above(margins_per_width[w], tau) - accuracy[w];
      sse += e * e;
    }
    sse /= static_cast<double>(accuracy.size());
    if (sse < best) best = sse, best_tau = tau;
  }
  return best_tau;
}

SsfrJobOutput run_ssfr_usability_job(const SsfrUsabilitySpec& spec, const SsfrRunner& run,
                                     const std::string& pretrain_file) {
  const auto t0 = std::chrono::steady_clock::now();
  const mlp::SsfrSetup setup = spec.identity_setup();
  nn::SsfrTrainConfig cfg = spec.train;
  cfg.seed = spec.seed;
  const Pretrained att = pretrain(setup.problem, cfg, run, pretrain_file);

  // The fact MLP on a fresh map B (§6.3: same embeddings), its margins and standalone accuracy.
  mlp::FactSet fb = setup.facts;
  fb.map = mlp::ssfr_map_b(spec.facts, spec.seed);
  const mlp::GatedMLP mlp = mlp::build_ssfr_mlp(spec.mlp.method, fb, spec.width, spec.seed,
                                                run.device == Device::cuda ? run.handles : nullptr);
  const MarginResult mr =
      margins_from_outputs(mlp.forward(fb.keys), fb.values, fb.map, MarginConvention::normalized_output);
  const double mlp_acc = mlp::standalone_accuracy(mlp, fb);

  // Attention + inserted MLP on SSFR(B), float64 on the CPU.
  nn::SsfrProblem p = setup.problem;
  p.map_a.assign(fb.map.data(), fb.map.data() + fb.map.size());
  p.map_b = p.map_a;
  p.mlp_a = mlp::to_frozen_mlp(mlp);
  p.mlp_b = p.mlp_a;
  const std::int64_t nev = cfg.resolved_eval_batches(spec.facts);
  nn::SsfrWorkspace ws(p, cfg.batch);
  const nn::SsfrEval ev = nn::ssfr_evaluate_cpu(ws, att.params.data(), p.map_b, p.mlp_b, cfg.batch, nev, spec.seed,
                                                nn::ssfr_eval_first_batch(0, 1, nev));

  const auto margins = std::make_shared<std::vector<double>>(mr.per_key.data(), mr.per_key.data() + mr.per_key.size());
  SsfrJobOutput out;
  out.row.set("mlp", spec.mlp.text)
      .set("dim", spec.dim)
      .set("facts", spec.facts)
      .set("junk", spec.junk)
      .set("width", spec.width)
      .set("mlp_params", mlp.param_count)
      .set("mlp_acc", mlp_acc)
      .set("gamma_min", mr.min_margin)
      .set("frac_positive", fraction_above(*margins, 0.0))
      .set("combined_acc", ev.accuracy)
      .set("combined_loss", ev.loss)
      .set("pretrain_train_acc", att.best_train_acc)
      .set("pretrain_steps", att.steps_run)
      .set("job_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count())
      .set("status", "ok");
  out.write_run = [margins](h5::Group& g) { g.write("key_margins", std::span<const double>(*margins)); };
  return out;
}

void register_ssfr_finalizers() {
  static std::once_flag once;
  std::call_once(once, [] {
    sweep::register_finalizer(kSsfrUsabilityFinalizer, [](io::OutputFile& out, const io::Table& summary,
                                                          const nlohmann::json&) {
      const auto widths = summary.numbers("width");
      const auto keys = summary.strings("job");
      const auto params = summary.numbers("mlp_params");
      const auto col_mlp = summary.numbers("mlp_acc"), col_comb = summary.numbers("combined_acc"),
                 col_gmin = summary.numbers("gamma_min");
      std::vector<double> order;  // widths in first-appearance order
      for (auto w : widths)
        if (std::find(order.begin(), order.end(), w) == order.end()) order.push_back(w);
      std::sort(order.begin(), order.end());
      auto runs = out.root().open_group("runs");
      std::vector<std::vector<double>> pooled(order.size());
      std::vector<double> acc(order.size());
      io::Table t;
      std::vector<io::Row> rows(order.size());
      for (std::size_t k = 0; k < order.size(); ++k) {
        std::vector<double> mlp_acc, comb, gmin;
        std::int64_t p = 0;
        for (std::size_t i = 0; i < widths.size(); ++i) {
          if (widths[i] != order[k]) continue;
          const auto m = runs.open_group(sweep::run_group_name(keys[i])).read_doubles("key_margins");
          pooled[k].insert(pooled[k].end(), m.begin(), m.end());
          mlp_acc.push_back(col_mlp[i]);
          comb.push_back(col_comb[i]);
          gmin.push_back(col_gmin[i]);
          p = static_cast<std::int64_t>(params[i]);
        }
        auto mean_std = [](const std::vector<double>& v) {
          double s = 0, q = 0;
          for (double x : v) s += x, q += x * x;
          const double n = static_cast<double>(v.size()), mu = s / n;
          return std::pair<double, double>{mu, v.size() > 1 ? std::sqrt(std::max(0.0, (q - n * mu * mu) / (n - 1))) : 0.0};
        };
        const auto [ma, sa] = mean_std(mlp_acc);
        const auto [ca, sc] = mean_std(comb);
        const auto [ga, sg] = mean_std(gmin);
        acc[k] = ca;
        rows[k].set("width", static_cast<std::int64_t>(order[k])).set("mlp_params", p).set("seeds", static_cast<std::int64_t>(comb.size()))
            .set("mlp_acc_mean", ma).set("mlp_acc_std", sa).set("combined_acc_mean", ca).set("combined_acc_std", sc)
            .set("gamma_min_mean", ga).set("gamma_min_std", sg);
      }
      const double tau = fit_tau_star(pooled, acc);
      for (std::size_t k = 0; k < order.size(); ++k) {
        rows[k].set("frac_above_0", fraction_above(pooled[k], 0.0))
            .set("frac_above_0.1", fraction_above(pooled[k], 0.1))
            .set("frac_above_0.2", fraction_above(pooled[k], 0.2))
            .set("frac_above_0.3", fraction_above(pooled[k], 0.3))
            .set("frac_above_tau_star", fraction_above(pooled[k], tau));
        t.append(rows[k]);
      }
      auto g = out.root().child("usability");
      t.write(g);
      g.attr("tau_star", tau);
    });
  });
}

}  // namespace memcap::margin
