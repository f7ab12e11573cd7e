// Value fields on S¹×S¹ (spec ramnet.md §3 E4). See field.hpp.
#include "ramnet/field.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "ramnet/attention.hpp"
#include "ramnet/topk.hpp"

namespace memcap::ramnet {

FieldColumn parse_field_column(const std::string& name) {
  FieldColumn c;
  c.name = name;
  std::string s = name;
  auto ends_with = [&](const std::string& suf) {
    if (s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0) {
      s.resize(s.size() - suf.size());
      return true;
    }
    return false;
  };
  bool mass = false;
  if (ends_with("-mass")) mass = true;
  else ends_with("-standard");
  const auto bad = [&] {
    return UserError(fmt::format("field column '{}' must be dp<d>-full, dp<d>-top<K> or dp<d>-mass (optionally "
                                 "ending in -mass or -standard), e.g. dp4-top4",
                                 name));
  };
  if (s.rfind("dp", 0) != 0) throw bad();
  const auto dash = s.find('-');
  const std::string dps = s.substr(2, dash == std::string::npos ? std::string::npos : dash - 2);
  const std::string rest = dash == std::string::npos ? "" : s.substr(dash + 1);
  char* end = nullptr;
  if (dps.empty() || dps.find_first_not_of("0123456789") != std::string::npos) throw bad();
  const long dp = dps.size() > 9 ? 0 : std::strtol(dps.c_str(), &end, 10);
  // The syntax is right from here on: say what is wrong with the number.
  if (dp < 2 || dp > 64)
    throw UserError(fmt::format("field column '{}': dp = {} is out of range; dp must be in [2, 64]", name, dps));
  c.dp = static_cast<int>(dp);
  if (rest.empty() || rest == "full") {
    c.topk = 0;
  } else if (rest.rfind("top", 0) == 0) {
    const long k = std::strtol(rest.c_str() + 3, &end, 10);
    if (rest.size() == 3 || *end != '\0' || k < 1) throw bad();
    c.topk = k;
  } else {
    throw bad();
  }
  if (dash == std::string::npos && !mass) throw bad();  // "dp4" alone: say what is meant
  c.readout = mass ? Readout::mass : Readout::standard;
  return c;
}

void validate(const FieldConfig& c) {
  require(c.N >= 1 && c.N <= 4096, "--N {} must be between 1 and 4096", c.N);
  require(c.grid >= 4 && c.grid <= 2048, "--grid {} must be between 4 and 2048", c.grid);
  require(std::isfinite(c.tau) && c.tau > 0, "--tau {} must be a finite number > 0", c.tau);
  require(!c.beta_factors.empty() && !c.columns.empty(), "--beta-factor and --columns need at least one value");
  for (double f : c.beta_factors) require(std::isfinite(f) && f > 0, "--beta-factor {} must be a finite number > 0", f);
  for (const auto& col : c.columns)
    require(col.topk <= static_cast<std::int64_t>(col.dp) * col.dp,
            "field column {}: K = {} is larger than the address space dp^2 = {}", col.name, col.topk, col.dp * col.dp);
  require(c.orientation_bins >= 4 && c.orientation_bins <= 360, "--orientation-bins {} must be in [4, 360]",
          c.orientation_bins);
}

void orientation_stats(const std::vector<double>& f, int G, int bins, std::vector<double>& hist, double& oblique) {
  hist.assign(static_cast<std::size_t>(bins), 0.0);
  double total = 0, obl = 0;
  const double pi = std::numbers::pi;
  for (int i = 0; i < G; ++i)
    for (int j = 0; j < G; ++j) {
      const auto at = [&](int a, int b) { return f[static_cast<std::size_t>(((a + G) % G) * G + (b + G) % G)]; };
      const double g0 = 0.5 * (at(i + 1, j) - at(i - 1, j)), g1 = 0.5 * (at(i, j + 1) - at(i, j - 1));
      const double mag = std::hypot(g0, g1);
      if (!(mag > 0)) continue;
      double phi = std::atan2(g1, g0);
      if (phi < 0) phi += pi;
      if (phi >= pi) phi -= pi;
      const int b = std::min(bins - 1, static_cast<int>(phi / pi * bins));
      hist[static_cast<std::size_t>(b)] += mag;
      total += mag;
      const double d_axis = std::min({phi, std::abs(phi - pi / 2), pi - phi});
      if (d_axis > pi / 8) obl += mag;
    }
  if (total > 0) {
    for (auto& h : hist) h /= total;
    oblique = obl / total;
  } else {
    oblique = 0;
  }
}

namespace {
std::int64_t argmax_or_dead(const double* a, int n) {
  double best = 0;
  std::int64_t j = -1;
  for (int s = 0; s < n; ++s)
    if (a[s] > best) {
      best = a[s];
      j = s;
    }
  return j;
}
}  // namespace

FieldResult run_field(const FieldConfig& c) {
  validate(c);
  const int G = c.grid, N = c.N, U = 2;
  const double two_pi = 2 * std::numbers::pi;
  FieldResult out;
  out.theta.resize(static_cast<std::size_t>(G));
  for (int i = 0; i < G; ++i) out.theta[static_cast<std::size_t>(i)] = two_pi * i / G;
  Eigen::MatrixXd Kx(N, 4);
  out.key_angles.resize(static_cast<std::size_t>(2 * N));
  out.values.resize(static_cast<std::size_t>(N));
  for (int s = 0; s < N; ++s) {
    for (int u = 0; u < U; ++u) {
      const double th = two_pi * rng::uniform(c.seed, attn_streams::kFieldKeys, static_cast<std::uint64_t>(2 * s + u));
      out.key_angles[static_cast<std::size_t>(2 * s + u)] = th;
      Kx(s, 2 * u) = std::cos(th);
      Kx(s, 2 * u + 1) = std::sin(th);
    }
    out.values[static_cast<std::size_t>(s)] = 2 * rng::uniform(c.seed, attn_streams::kFieldValues, static_cast<std::uint64_t>(s)) - 1;
  }
  const std::size_t cells = static_cast<std::size_t>(G) * G;
  auto query = [&](std::size_t cell, double* q) {
    const double t0 = out.theta[cell / static_cast<std::size_t>(G)], t1 = out.theta[cell % static_cast<std::size_t>(G)];
    q[0] = std::cos(t0), q[1] = std::sin(t0), q[2] = std::cos(t1), q[3] = std::sin(t1);
  };
  // Reference: softmax(q·k/τ).
  out.reference.resize(cells);
  out.reference_region.resize(cells);
#pragma omp parallel for schedule(static)
  for (std::int64_t cell = 0; cell < static_cast<std::int64_t>(cells); ++cell) {
    double q[4], a[4096], mx = -INFINITY, z = 0, f = 0;
    query(static_cast<std::size_t>(cell), q);
    for (int s = 0; s < N; ++s) mx = std::max(mx, a[s] = (q[0] * Kx(s, 0) + q[1] * Kx(s, 1) + q[2] * Kx(s, 2) + q[3] * Kx(s, 3)) / c.tau);
    for (int s = 0; s < N; ++s) z += (a[s] = std::exp(a[s] - mx));
    for (int s = 0; s < N; ++s) f += (a[s] /= z) * out.values[static_cast<std::size_t>(s)];
    out.reference[static_cast<std::size_t>(cell)] = f;
    out.reference_region[static_cast<std::size_t>(cell)] = argmax_or_dead(a, N);
  }
  orientation_stats(out.reference, G, c.orientation_bins, out.reference_orientation_hist, out.reference_oblique_fraction);

  const double beta_star = std::sqrt(2.0 / c.tau);
  for (double fac : c.beta_factors)
    for (const auto& col : c.columns) {
      FieldPanel P;
      P.beta_factor = fac;
      P.beta = fac * beta_star;
      P.column = col;
      const Params p{col.dp, U, P.beta, P.beta};
      const std::int64_t A = address_count(p);
      const CodebookSet cb = make_codebooks(CodebookKind::circular, col.dp, U, Generator{}, 0);
      const int tw = U * col.dp;
      AddressWeightsBuilder b(col.dp, U);
      // Probe memory: v_s = e_s, so a read returns the token weights α(q); f = α·v.
      GsuMemory mem(A, N, true, 0.0);
      std::vector<double> table(static_cast<std::size_t>(tw)), e(static_cast<std::size_t>(N), 0.0);
      std::vector<std::int64_t> fl(static_cast<std::size_t>(std::max<std::int64_t>(col.topk, 1)));
      std::vector<double> lp(fl.size());
      for (int s = 0; s < N; ++s) {
        const Eigen::RowVector4d k = Kx.row(s);
        factor_rows(cb, p.beta_w, k.data(), table.data());
        AddressWeights w;
        if (col.topk > 0) {
          TopKDecoder dec(col.dp, U, col.topk);
          dec.decode(table.data(), fl.data(), lp.data());
          b.topk(table.data(), fl.data(), lp.data(), col.topk, w);
        } else {
          b.full(table.data(), w);
        }
        e[static_cast<std::size_t>(s)] = 1;
        mem.write(w, e.data(), -INFINITY);
        e[static_cast<std::size_t>(s)] = 0;
      }
      P.field.resize(cells);
      P.kappa_field.resize(cells);
      P.region.resize(cells);
      std::int64_t dead = 0, differ = 0;
      double sq = 0, kmax = 0;
#pragma omp parallel reduction(+ : dead, differ, sq) reduction(max : kmax)
      {
        std::vector<double> tab(static_cast<std::size_t>(tw)), a(static_cast<std::size_t>(N));
        std::vector<std::int64_t> f2(fl.size());
        std::vector<double> l2(fl.size());
        AddressWeightsBuilder bb(col.dp, U);
        AddressWeights r;
        std::vector<TopKDecoder> dec;
        if (col.topk > 0) dec.emplace_back(col.dp, U, col.topk);
#pragma omp for schedule(static)
        for (std::int64_t cell = 0; cell < static_cast<std::int64_t>(cells); ++cell) {
          double q[4];
          query(static_cast<std::size_t>(cell), q);
          factor_rows(cb, p.beta_r, q, tab.data());
          if (col.topk > 0) {
            dec[0].decode(tab.data(), f2.data(), l2.data());
            bb.topk(tab.data(), f2.data(), l2.data(), col.topk, r, false);
          } else {
            bb.full(tab.data(), r, false);
          }
          const double den = mem.peek(r, col.readout, a.data());
          double f = 0;
          for (int s = 0; s < N; ++s) f += a[static_cast<std::size_t>(s)] * out.values[static_cast<std::size_t>(s)];
          const auto ci = static_cast<std::size_t>(cell);
          P.field[ci] = f;
          P.region[ci] = den > 0 ? argmax_or_dead(a.data(), N) : -1;
          if (!(den > 0)) ++dead;
          if (P.region[ci] != out.reference_region[ci]) ++differ;
          sq += (f - out.reference[ci]) * (f - out.reference[ci]);
          // κ-attention at the same (dp, β): Σ κ v / Σ κ, log domain.
          double lk[4096], mx = -INFINITY;
          for (int s = 0; s < N; ++s) {
            const Eigen::RowVector4d k = Kx.row(s);
            mx = std::max(mx, lk[s] = log_kappa_A(p, cb.factor[0], q, k.data()));
          }
          double z = 0, fk = 0;
          for (int s = 0; s < N; ++s) {
            const double wk = std::exp(lk[s] - mx);
            z += wk;
            fk += wk * out.values[static_cast<std::size_t>(s)];
          }
          P.kappa_field[ci] = fk / z;
          kmax = std::max(kmax, std::abs(f - fk / z));
        }
      }
      P.mse = sq / static_cast<double>(cells);
      P.region_diff = static_cast<double>(differ) / static_cast<double>(cells);
      P.dead_fraction = static_cast<double>(dead) / static_cast<double>(cells);
      P.kappa_max_diff = kmax;
      orientation_stats(P.field, G, c.orientation_bins, P.orientation_hist, P.oblique_fraction);
      out.panels.push_back(std::move(P));
    }
  return out;
}

}  // namespace memcap::ramnet
