// MEMIT, AlphaEdit and ROME on the fact expert's output matrix (edit/edit_local.hpp, spec §4.9).
#include "edit/edit_local.hpp"

#include <fmt/format.h>

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "nn/layers.hpp"
#include "nn/tied_ce.hpp"

namespace memcap::edit {

void LocalEditConfig::validate() const {
  require(method == "memit" || method == "alphaedit" || method == "rome",
          "local editor '{}' is not memit, alphaedit or rome", method);
  require(steps >= 0, "--steps must be >= 0 (got {})", steps);
  require(std::isfinite(lr) && lr > 0, "--edit-lr must be a positive number (got {})", lr);
  require(std::isfinite(weight_decay) && weight_decay >= 0, "--edit-wd must be >= 0 (got {})", weight_decay);
  require(std::isfinite(early_stop) && early_stop >= 0, "--early-stop must be >= 0 (0 = off; got {})", early_stop);
  require(std::isfinite(clip) && clip >= 0, "--clip must be >= 0 (0 = off; got {})", clip);
  require(std::isfinite(lambda) && lambda >= 0, "--lambda must be >= 0 (got {})", lambda);
  require(std::isfinite(tol) && tol > 0, "--tol must be > 0 (got {})", tol);
  require(batch >= 1, "edit batch must be >= 1 (got {})", batch);
}

namespace {

// The train prompt of each fact: its sequence index and the row of its author position.
struct Prompts {
  std::vector<std::int64_t> seq, last;
};
Prompts train_prompts(const nn::EditSequences& seqs, const EditSet& set) {
  Prompts p;
  for (std::int64_t f = 0; f < set.facts; ++f) {
    const std::int64_t s = f * set.templates + set.prompt_order[static_cast<std::size_t>(f * set.templates)];
    p.seq.push_back(s);
    p.last.push_back(seqs.length[static_cast<std::size_t>(s)] - 1);
  }
  return p;
}

}  // namespace

void local_closed_form(const LocalEditConfig& cfg, const Eigen::MatrixXd& KpKpT, const Eigen::MatrixXd& KaKaT,
                       const Eigen::MatrixXd& Ka, const Eigen::MatrixXd& R, std::int64_t np, LocalEditResult& res) {
  const Eigen::Index h = KpKpT.rows();
  require(np >= 1 && KpKpT.cols() == h && KaKaT.rows() == h && KaKaT.cols() == h && Ka.rows() == h &&
              R.cols() == Ka.cols(),
          "local_closed_form: inconsistent shapes (h {}, K_a {} x {}, R {} x {})", h, Ka.rows(), Ka.cols(), R.rows(),
          R.cols());
  // A residual whose squared norm overflows cannot have passed through the model's RMSNorm (its forward sees inf
  // and returns 0 or NaN): a huge --edit-lr without --clip. Refused here, for the CPU and GPU editors alike.
  for (Eigen::Index a = 0; a < R.cols(); ++a)
    if (!std::isfinite(R.col(a).squaredNorm()))
      throw NumericError(fmt::format("--method {}: the target residual of fact {} grew past float64 (norm {:.3g}); "
                                     "lower --edit-lr or give --clip",
                                     cfg.method, np + a, R.col(a).stableNorm()));
  const Eigen::MatrixXd Cp = KpKpT / static_cast<double>(np);
  if (cfg.method == "memit") {
    // ΔW = R K_aᵀ (λ C_p + K_a K_aᵀ)^{-1}
    const Eigen::MatrixXd S = cfg.lambda * Cp + KaKaT;
    res.delta = S.completeOrthogonalDecomposition().solve(Ka * R.transpose()).transpose();
  } else if (cfg.method == "alphaedit") {
    // P = U0 U0ᵀ over the singular vectors of K_p K_pᵀ (symmetric PSD: eigenvectors) with value < tol
    const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(KpKpT);
    const Eigen::VectorXd ev = es.eigenvalues().cwiseAbs();
    std::vector<Eigen::Index> keep;
    for (Eigen::Index i = 0; i < ev.size(); ++i)
      if (ev(i) < cfg.tol) keep.push_back(i);
    Eigen::MatrixXd U0(h, static_cast<Eigen::Index>(keep.size()));
    for (std::size_t i = 0; i < keep.size(); ++i) U0.col(static_cast<Eigen::Index>(i)) = es.eigenvectors().col(keep[i]);
    res.null_dim = static_cast<std::int64_t>(keep.size());
    const Eigen::MatrixXd P = U0 * U0.transpose();
    const Eigen::MatrixXd Y = KaKaT * P + Eigen::MatrixXd::Identity(h, h);
    // ΔW Y = R K_aᵀ P  <=>  Yᵀ ΔWᵀ = P K_a Rᵀ
    res.delta = Y.transpose().partialPivLu().solve(P * Ka * R.transpose()).transpose();
  } else {
    // ROME, sequentially per altered fact: W += r (C_p^{-1} k)ᵀ / (kᵀ C_p^{-1} k); residuals not recomputed, so
    // the sum is R diag(1/den) Uᵀ with U = C_p^{-1} K_a (pseudo-inverse: complete orthogonal decomposition)
    const Eigen::MatrixXd U = Cp.completeOrthogonalDecomposition().solve(Ka);
    Eigen::VectorXd inv_den(Ka.cols());
    for (Eigen::Index a = 0; a < Ka.cols(); ++a) {
      const double den = Ka.col(a).dot(U.col(a));
      if (!(den > 0) || !std::isfinite(den))
        throw NumericError(fmt::format("--method rome: kᵀ C_p⁻¹ k = {} for fact {} (a key outside the span of the "
                                       "preserved keys); no rank-one update is possible",
                                       den, np + a));
      inv_den(a) = 1.0 / den;
    }
    res.delta = R * inv_den.asDiagonal() * U.transpose();
  }
  if (!res.delta.allFinite())
    throw NumericError(fmt::format("--method {}: the closed-form update is not finite", cfg.method));
}

LocalEditResult local_edit(EditModel& model, const nn::EditSequences& seqs, const EditSet& set,
                           const std::vector<std::int32_t>& author_token, const LocalEditConfig& cfg) {
  cfg.validate();
  const auto t0 = std::chrono::steady_clock::now();
  require(set.n_preserved >= 1, "--method {} needs preserved facts for the key covariance C_p; use --fraction < 1",
          cfg.method);
  require(set.facts * set.templates == seqs.S, "edit: the edit set ({} x {}) does not match the {} sequences",
          set.facts, set.templates, seqs.S);
  const auto& c = model.config();
  const std::int64_t d = c.d, h = c.fact_hidden, T = seqs.T, F = set.facts;
  const Prompts pr = train_prompts(seqs, set);
  Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> D(
      model.frozen().param("fact.D"), d, h);

  // ---- keys: the expert's hidden activation at the last position of every train prompt ----
  Eigen::MatrixXd Kall(h, F);
  EditActs acts;
  std::vector<std::int32_t> tok, lab;
  for (std::int64_t f0 = 0; f0 < F; f0 += cfg.batch) {
    const std::int64_t B = std::min(cfg.batch, F - f0);
    tok.assign(static_cast<std::size_t>(B * T), nn::kIgnoreLabel);
    lab.assign(static_cast<std::size_t>(B * T), nn::kIgnoreLabel);
    for (std::int64_t b = 0; b < B; ++b)
      std::copy_n(seqs.input_ids.data() + pr.seq[static_cast<std::size_t>(f0 + b)] * T, T, tok.data() + b * T);
    model.forward(acts, tok.data(), lab.data(), B, T);
    for (std::int64_t b = 0; b < B; ++b) {
      const double* fh = acts.fh.data() + (b * T + pr.last[static_cast<std::size_t>(f0 + b)]) * h;
      for (std::int64_t j = 0; j < h; ++j) Kall(j, f0 + b) = fh[j];
    }
  }
  const std::int64_t np = set.n_preserved, na = set.n_altered;
  const Eigen::MatrixXd Kp = Kall.leftCols(np), Ka = Kall.rightCols(na);

  // ---- target residuals: Adam on the CE of the new author at the last position ----
  LocalEditResult res;
  Eigen::MatrixXd R = Eigen::MatrixXd::Zero(d, na);
  double loss_sum = 0;
  for (std::int64_t a0 = 0; a0 < na; a0 += cfg.batch) {
    const std::int64_t B = std::min(cfg.batch, na - a0);
    tok.assign(static_cast<std::size_t>(B * T), nn::kIgnoreLabel);
    lab.assign(static_cast<std::size_t>(B * T), nn::kIgnoreLabel);
    std::vector<double> limit(static_cast<std::size_t>(B), 0.0);
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t f = np + a0 + b;
      std::copy_n(seqs.input_ids.data() + pr.seq[static_cast<std::size_t>(f)] * T, T, tok.data() + b * T);
      lab[static_cast<std::size_t>(b * T + pr.last[static_cast<std::size_t>(f)])] =
          author_token[static_cast<std::size_t>(set.target_fact[static_cast<std::size_t>(f)])];
      limit[static_cast<std::size_t>(b)] = cfg.clip * (D * Ka.col(a0 + b)).norm();
    }
    std::vector<double> r(static_cast<std::size_t>(B * d), 0.0), g(r.size()), m(r.size(), 0.0), v(r.size(), 0.0);
    std::vector<char> active(static_cast<std::size_t>(B), 1);
    std::vector<double> loss(static_cast<std::size_t>(B), 0.0);
    acts.f_add.assign(static_cast<std::size_t>(B * T * d), 0.0);
    for (std::int64_t step = 0; step <= cfg.steps; ++step) {
      for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t row = b * T + pr.last[static_cast<std::size_t>(np + a0 + b)];
        std::copy_n(r.data() + b * d, d, acts.f_add.data() + row * d);
      }
      model.forward(acts, tok.data(), lab.data(), B, T);
      bool any = false;
      for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t f = np + a0 + b, row = b * T + pr.last[static_cast<std::size_t>(f)];
        loss[static_cast<std::size_t>(b)] = acts.losses[static_cast<std::size_t>(row)];
        if (!std::isfinite(loss[static_cast<std::size_t>(b)]))
          throw NumericError(fmt::format("--method {}: the residual loss of fact {} is not finite at step {}; lower "
                                         "--edit-lr",
                                         cfg.method, f, step));
        if (cfg.early_stop > 0 && loss[static_cast<std::size_t>(b)] < cfg.early_stop) active[static_cast<std::size_t>(b)] = 0;
        any = any || active[static_cast<std::size_t>(b)];
      }
      if (step == cfg.steps || !any) break;
      model.trainable().zero_grads();
      model.backward(acts, lab.data());
      // g_f is the gradient of the mean over the B rows; each fact's own loss has B times it
      for (std::int64_t b = 0; b < B; ++b) {
        if (!active[static_cast<std::size_t>(b)]) continue;
        const std::int64_t row = b * T + pr.last[static_cast<std::size_t>(np + a0 + b)];
        for (std::int64_t j = 0; j < d; ++j)
          g[static_cast<std::size_t>(b * d + j)] = acts.g_f[static_cast<std::size_t>(row * d + j)] * static_cast<double>(B);
        nn::cpu::adam_update(r.data() + b * d, g.data() + b * d, m.data() + b * d, v.data() + b * d, d, cfg.lr, 0.9,
                             0.999, 1e-8, cfg.weight_decay, step + 1, false);
        if (cfg.clip > 0) {
          Eigen::Map<Eigen::VectorXd> rv(r.data() + b * d, d);
          // stableNorm: a huge --edit-lr makes r·r overflow, and r / inf would clip the residual to 0 (no edit)
          const double n = rv.stableNorm(), lim = limit[static_cast<std::size_t>(b)];
          if (n > lim && n > 0) rv *= lim / n;
        }
      }
    }
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t j = 0; j < d; ++j) R(j, a0 + b) = r[static_cast<std::size_t>(b * d + j)];
      loss_sum += loss[static_cast<std::size_t>(b)];
      res.converged += cfg.early_stop > 0 && loss[static_cast<std::size_t>(b)] < cfg.early_stop;
    }
  }
  acts.f_add.clear();
  res.residual_loss = loss_sum / static_cast<double>(na);
  res.residual_norm = R.colwise().norm().mean();

  // ---- closed-form update ----
  local_closed_form(cfg, Kp * Kp.transpose(), Ka * Ka.transpose(), Ka, R, np, res);
  res.residuals = std::move(R);
  res.keys_altered = Ka;
  res.keys_preserved = Kp;
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace memcap::edit
