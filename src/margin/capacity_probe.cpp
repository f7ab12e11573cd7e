// Capacity oracle (see capacity_probe.hpp): one width built and evaluated on the CPU or a GPU,
// and the byte / flop estimates `hebb capacity` checks before it allocates anything.
#include "margin/capacity_probe.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "margin/margins.hpp"
#include "mlp/constructions.hpp"
#include "mlp/gd_train.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include "mlp/construct_cuda.hpp"
#endif

namespace memcap::margin {

namespace {

std::string gd_note(const mlp::GdResult& r) {
  return fmt::format("{} epochs={} loss={:.3g}{}", r.path, r.epochs_run, r.final_loss,
                     r.stopped_early ? " early-stop" : "");
}

void check_finite(const mlp::ProbeOutcome& o, const mlp::MethodSpec& method, std::int64_t F, std::int64_t m) {
  if (!std::isfinite(o.accuracy) || std::isnan(o.min_margin))
    throw NumericError(fmt::format("{} at width m = {} (F = {}) gave a non-finite accuracy or margin; the model "
                                   "has NaN/Inf outputs",
                                   method.text, m, F));
}

}  // namespace

bool is_gd_method(const mlp::MethodSpec& method) { return method.kind == mlp::MethodKind::gd; }

SearchStart default_search_start(const mlp::MethodSpec& method, std::int64_t dim, std::int64_t facts, double beta) {
  if (!is_gd_method(method)) return {};
  const double F = static_cast<double>(facts), d = static_cast<double>(dim);
  // Plain gd up to the precision: the fit's m* were measured in f32 and bf16x3 (equal at all 34 pairs compared).
  mlp::GdConfig g = method.gd;
  const bool fitted_precision = !g.tf32 && (g.precision == "f32" || g.precision == "bf16x3" || g.precision == "f64");
  g.precision = "f32";
  const bool plain = fitted_precision && beta >= 0 && beta <= kGdFitMaxBeta &&
                     mlp::canonical_gd_spec(g) == mlp::canonical_gd_spec(mlp::parse_method("gd").gd);
  if (plain) {
    const double m = 0.6645 * std::pow(F, 1.1133) / d;
    return {std::max<std::int64_t>(1, std::llround(m)), kGdFitGrowth};
  }
  return {std::max<std::int64_t>(1, std::llround(1.5 * F / d)), 1.25};
}

std::int64_t capacity_param_count(const mlp::MethodSpec& method, std::int64_t m, std::int64_t d) {
  return mlp::param_count(method, m, d);
}

double cpu_probe_bytes(const mlp::MethodSpec& method, std::int64_t F_, std::int64_t P_, std::int64_t d_,
                       std::int64_t m_) {
  const double F = static_cast<double>(F_), P = static_cast<double>(P_), d = static_cast<double>(d_),
               m = static_cast<double>(m_);
  const double facts = 4 * F * d + P * d;                         // keys, values, codes, targets
  const double eval = 2 * std::min(F, 4096.0) * m + F * d + std::min(P * 1024, double(1 << 24));  // forward + scores
  const double model = 3 * m * d;
  double work = 0;
  if (is_gd_method(method)) {
    work = 4 * model + 6 * F * m + 2 * F * P + 4 * F * d;         // params, grads, Adam moments, activations, logits
  } else {
    switch (method.kind) {
      case mlp::MethodKind::sketched: work = F * m + 2 * m * d; break;
      case mlp::MethodKind::exact_k2: work = F * d * (d + 1) / 2; break;
      case mlp::MethodKind::whitened:
        work = F * m + (m <= F ? 2 * m * m + 2 * m * d : 2 * F * F + 2 * F * d);
        break;
      case mlp::MethodKind::data_dependent:
        work = 4 * F * m + 8 * m * d + (m <= F ? 2 * m * m : 2 * F * F);
        break;
      case mlp::MethodKind::ntk: work = 2 * std::min(F, 2048.0) * m + 2 * m * d; break;
      default: work = 4 * F * m; break;
    }
  }
  return 8 * (facts + eval + model + work);
}

double probe_flops(const mlp::MethodSpec& method, std::int64_t F_, std::int64_t P_, std::int64_t d_,
                   std::int64_t m_) {
  const double F = static_cast<double>(F_), P = static_cast<double>(P_), d = static_cast<double>(d_),
               m = static_cast<double>(m_);
  const double eval = 4 * F * m * d + 2 * F * P * d;  // forward + all-value scores
  if (is_gd_method(method)) return static_cast<double>(method.gd.epochs) * (18 * F * m * d + 6 * F * P * d) + eval;
  const double features = 4 * F * m * d;
  switch (method.kind) {
    case mlp::MethodKind::sketched: return features + 2 * F * m * d + eval;
    case mlp::MethodKind::exact_k2: return F * d * d + eval;
    case mlp::MethodKind::whitened:
      return features + eval + (m <= F ? F * m * m + m * m * m / 3 + 2 * d * m * m : F * F * m + F * F * F / 3 + 2 * F * d * m);
    case mlp::MethodKind::data_dependent: {
      const double iters = std::min(std::max(2 * m, 128.0), 1024.0);
      return 2 * features + 2 * iters * 8 * F * m * d + eval +
             (m <= F ? F * m * m + m * m * m / 3 : F * F * m + F * F * F / 3);
    }
    case mlp::MethodKind::ntk: return 6 * F * m * d + eval;
    default: return features + eval;
  }
}

double cuda_probe_bytes(const mlp::MethodSpec& method, std::int64_t F, std::int64_t P, std::int64_t d,
                        std::int64_t m) {
#ifdef MEMCAP_HAVE_CUDA
  if (is_gd_method(method)) {
    // Training, then evaluate_mlp_cuda of the float64 model (weights + a tile of scores).
    const double eval = 8.0 * (3.0 * static_cast<double>(m) * static_cast<double>(d) +
                               static_cast<double>(F + P) * static_cast<double>(d)) +
                        8.0 * static_cast<double>(std::min<std::int64_t>(F, 4096)) * static_cast<double>(P + m);
    return std::max(static_cast<double>(mlp::gd_cuda_bytes(F, P, d, m, method.gd)), eval);
  }
  return static_cast<double>(mlp::closed_form_cuda_bytes(method, F, P, d, m));
#else
  (void)method, (void)F, (void)P, (void)d, (void)m;
  return 0;
#endif
}

double host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (in >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024.0;
    in.ignore(256, '\n');
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

mlp::ProbeOutcome probe_width(const mlp::MethodSpec& method, const mlp::FactSet& facts, std::int64_t m,
                              std::uint64_t seed, Device device, gpu::Handles* handles, const ProbeCheckpoint& ck) {
  MEMCAP_ASSERT(m >= 1, "probe width must be >= 1");
  const auto t0 = std::chrono::steady_clock::now();
  mlp::ProbeOutcome o;
  mlp::GdConfig gd = method.gd;  // the checkpoint file and period are not part of a training's fingerprint
  gd.checkpoint = ck.file;
  gd.checkpoint_every_s = ck.every_s;
  auto said_resumed = [&](const mlp::GdResult& r) {
    if (r.resumed)
      std::fprintf(stderr, "hebb capacity: %s at m = %lld: resumed the training from its checkpoint %s\n",
                   method.text.c_str(), static_cast<long long>(m), ck.file.c_str());
  };
  if (device == Device::cpu) {
    mlp::GatedMLP model;
    if (is_gd_method(method)) {
      mlp::GdResult r = mlp::train_gd_cpu(facts, m, seed, gd);
      said_resumed(r);
      o.note = gd_note(r);
      model = std::move(r.mlp);
    } else {
      model = mlp::build_mlp(method, facts, m, seed);
      o.note = model.solver_note;
    }
    const MarginResult r =
        margins_from_outputs(model.forward(facts.keys), facts.values, facts.map, MarginConvention::raw_output);
    o.accuracy = r.accuracy;
    o.min_margin = r.min_margin;
  } else {
#ifdef MEMCAP_HAVE_CUDA
    MEMCAP_ASSERT(handles != nullptr, "a GPU probe needs the worker's gpu::Handles");
    mlp::CudaProbe p;
    if (is_gd_method(method)) {
      const mlp::GdResult r = mlp::train_gd_cuda(facts, m, seed, gd, *handles);
      said_resumed(r);
      p = mlp::evaluate_mlp_cuda(r.mlp, facts, *handles);
      p.solver_note = gd_note(r);
    } else {
      p = mlp::probe_width_cuda(method, facts, m, seed, *handles);
    }
    o.accuracy = p.accuracy;
    o.min_margin = p.min_margin;
    o.note = p.solver_note;
#else
    (void)handles;
    throw DeviceError("this build of memcap has no CUDA support; run hebb capacity with --device cpu");
#endif
  }
  o.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check_finite(o, method, facts.F(), m);
  return o;
}

}  // namespace memcap::margin
