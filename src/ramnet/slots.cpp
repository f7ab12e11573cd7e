// Slot utilisation (spec ramnet.md §3 E6). See slots.hpp.
#include "ramnet/slots.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/threads.hpp"
#include "sweep/sweep.hpp"
#include "ramnet/gsu.hpp"
#include "ramnet/topk.hpp"

namespace memcap::ramnet {

void validate(const SlotConfig& c) {
  validate(c.params);
  const std::int64_t A = address_count(c.params);
  require(c.topk >= 0 && c.topk <= A, "--topk {} must be between 0 (full) and the address space dp^U = {}", c.topk, A);
  if (c.topk == 0) {
    require_dense(c.params, 8.0, "slot utilisation with full writes (--topk 0)");
    // Per trial in flight: the dense masses and one token's full write set (slot, w, 1 − w).
    sweep::require_memory(static_cast<double>(A) * 40.0 * max_threads(), "slot utilisation with full writes (--topk 0)");
  }
  require(!std::isnan(c.gamma) && c.gamma != INFINITY, "--gamma must be a finite number or -inf");
  require(c.T >= 1 && c.T <= 10'000'000, "--T {} must be between 1 and 1e7", c.T);
  require(c.n >= 1 && c.n <= 1'000'000, "--queries {} must be between 1 and 1e6", c.n);
  require(c.trials >= 1 && c.trials <= 100'000, "--trials {} must be between 1 and 1e5", c.trials);
  require(std::isfinite(c.theta) && c.theta >= 0, "--theta {} must be a finite number >= 0", c.theta);
  require(static_cast<double>(c.n) * static_cast<double>(c.T) <= 1e9,
          "--queries x --T = {} x {} pairs per trial is too many (at most 1e9)", c.n, c.T);
}

double gini(std::vector<double> positive, std::int64_t zeros) {
  const double n = static_cast<double>(positive.size()) + static_cast<double>(zeros);
  double total = 0;
  for (double x : positive) total += x;
  if (!(total > 0) || n <= 0) return 0.0;
  std::sort(positive.begin(), positive.end());
  // Sorted ascending, zeros first: G = 2 Σ_i i x_(i) / (n Σ x) − (n + 1)/n, i = 1..n.
  double s = 0;
  for (std::size_t k = 0; k < positive.size(); ++k) s += (static_cast<double>(zeros) + static_cast<double>(k) + 1) * positive[k];
  return 2 * s / (n * total) - (n + 1) / n;
}

SlotStats slot_utilisation(const SlotConfig& c) {
  validate(c);
  const Params& p = c.params;
  const int dp = p.dp, U = p.U;
  const std::int64_t A = address_count(p), K = c.topk;
  const std::ptrdiff_t tw = static_cast<std::ptrdiff_t>(U) * dp;
  const CodebookSet cb = make_codebooks(CodebookKind::circular, dp, U, c.gen, c.seed);
  std::vector<SlotStats> per(static_cast<std::size_t>(c.trials));
  parallel_for_rethrow(c.trials, [&](std::int64_t trial) {
    const AttnSample smp = generate(c.gen, dp, U, c.T, c.n, 1, c.seed, static_cast<std::uint64_t>(trial));
    const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> Kr = smp.K, Qr = smp.Q;
    GsuMemory mem(A, 1, K == 0, 0.0);
    AddressWeightsBuilder b(dp, U);
    std::vector<double> table(static_cast<std::size_t>(tw));
    std::vector<std::int64_t> f(static_cast<std::size_t>(std::max<std::int64_t>(K, 1)));
    std::vector<double> l(f.size());
    std::vector<TopKDecoder> dec;
    if (K > 0) dec.emplace_back(dp, U, K);
    std::vector<SortedList> wlists;
    AddressWeights w;
    const double zero = 0.0;
    for (std::int64_t s = 0; s < c.T; ++s) {
      factor_rows(cb, p.beta_w, Kr.row(s).data(), table.data());
      if (K > 0) {
        dec[0].decode(table.data(), f.data(), l.data());
        b.topk(table.data(), f.data(), l.data(), K, w);
        wlists.push_back(sort_by_flat(f.data(), l.data(), K));
      } else {
        b.full(table.data(), w);
      }
      mem.write(w, &zero, c.gamma);
    }
    SlotStats st;
    std::vector<double> pos;
    double total = 0;
    std::int64_t occupied = 0;
    mem.for_each_slot([&](std::int64_t, double m, const double*) {
      if (m > 0) {
        pos.push_back(m);
        total += m;
      }
      if (m > c.theta) ++occupied;
    });
    double H = 0;
    for (double m : pos) H -= (m / total) * std::log(m / total);
    st.occupied_fraction = static_cast<double>(occupied) / static_cast<double>(A);
    st.effective_slots = total > 0 ? std::exp(H) : 0.0;
    st.effective_ratio = st.effective_slots / static_cast<double>(A);
    st.stored_slots = static_cast<double>(pos.size());
    st.total_mass = total;
    st.gini = gini(pos, A - static_cast<std::int64_t>(pos.size()));
    // Reads: hit mass and pair overlap.
    double hit = 0, overlap = 0;
    Eigen::MatrixXd full_overlap;
    if (K == 0) full_overlap = log_kappa_matrix(p, cb, smp.Q, smp.K);
    const double logA = std::log(static_cast<double>(A));
    for (std::int64_t i = 0; i < c.n; ++i) {
      factor_rows(cb, p.beta_r, Qr.row(i).data(), table.data());
      AddressWeights r;
      if (K > 0) {
        dec[0].decode(table.data(), f.data(), l.data());
        b.topk(table.data(), f.data(), l.data(), K, r, false);
        const SortedList rl = sort_by_flat(f.data(), l.data(), K);
        for (const auto& wl : wlists) {
          const TruncatedKappa tk = truncated_kappa(rl, wl, 0.0);  // log Σ r w (|A| factor left out)
          if (tk.intersection > 0) overlap += std::exp(tk.log_kappa);
        }
      } else {
        b.full(table.data(), r, false);
        for (std::int64_t s = 0; s < c.T; ++s) overlap += std::exp(full_overlap(i, s) - logA);
      }
      for (std::size_t k = 0; k < r.size(); ++k)
        if (mem.mass(r.slot[k]) > c.theta) hit += r.p[k];
    }
    st.read_hit_mass = hit / static_cast<double>(c.n);
    st.pair_overlap = overlap / (static_cast<double>(c.n) * static_cast<double>(c.T));
    per[static_cast<std::size_t>(trial)] = st;
  });
  SlotStats out;
  for (const auto& s : per) {  // trial order: independent of the thread count
    out.occupied_fraction += s.occupied_fraction;
    out.effective_slots += s.effective_slots;
    out.effective_ratio += s.effective_ratio;
    out.gini += s.gini;
    out.read_hit_mass += s.read_hit_mass;
    out.pair_overlap += s.pair_overlap;
    out.stored_slots += s.stored_slots;
    out.total_mass += s.total_mass;
  }
  const double t = static_cast<double>(c.trials);
  out.occupied_fraction /= t;
  out.effective_slots /= t;
  out.effective_ratio /= t;
  out.gini /= t;
  out.read_hit_mass /= t;
  out.pair_overlap /= t;
  out.stored_slots /= t;
  out.total_mass /= t;
  return out;
}

}  // namespace memcap::ramnet
