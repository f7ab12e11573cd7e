// E1 job: sampled and adversarial pairs, exact errors, bounds, violation counts (see bounds_job.hpp).
#include "ramnet/bounds_job.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace memcap::ramnet {

void ErrorStats::add(double v) {
  if (count == 0) min = max = v;
  min = std::min(min, v);
  max = std::max(max, v);
  max_abs = std::max(max_abs, std::fabs(v));
  sum += v;
  positive += v > 0;
  ++count;
}

void ErrorStats::merge(const ErrorStats& o) {
  if (o.count == 0) return;
  if (count == 0) {
    *this = o;
    return;
  }
  min = std::min(min, o.min);
  max = std::max(max, o.max);
  max_abs = std::max(max_abs, o.max_abs);
  sum += o.sum;
  positive += o.positive;
  count += o.count;
}

void sample_bounds_pair(const BoundsJobSpec& s, std::int64_t index, double* q, double* k) {
  const double two_pi = 2.0 * std::numbers::pi;
  for (int u = 0; u < s.U; ++u) {
    const std::uint64_t base = 4 * static_cast<std::uint64_t>(s.U) * static_cast<std::uint64_t>(index) + 4 * u;
    const double tq = two_pi * rng::uniform(s.seed, kStreamBoundsPairs, base);
    const double tk = two_pi * rng::uniform(s.seed, kStreamBoundsPairs, base + 1);
    const bool q_is_max = rng::uniform(s.seed, kStreamBoundsPairs, base + 2) < 0.5;
    const double other = s.M * rng::uniform(s.seed, kStreamBoundsPairs, base + 3);
    const double nq = (q_is_max ? s.M : other) / s.beta, nk = (q_is_max ? other : s.M) / s.beta;
    q[2 * u] = nq * std::cos(tq);
    q[2 * u + 1] = nq * std::sin(tq);
    k[2 * u] = nk * std::cos(tk);
    k[2 * u + 1] = nk * std::sin(tk);
  }
}

std::vector<NamedPair> adversarial_pairs(const BoundsJobSpec& s) {
  const double step = 2.0 * std::numbers::pi / s.dp;
  struct Shape {
    const char* relation;
    double dk;  // angle of k relative to q
  };
  const Shape shapes[] = {{"aligned", 0.0}, {"anti", std::numbers::pi}, {"orthogonal", 0.5 * std::numbers::pi}};
  std::vector<NamedPair> out;
  auto make = [&](const std::string& name, double aq, double ak, double nq, double nk) {
    NamedPair p;
    p.name = name;
    p.q.resize(2 * s.U);
    p.k.resize(2 * s.U);
    for (int u = 0; u < s.U; ++u) {
      p.q[2 * u] = nq / s.beta * std::cos(aq);
      p.q[2 * u + 1] = nq / s.beta * std::sin(aq);
      p.k[2 * u] = nk / s.beta * std::cos(ak);
      p.k[2 * u + 1] = nk / s.beta * std::sin(ak);
    }
    out.push_back(std::move(p));
  };
  for (const char* where : {"code", "mid"}) {
    const double aq = std::string(where) == "code" ? 0.0 : 0.5 * step;
    for (const Shape& sh : shapes) {
      make(fmt::format("{}-{}", sh.relation, where), aq, aq + sh.dk, s.M, s.M);
      make(fmt::format("{}-{}-half", sh.relation, where), aq, aq + sh.dk, s.M, 0.5 * s.M);
    }
    make(fmt::format("neighbour-{}", where), aq, aq + step, s.M, s.M);
  }
  return out;
}

namespace {

struct Acc {
  ErrorStats tot, fin, cont;
  std::int64_t v11 = 0, v16 = 0, v17 = 0, v20 = 0, c11 = 0, c20 = 0;
  double f11 = 0, f16 = 0, f17 = 0, f20 = 0, cons = 0;
  void merge_bounds(const Acc& o) {
    v11 += o.v11, v16 += o.v16, v17 += o.v17, v20 += o.v20, c11 += o.c11, c20 += o.c20;
    f11 = std::max(f11, o.f11), f16 = std::max(f16, o.f16), f17 = std::max(f17, o.f17), f20 = std::max(f20, o.f20);
    cons = std::max(cons, o.cons);
  }
};

void check_pair(const PairErrors& e, Acc& a) {
  const double r = e.roundoff;
  a.v16 += e.e_cont < e.bound16_lo - r || e.e_cont > e.bound16_hi + r;
  a.v17 += std::fabs(e.e_cont) > e.bound17 + r;
  if (e.bound16_hi > 0)
    a.f16 = std::max({a.f16, e.e_cont / e.bound16_hi, e.e_cont / e.bound16_lo});
  if (e.bound17 > 0) a.f17 = std::max(a.f17, std::fabs(e.e_cont) / e.bound17);
  if (std::isfinite(e.bound11)) {
    ++a.c11;
    a.v11 += std::fabs(e.e_tot) > e.bound11 + r;
    if (e.bound11 > 0) a.f11 = std::max(a.f11, std::fabs(e.e_tot) / e.bound11);
  }
  if (std::isfinite(e.bound20)) {
    ++a.c20;
    a.v20 += std::fabs(e.e_fin) > e.bound20 + r;
    if (e.bound20 > 0) a.f20 = std::max(a.f20, std::fabs(e.e_fin) / e.bound20);
  }
  a.cons = std::max(a.cons, std::fabs(e.e_tot_direct - e.e_tot));
}

}  // namespace

BoundsJobResult run_bounds_job(const BoundsJobSpec& spec) {
  require(spec.dp >= 2 && spec.dp <= 4096, "--dps: dp {} must be in [2, 4096]", spec.dp);
  require(spec.U >= 1 && spec.U <= 1024, "--Us: U {} must be in [1, 1024]", spec.U);
  require(std::isfinite(spec.M) && spec.M > 0 && spec.M <= 1e6, "--Ms: M {} must be a finite number in (0, 1e6]",
          spec.M);
  require(std::isfinite(spec.beta) && spec.beta > 0, "--betas: beta {} must be a finite number > 0", spec.beta);
  require(spec.pairs >= 0, "--pairs {} must be >= 0", spec.pairs);
  const Params p{spec.dp, spec.U, spec.beta, spec.beta};
  const Codebook C = circular_codebook(spec.dp);
  BoundsJobResult res;
  res.spec = spec;
  res.xi = xi(spec.dp, spec.M);
  res.bound11 = bound_eq11(spec.dp, spec.U, spec.M);
  res.bound16_lo = bound_eq16_lower(spec.U, spec.M);
  res.bound16_hi = bound_eq16_upper(spec.U, spec.M);
  res.bound17 = bound_eq17(spec.U, spec.M);
  res.bound20 = bound_eq20(spec.dp, spec.U, spec.M);

  // Sampled pairs in fixed chunks; each chunk reduced on its own, chunks merged in order.
  constexpr std::int64_t kChunk = 2048;
  const std::int64_t nchunks = (spec.pairs + kChunk - 1) / kChunk;
  std::vector<Acc> acc(static_cast<std::size_t>(nchunks));
  const std::int64_t keep = std::min<std::int64_t>(std::max(spec.keep, 0), spec.pairs);
  res.sample_e_tot.assign(keep, 0);
  res.sample_e_fin.assign(keep, 0);
  res.sample_e_cont.assign(keep, 0);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t c = 0; c < nchunks; ++c) {
    std::vector<double> q(2 * spec.U), k(2 * spec.U);
    Acc& a = acc[static_cast<std::size_t>(c)];
    const std::int64_t end = std::min(spec.pairs, (c + 1) * kChunk);
    for (std::int64_t i = c * kChunk; i < end; ++i) {
      sample_bounds_pair(spec, i, q.data(), k.data());
      const PairErrors e = pair_errors(p, C, q.data(), k.data());
      a.tot.add(e.e_tot);
      a.fin.add(e.e_fin);
      a.cont.add(e.e_cont);
      check_pair(e, a);
      if (i < keep) {
        res.sample_e_tot[i] = e.e_tot;
        res.sample_e_fin[i] = e.e_fin;
        res.sample_e_cont[i] = e.e_cont;
      }
    }
  }
  Acc all;
  for (const Acc& a : acc) {
    all.tot.merge(a.tot);
    all.fin.merge(a.fin);
    all.cont.merge(a.cont);
    all.merge_bounds(a);
  }
  res.adv_pairs = adversarial_pairs(spec);
  for (const NamedPair& np : res.adv_pairs) {
    const PairErrors e = pair_errors(p, C, np.q.data(), np.k.data());
    res.adv.push_back(e);
    res.adv_tot.add(e.e_tot);
    res.adv_fin.add(e.e_fin);
    res.adv_cont.add(e.e_cont);
    check_pair(e, all);
  }
  res.tot = all.tot;
  res.fin = all.fin;
  res.cont = all.cont;
  res.viol11 = all.v11, res.viol16 = all.v16, res.viol17 = all.v17, res.viol20 = all.v20;
  res.checked11 = all.c11, res.checked20 = all.c20;
  res.frac11 = all.f11, res.frac16 = all.f16, res.frac17 = all.f17, res.frac20 = all.f20;
  res.max_consistency = all.cons;
  return res;
}

}  // namespace memcap::ramnet
