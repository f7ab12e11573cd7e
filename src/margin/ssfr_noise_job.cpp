// One job of `hebb ssfr noise` (spec hebbian.md §4.4, Fig. 3a): attention-only pre-training (§6.3:
// identity map, identity MLP, W_q, W_k, W_v, W_o trained, early stop at 0.99), then the distance
// between the unit output at Q and the key's unit embedding over fresh sequences; ε_attn is its
// maximum. The measurement runs on the CPU in float64 with the trained weights (either path).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "margin/ssfr_jobs.hpp"

namespace memcap::margin {

SsfrNoiseStats ssfr_attention_noise(const nn::SsfrProblem& p, const std::vector<double>& params, std::int64_t batches,
                                    std::int64_t batch, std::uint64_t seed) {
  require(batches >= 1 && batch >= 1, "the noise measurement needs >= 1 batch of >= 1 sequence");
  const std::int64_t d = p.block.dim, F = p.task.facts;
  nn::SsfrWorkspace ws(p, batch);
  nn::SsfrBatch b;
  std::vector<double> dist;
  dist.reserve(static_cast<std::size_t>(batches * batch));
  SsfrNoiseStats s;
  s.per_key_max.assign(static_cast<std::size_t>(F), std::numeric_limits<double>::quiet_NaN());
  std::int64_t hits = 0;
  for (std::int64_t j = 0; j < batches; ++j) {
    nn::ssfr_batch(b, p.task, p.map_a.data(), batch, seed, rng::kSsfrEval, static_cast<std::uint64_t>(j));
    hits += nn::ssfr_forward(ws, params.data(), b, p.mlp_a).correct;
    for (std::int64_t i = 0; i < batch; ++i) {
      const std::int32_t key = b.key[static_cast<std::size_t>(i)];
      const double* o = ws.o.data() + i * d;
      const double* e = p.embed_in.data() + static_cast<std::int64_t>(key) * d;
      double s2 = 0;
      for (std::int64_t c = 0; c < d; ++c) s2 += (o[c] - e[c]) * (o[c] - e[c]);
      const double r = std::sqrt(s2);
      dist.push_back(r);
      double& km = s.per_key_max[static_cast<std::size_t>(key)];
      km = std::isnan(km) ? r : std::max(km, r);
    }
  }
  const double n = static_cast<double>(dist.size());
  double sum = 0, sq = 0;
  for (double r : dist) sum += r, sq += r * r;
  s.mean = sum / n;
  s.std = std::sqrt(std::max(0.0, sq / n - s.mean * s.mean));
  s.eps_attn = *std::max_element(dist.begin(), dist.end());
  std::sort(dist.begin(), dist.end());
  s.p95 = dist[static_cast<std::size_t>(std::min(n - 1, std::ceil(0.95 * n) - 1))];
  // Unit vectors: ||o − e||² = 2 − 2 cos θ.
  s.max_angle_deg = std::acos(std::clamp(1 - 0.5 * s.eps_attn * s.eps_attn, -1.0, 1.0)) * 180.0 / M_PI;
  s.accuracy = static_cast<double>(hits) / n;
  return s;
}

SsfrJobOutput run_ssfr_noise_job(const SsfrNoiseSpec& spec, const SsfrRunner& run) {
  const mlp::SsfrSetup setup = spec.identity_setup();
  nn::SsfrTrainConfig cfg = spec.train;
  cfg.seed = spec.seed;
  const auto res = std::make_shared<nn::SsfrTrainResult>(
      train_ssfr(setup.problem, cfg, ssfr_fingerprint(setup.problem, "identity", 0, cfg, run.device), run));
  const auto st = std::make_shared<SsfrNoiseStats>(ssfr_attention_noise(
      setup.problem, res->params, spec.noise_batches, spec.noise_batch, spec.seed + spec.noise_seed_offset));
  SsfrJobOutput out;
  out.row.set("dim", spec.dim)
      .set("facts", spec.facts)
      .set("junk", spec.junk)
      .set("junk_vocab", spec.junk_vocab)
      .set("attn_residual", static_cast<std::int64_t>(spec.block.attn_residual))
      .set("eps_attn", st->eps_attn)
      .set("dist_mean", st->mean)
      .set("dist_std", st->std)
      .set("dist_p95", st->p95)
      .set("max_angle_deg", st->max_angle_deg)
      .set("noise_accuracy", st->accuracy)
      .set("best_train_acc", res->best_train_acc)
      .set("final_train_acc", res->final_train_acc)
      .set("final_loss", res->final_loss)
      .set("steps_run", res->steps_run)
      .set("stopped_early", static_cast<std::int64_t>(res->stopped_early))
      .set("train_s", res->train_loop_s)
      .set("status", "ok");
  out.write_run = [res, st](h5::Group& g) {
    write_ssfr_curves(g, *res);
    g.write("per_key_max_distance", std::span<const double>(st->per_key_max), h5::WriteOptions{true, 0});
    g.write("weights", std::span<const double>(res->params), h5::WriteOptions{true, 0});
  };
  return out;
}

}  // namespace memcap::margin
