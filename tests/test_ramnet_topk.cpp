// Exact Top-K over the product space (spec ramnet.md §1.5, §5.5, §6 T12): the heap decoder against the
// dense enumerate-and-select reference (random tables, exact ties), T12's top-5 addresses and the
// truncated kernel κ_A^K with its intersection sizes, batches independent of the thread count.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "ramnet/topk.hpp"

using namespace memcap;
using namespace memcap::ramnet;

namespace {
const double qD[4] = {0.5, 0.2, -0.4, 0.3};
const double kD[4] = {0.3, -0.1, -0.2, 0.5};

std::vector<double> rows_of(const double* x, int dp, int U, double beta) {
  std::vector<double> t(static_cast<std::size_t>(dp * U));
  factor_rows(circular_codebook(dp), beta, x, U, t.data());
  return t;
}
}  // namespace

TEST_CASE("T12: top-5 read addresses of case D (dp=4, U=2, beta=1)") {
  const auto t = rows_of(qD, 4, 2, 1.0);
  TopKDecoder dec(4, 2, 5);
  std::int64_t flat[5];
  double lp[5];
  dec.decode(t.data(), flat, lp);
  const std::int64_t want_flat[5] = {8, 4, 9, 5, 12};
  const double want_p[5] = {0.1346435985, 0.1218305661, 0.0997464311, 0.0902543032, 0.0668620323};
  for (int k = 0; k < 5; ++k) {
    CHECK(flat[k] == want_flat[k]);
    CHECK(std::exp(lp[k]) == doctest::Approx(want_p[k]).epsilon(1e-9));
  }
  // digits of flat 8 = (0, 2): a0 = 8 mod 4, a1 = 8 / 4
  CHECK(flat[0] % 4 == 0);
  CHECK(flat[0] / 4 == 2);
  DenseTopK ref(4, 2, 5);
  std::int64_t rflat[5];
  double rlp[5];
  ref.decode(t.data(), rflat, rlp);
  for (int k = 0; k < 5; ++k) {
    CHECK(rflat[k] == flat[k]);
    CHECK(rlp[k] == lp[k]);  // same summation order: bit-identical
  }
}

TEST_CASE("T12: truncated kernel kappa_A^K and |intersection| for K = 16, 8, 5, 3, 1") {
  const auto tr = rows_of(qD, 4, 2, 1.0), tw = rows_of(kD, 4, 2, 1.0);
  struct Want { std::int64_t K; double kappa; std::int64_t inter; };
  const Want cases[] = {{16, 1.1754669909, 16}, {8, 0.9132380493, 7}, {5, 0.5702476771, 3},
                        {3, 0.4479418627, 2},   {1, 0.0, 0}};
  for (const auto& c : cases) {
    CAPTURE(c.K);
    TopKDecoder dec(4, 2, c.K);
    std::vector<std::int64_t> fr(c.K), fw(c.K);
    std::vector<double> lr(c.K), lw(c.K);
    dec.decode(tr.data(), fr.data(), lr.data());
    dec.decode(tw.data(), fw.data(), lw.data());
    const auto r = sort_by_flat(fr.data(), lr.data(), c.K), w = sort_by_flat(fw.data(), lw.data(), c.K);
    const TruncatedKappa tk = truncated_kappa(r, w, std::log(16.0));
    CHECK(tk.intersection == c.inter);
    if (c.kappa == 0) CHECK(tk.log_kappa == -INFINITY);
    else CHECK(std::exp(tk.log_kappa) == doctest::Approx(c.kappa).epsilon(1e-9));
  }
  // K = |A|: full kernel, retained masses 1.
  TopKDecoder full(4, 2, 16);
  std::vector<std::int64_t> f(16);
  std::vector<double> l(16);
  full.decode(tr.data(), f.data(), l.data());
  CHECK(retained_mass(l.data(), 16) == doctest::Approx(1.0).epsilon(1e-14));
}

TEST_CASE("heap decoder == dense reference on random tables, including exact ties") {
  rng::Stream64 g(12345, rng::kUser + 1);
  int cases = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int dp = 2 + static_cast<int>(g.below(7));    // 2..8
    const int U = 1 + static_cast<int>(g.below(5));     // 1..5
    const std::int64_t n = address_count(dp, U);
    const std::int64_t K = 1 + static_cast<std::int64_t>(g.below(static_cast<std::uint64_t>(std::min<std::int64_t>(n, 80))));
    const int mode = trial % 3;  // 0: continuous, 1: values from {−1,−2,−3} (many ties), 2: all equal
    std::vector<double> t(static_cast<std::size_t>(dp * U));
    for (auto& x : t) x = mode == 0 ? std::log(g.uniform()) : mode == 1 ? -1.0 - static_cast<double>(g.below(3)) : -0.5;
    DenseTopK ref(dp, U, K);
    std::vector<std::int64_t> f1(K), f2(K);
    std::vector<double> l1(K), l2(K);
    ref.decode(t.data(), f2.data(), l2.data());
    CAPTURE(dp);
    CAPTURE(U);
    CAPTURE(K);
    CAPTURE(mode);
    for (TopKSearch search : {TopKSearch::tree, TopKSearch::visited}) {
      TopKDecoder dec(dp, U, K, search);
      dec.decode(t.data(), f1.data(), l1.data());
      bool same = true;
      for (std::int64_t k = 0; k < K; ++k) same = same && f1[k] == f2[k] && l1[k] == l2[k];
      CHECK(same);
      CHECK(dec.last_pushes() <= 1 + (K - 1) * U);
      if (mode == 2)  // all scores equal: the K smallest flat indices in order
        for (std::int64_t k = 0; k < K; ++k) CHECK(f1[k] == k);
    }
    ++cases;
  }
  CHECK(cases == 400);
  // A larger space (dp = 8, U = 6: 262,144 addresses, the benchmark shape) at K = 32 and K = 500.
  for (std::int64_t K : {32, 500}) {
    std::vector<double> t(48);
    for (auto& x : t) x = std::log(g.uniform());
    DenseTopK ref(8, 6, K);
    std::vector<std::int64_t> f1(K), f2(K);
    std::vector<double> l1(K), l2(K);
    ref.decode(t.data(), f2.data(), l2.data());
    for (TopKSearch search : {TopKSearch::tree, TopKSearch::visited}) {
      TopKDecoder dec(8, 6, K, search);
      dec.decode(t.data(), f1.data(), l1.data());
      CHECK(f1 == f2);
      CHECK(l1 == l2);
    }
  }
}

TEST_CASE("decoder reuse, K bounds, batch API independent of the thread count") {
  CHECK_THROWS_AS(TopKDecoder(4, 2, 17), UserError);
  CHECK_THROWS_AS(TopKDecoder(4, 2, 0), UserError);
  const int dp = 4, U = 5;
  const std::int64_t K = 32, n = 1000;
  Eigen::MatrixXd X(n, 2 * U);
  for (Eigen::Index i = 0; i < X.size(); ++i) X.data()[i] = rng::normal(7, rng::kUser + 2, static_cast<std::uint64_t>(i));
  const Params p{dp, U, 0.795, 0.795};
  const auto C = circular_codebook(dp);
  omp_set_num_threads(1);
  const TopKLists a = topk_of_vectors(p, C, p.beta_r, X, K);
  omp_set_num_threads(2);
  const TopKLists b = topk_of_vectors(p, C, p.beta_r, X, K);
  CHECK(a.flat == b.flat);
  CHECK(a.log_prob == b.log_prob);
  // Same as one decoder over the rows; tables path = vectors path.
  std::vector<double> tables(static_cast<std::size_t>(n * U * dp));
  TopKDecoder dec(dp, U, K);
  std::vector<std::int64_t> f(K);
  std::vector<double> l(K);
  bool same = true;
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<double> x(2 * U);
    for (int c = 0; c < 2 * U; ++c) x[c] = X(i, c);
    factor_rows(C, p.beta_r, x.data(), U, tables.data() + i * U * dp);
    dec.decode(tables.data() + i * U * dp, f.data(), l.data());
    for (std::int64_t k = 0; k < K; ++k) same = same && f[k] == a.flat_row(i)[k] && l[k] == a.log_prob_row(i)[k];
  }
  CHECK(same);
  std::vector<std::int64_t> bf(static_cast<std::size_t>(n * K));
  std::vector<double> bl(static_cast<std::size_t>(n * K));
  topk_batch(dp, U, K, tables.data(), n, bf.data(), bl.data());
  CHECK(bf == a.flat);
  CHECK(bl == a.log_prob);
}
