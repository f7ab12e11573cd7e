// GD-trained MLP arena layout, PyTorch-default init and conversion to GatedMLP (see gd_init.hpp).
#include "mlp/gd_init.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "mlp/gd_train.hpp"
#include "mlp/method.hpp"

namespace memcap::mlp {

std::int64_t gd_param_count(std::int64_t m, std::int64_t d, bool bias) {
  return 3 * m * d + (bias ? 2 * m + d : 0);
}

GdLayout GdLayout::make(std::int64_t m, std::int64_t d, bool bias) {
  require(m >= 1 && d >= 1, "GD MLP needs width m >= 1 and dimension d >= 1 (got m = {}, d = {})", m, d);
  GdLayout l;
  l.m = m;
  l.d = d;
  l.bias = bias;
  l.U = 0;
  l.G = m * d;
  l.D = 2 * m * d;
  std::int64_t off = 3 * m * d;
  if (bias) {
    l.b_u = off;
    l.b_g = off + m;
    l.b_d = off + 2 * m;
    off += 2 * m + d;
  }
  l.total = off;
  MEMCAP_ASSERT(l.total == gd_param_count(m, d, bias), "GD layout size");
  return l;
}

nn::ArenaLayout GdLayout::arena() const {
  nn::ArenaLayout a;
  a.add("U", {m, d});
  a.add("G", {m, d});
  a.add("D", {d, m});
  if (bias) {
    a.add("b_u", {m});
    a.add("b_g", {m});
    a.add("b_d", {d});
  }
  MEMCAP_ASSERT(a.numel() == total, "GD arena size");
  return a;
}

std::vector<double> gd_init_params(std::int64_t m, std::int64_t d, bool bias, std::uint64_t seed) {
  const GdLayout l = GdLayout::make(m, d, bias);
  std::vector<double> p(static_cast<std::size_t>(l.total));
  const double bound_d = 1.0 / std::sqrt(static_cast<double>(d));  // fan_in d: U, G, b_u, b_g
  const double bound_m = 1.0 / std::sqrt(static_cast<double>(m));  // fan_in m: D, b_d
  auto fill = [&](std::int64_t off, std::int64_t n, double bound) {
    for (std::int64_t i = off; i < off + n; ++i)
      p[static_cast<std::size_t>(i)] =
          bound * (2.0 * rng::uniform(seed, rng::kGdInit, static_cast<std::uint64_t>(i)) - 1.0);
  };
  fill(l.U, m * d, bound_d);
  fill(l.G, m * d, bound_d);
  fill(l.D, d * m, bound_m);
  if (bias) {
    fill(l.b_u, m, bound_d);
    fill(l.b_g, m, bound_d);
    fill(l.b_d, d, bound_m);
  }
  return p;
}

GatedMLP gd_to_mlp(const std::vector<double>& params, const GdLayout& l, const GdConfig& cfg) {
  MEMCAP_ASSERT(static_cast<std::int64_t>(params.size()) == l.total, "GD parameter vector size");
  using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const double* p = params.data();
  GatedMLP mlp;
  mlp.A = Eigen::Map<const RowMajor>(p + l.U, l.m, l.d);
  mlp.G = Eigen::Map<const RowMajor>(p + l.G, l.m, l.d);
  mlp.B = Eigen::Map<const RowMajor>(p + l.D, l.d, l.m);
  if (l.bias) {
    mlp.bias_up = Eigen::Map<const Eigen::VectorXd>(p + l.b_u, l.m);
    mlp.bias_gate = Eigen::Map<const Eigen::VectorXd>(p + l.b_g, l.m);
    mlp.bias_out = Eigen::Map<const Eigen::VectorXd>(p + l.b_d, l.d);
  }
  mlp.gate = nn::to_string(cfg.gate);
  mlp.param_count = gd_param_count(l.m, l.d, l.bias);
  mlp.method = canonical_gd_spec(cfg);
  return mlp;
}

void validate_gd_config(const GdConfig& c) {
  require(c.epochs >= 1, "GD training needs epochs >= 1 (got {})", c.epochs);
  require(std::isfinite(c.lr) && c.lr > 0, "GD learning rate must be finite and > 0 (got {})", c.lr);
  require(std::isfinite(c.lr_min) && c.lr_min >= 0 && c.lr_min <= c.lr,
          "GD lr-min must be in [0, lr = {}] (got {})", c.lr, c.lr_min);
  require(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1 && c.eps > 0,
          "Adam needs 0 <= beta1, beta2 < 1 and eps > 0 (got {}, {}, {})", c.beta1, c.beta2, c.eps);
  require(std::isfinite(c.weight_decay) && c.weight_decay >= 0, "GD weight decay must be >= 0 (got {})",
          c.weight_decay);
  require(!std::isnan(c.stop_loss), "GD stop-loss must be a number");
  require(c.record_every >= 1, "--record-every must be >= 1 epoch (got {})", c.record_every);
  require(std::isfinite(c.checkpoint_every_s) && c.checkpoint_every_s >= 0,
          "--checkpoint-every must be >= 0 seconds (got {})", c.checkpoint_every_s);
}

}  // namespace memcap::mlp
