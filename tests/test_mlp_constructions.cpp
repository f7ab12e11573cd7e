// Exact invariants of the Hebbian-MLP constructions (spec hebbian.md §8.1 items 1, 2, 5, 6, 9,
// exact-K2, NTK formula, §3.7 parameter counts) and the statistics of the K2 sketch (item 3).
#include <doctest/doctest.h>

#include <cmath>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "mlp/constructions.hpp"
#include "mlp/factset.hpp"
#include "mlp/method.hpp"

using namespace memcap;
using namespace memcap::mlp;

namespace {

FactSet small_facts(std::int64_t d, std::int64_t F, std::uint64_t seed, bool tied = true) {
  FactSetSpec s;
  s.dim = d;
  s.facts = F;
  s.tied = tied;
  s.map = "permutation";
  s.seed = seed;
  return make_factset(s);
}

double rel_err(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) { return (a - b).norm() / b.norm(); }

}  // namespace

TEST_CASE("8.1.1: any gated bilinear MLP equals its whitened kernel Hebbian memory (m < F)") {
  // d = 12 gives rank(Φ) <= d(d+1)/2 = 78 > m = 40, so Σ̂ is invertible.
  const std::int64_t d = 12, F = 200, m = 40;
  const Eigen::MatrixXd X = rng::sphere_rows(F, d, 1, rng::kUser);
  const auto fmap = BilinearFeatureMap::random(m, d, 7, true);
  const GatedMLP mlp = fmap.as_mlp(rng::normal_matrix(d, m, 3, rng::kUser + 1));  // arbitrary readout
  const Eigen::MatrixXd Y = mlp.forward(X), phi = mlp.hidden(X);
  const Eigen::MatrixXd sigma = phi.transpose() * phi / double(F);
  const Eigen::MatrixXd Z = rng::sphere_rows(5, d, 2, rng::kUser);
  const Eigen::MatrixXd hz = mlp.hidden(Z);
  // (1/F) Σ_i MLP(x_i) φ(x_i)ᵀ Σ̂^{-1} φ(z)
  const Eigen::MatrixXd lhs = (Y.transpose() * phi / double(F) * sigma.ldlt().solve(hz.transpose())).transpose();
  CHECK(rel_err(lhs, mlp.forward(Z)) < 1e-9);
  // The feature map of the MLP is g(x) = (1/√m)(A0x)⊙(A1x).
  CHECK(rel_err(phi, fmap.apply(X)) < 1e-13);
}

TEST_CASE("8.1.2: whitened readout is ridge regression (primal) and interpolates (dual)") {
  SUBCASE("primal m <= F: W -> C_fᵀΦ(ΦᵀΦ)^{-1} as the ridge -> 0") {
    const FactSet fs = small_facts(12, 150, 4);
    const auto fmap = BilinearFeatureMap::random(40, 12, 9, true);
    const Eigen::MatrixXd phi = fmap.apply(fs.keys), C = fs.targets();
    const auto ro = whitened_readout(phi, C, 1e-13);
    CHECK_FALSE(ro.dual);
    CHECK(ro.solver == "cholesky");
    const Eigen::MatrixXd ls = phi.colPivHouseholderQr().solve(C).transpose();  // least squares
    CHECK(rel_err(ro.W, ls) < 1e-6);
  }
  SUBCASE("dual m > F: W g(k_i) = c_f(i) up to the ridge") {
    const FactSet fs = small_facts(16, 60, 5);
    const auto fmap = BilinearFeatureMap::random(100, 16, 11, true);
    const Eigen::MatrixXd phi = fmap.apply(fs.keys), C = fs.targets();
    const double ridge = 1e-6;
    const auto ro = whitened_readout(phi, C, ridge);
    CHECK(ro.dual);
    const Eigen::MatrixXd resid = ro.W * phi.transpose() - C.transpose();
    // Exact residual = -λ C_fᵀ(ΦΦᵀ+λI)^{-1}: bounded by λ ||C_f||₂ / σ_min(ΦΦᵀ).
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(phi * phi.transpose());
    const double bound = ridge * C.norm() / es.eigenvalues().minCoeff();
    CHECK(resid.norm() <= 1.01 * bound + 1e-12);
    CHECK(resid.norm() < 1e-3);
  }
}

TEST_CASE("8.1.3: the bilinear sketch is unbiased for <x,z>² with Var = (1+4ρ²+3ρ⁴)/m") {
  // Monte-Carlo over N independent feature draws (seeds 0..N-1). Tolerances: 5 standard errors,
  // SE(mean) = sqrt(Var/N); SE(sample variance) from the sample 4th central moment.
  const std::int64_t d = 8, m = 16, N = 6000;
  Eigen::MatrixXd XZ = Eigen::MatrixXd::Zero(2, d);
  const double rho = 0.6;
  XZ(0, 0) = 1;
  XZ(1, 0) = rho;
  XZ(1, 1) = std::sqrt(1 - rho * rho);
  Eigen::VectorXd kxz(N), kxx(N);
  for (std::int64_t s = 0; s < N; ++s) {
    const Eigen::MatrixXd g = BilinearFeatureMap::random(m, d, static_cast<std::uint64_t>(s), true).apply(XZ);
    kxz[s] = g.row(0).dot(g.row(1));
    kxx[s] = g.row(0).squaredNorm();
  }
  auto check_mean_var = [&](const Eigen::VectorXd& k, double mean, double var) {
    const double mu = k.mean();
    const Eigen::ArrayXd c = k.array() - mu;
    const double v = c.square().sum() / double(N - 1), mu4 = c.pow(4).mean();
    const double se_mean = std::sqrt(var / double(N)), se_var = std::sqrt((mu4 - v * v) / double(N));
    INFO("mean " << mu << " expected " << mean << " (SE " << se_mean << "), var " << v << " expected " << var
                 << " (SE " << se_var << ")");
    CHECK(std::abs(mu - mean) < 5 * se_mean);
    CHECK(std::abs(v - var) < 5 * se_var);
  };
  check_mean_var(kxx, 1.0, 8.0 / double(m));
  check_mean_var(kxz, rho * rho, (1 + 4 * rho * rho + 3 * std::pow(rho, 4)) / double(m));
}

TEST_CASE("8.1.5: whitening normalization ||ΦΣ̂^{-1}Φᵀ||_F² = F²m and trace = Fm") {
  const std::int64_t d = 12, F = 120, m = 30;
  const Eigen::MatrixXd phi = BilinearFeatureMap::random(m, d, 21, true).apply(rng::sphere_rows(F, d, 3, rng::kUser));
  const Eigen::MatrixXd sigma = gram_columns(phi, 1.0 / double(F));
  const Eigen::MatrixXd Kw = phi * sigma.ldlt().solve(phi.transpose());
  CHECK(Kw.squaredNorm() == doctest::Approx(double(F * F * m)).epsilon(1e-9));
  CHECK(Kw.trace() == doctest::Approx(double(F * m)).epsilon(1e-9));
}

TEST_CASE("8.1.6: Welch bound ||ΦΦᵀ||_F² >= tr(ΦΦᵀ)²/m") {
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    const std::int64_t m = 8 + 8 * static_cast<std::int64_t>(seed);
    const Eigen::MatrixXd phi =
        BilinearFeatureMap::random(m, 10, seed, true).apply(rng::sphere_rows(50, 10, seed, rng::kUser));
    const Eigen::MatrixXd g = gram_rows(phi);
    CHECK(g.isApprox(phi * phi.transpose(), 1e-12));
    CHECK(g.squaredNorm() >= g.trace() * g.trace() / double(m) * (1 - 1e-12));
  }
}

TEST_CASE("8.1.9: Hebbian MLPs are 2-homogeneous: MLP(c x) = c² MLP(x)") {
  const FactSet fs = small_facts(8, 64, 6);
  const Eigen::MatrixXd X = rng::sphere_rows(4, 8, 8, rng::kUser);
  for (const char* spec : {"hebbian", "hebbian:exact-k2", "hebbian:whitened", "hebbian:data-dependent"}) {
    const GatedMLP mlp = build_mlp(parse_method(spec), fs, 0, 3);
    CHECK_MESSAGE(rel_err(mlp.forward(2.5 * X), 6.25 * mlp.forward(X)) < 1e-12, spec);
  }
}

TEST_CASE("exact-K2: kernel is <x,z>² exactly; MLP equals the direct Gram-form memory") {
  const std::int64_t d = 7;
  const auto fmap = exact_k2_feature_map(d);
  CHECK(fmap.width() == d * (d + 1) / 2);
  const Eigen::MatrixXd X = rng::normal_matrix(9, d, 1, rng::kUser);
  const Eigen::MatrixXd g = fmap.apply(X);
  CHECK(rel_err(g * g.transpose(), exact_k2_gram(X, X)) < 1e-13);
  const FactSet fs = small_facts(d, 40, 2);
  const GatedMLP mlp = build_mlp(parse_method("hebbian:exact-k2"), fs, 0, 0);
  const Eigen::MatrixXd direct = exact_k2_gram(X, fs.keys) * fs.targets() / double(fs.F());
  CHECK(rel_err(mlp.forward(X), direct) < 1e-12);
  CHECK_THROWS_AS(build_mlp(parse_method("hebbian:exact-k2"), fs, 10, 0), UserError);
}

TEST_CASE("sketched Hebbian MLP = (1/F) Σ_t c_t K̂(k_t, x)") {
  const FactSet fs = small_facts(10, 50, 3, false);
  const GatedMLP mlp = build_mlp(parse_method("hebbian"), fs, 30, 5);
  const auto fmap = BilinearFeatureMap::random(30, 10, 5, true);
  const Eigen::MatrixXd X = rng::sphere_rows(6, 10, 4, rng::kUser);
  const Eigen::MatrixXd khat = fmap.apply(X) * fmap.apply(fs.keys).transpose();  // 6 x F
  CHECK(rel_err(mlp.forward(X), khat * fs.targets() / double(fs.F())) < 1e-12);
  CHECK(mlp.gate == "identity");
}

TEST_CASE("NTK: forward = P(ReLU(W_gate x) ⊙ (W_up x)), W_up = (1/m) Σ_i (h_i ⊙ Pᵀc_i) k_iᵀ") {
  const FactSet fs = small_facts(6, 30, 9);
  const std::int64_t m = 20;
  const GatedMLP mlp = build_mlp(parse_method("ntk"), fs, m, 2);
  Eigen::MatrixXd Wup = Eigen::MatrixXd::Zero(m, 6);
  const Eigen::MatrixXd C = fs.targets();
  for (std::int64_t i = 0; i < fs.F(); ++i) {
    const Eigen::VectorXd h = mlp.G * fs.keys.row(i).transpose();
    const Eigen::VectorXd pc = mlp.B.transpose() * C.row(i).transpose();
    Wup += h.cwiseProduct(pc) * fs.keys.row(i) / double(m);
  }
  CHECK(rel_err(mlp.A, Wup) < 1e-12);
  for (Eigen::Index j = 0; j < mlp.B.cols(); ++j) CHECK(mlp.B.col(j).norm() == doctest::Approx(1.0));
  const Eigen::VectorXd x = fs.keys.row(0).transpose();
  const Eigen::VectorXd y = mlp.B * ((mlp.A * x).cwiseProduct((mlp.G * x).cwiseMax(0.0)));
  CHECK(rel_err(mlp.forward(fs.keys.topRows(1)).row(0).transpose(), y) < 1e-12);
}

TEST_CASE("3.7: parameter counts (Hebbian 3md; NTK 3md + 2m + d, zero biases counted)") {
  const FactSet fs = small_facts(8, 40, 1);
  for (const char* spec : {"hebbian", "hebbian:whitened", "hebbian:data-dependent", "ntk", "hebbian:exact-k2"}) {
    const MethodSpec ms = parse_method(spec);
    const GatedMLP mlp = build_mlp(ms, fs, ms.kind == MethodKind::exact_k2 ? 0 : 24, 1);
    const std::int64_t m = mlp.width(), d = 8;
    const std::int64_t stored = mlp.A.size() + mlp.G.size() + mlp.B.size() + mlp.bias_up.size() +
                                mlp.bias_gate.size() + mlp.bias_out.size();
    CHECK_MESSAGE(mlp.param_count == stored, spec);
    CHECK(mlp.param_count == (ms.kind == MethodKind::ntk ? 3 * m * d + 2 * m + d : 3 * m * d));
    CHECK(mlp.method == spec);
  }
  CHECK(default_width(MethodKind::whitened, 64) == 256);
  CHECK(default_width(MethodKind::exact_k2, 32) == 528);
}

TEST_CASE("whitened: primal iff m <= F, the solver is recorded") {
  const FactSet fs = small_facts(12, 40, 2);
  CHECK(build_mlp(parse_method("hebbian:whitened"), fs, 40, 1).solver_note == "primal cholesky");
  CHECK(build_mlp(parse_method("hebbian:whitened"), fs, 41, 1).solver_note == "dual cholesky");
}

TEST_CASE("solve_symmetric falls back to LDLᵀ (indefinite) and to the eigen-solve (singular)") {
  Eigen::MatrixXd S(3, 3);
  S << 2, 1, 0, 1, -3, 1, 0, 1, 4;
  const Eigen::MatrixXd S0 = S, R0 = Eigen::MatrixXd::Identity(3, 2);
  Eigen::MatrixXd R = R0;
  CHECK(solve_symmetric(S, R) == "ldlt-bunch-kaufman");
  CHECK((S0 * R - R0).norm() < 1e-12);
  Eigen::MatrixXd Sing = Eigen::MatrixXd::Ones(2, 2), Rs(2, 1);
  Rs << 2, 2;
  CHECK(solve_symmetric(Sing, Rs) == "eigen");
  CHECK((Eigen::MatrixXd::Ones(2, 2) * Rs - Eigen::MatrixXd::Constant(2, 1, 2.0)).norm() < 1e-12);
  Eigen::MatrixXd Spd = S0 * S0.transpose(), Rp = R0;
  CHECK(solve_symmetric(Spd, Rp) == "cholesky");
  CHECK((S0 * S0.transpose() * Rp - R0).norm() < 1e-10);
}

TEST_CASE("data-dependent CG solves the FitProjection normal equations") {
  // Tiny problem: compare CG (float64) with a dense solve of the md x md operator.
  const FactSet fs = small_facts(3, 10, 1);
  const std::int64_t m = 4, d = 3;
  const auto fmap = BilinearFeatureMap::random(m, d, 2, false);
  const Eigen::MatrixXd C = fs.targets(), W0 = hebbian_readout(fmap.apply(fs.keys), C);
  const Eigen::MatrixXd Pi = fmap.A0 * fs.keys.transpose();
  const double ridge = 1e-3;
  Eigen::MatrixXd Op(m * d, m * d);
  for (std::int64_t k = 0; k < m * d; ++k) {
    Eigen::MatrixXd E = Eigen::MatrixXd::Zero(m, d);
    E(k % m, k / m) = 1;
    const Eigen::MatrixXd col = fit_projection_operator(Pi, fs.keys, C, W0, ridge, E);
    Op.col(k) = Eigen::Map<const Eigen::VectorXd>(col.data(), m * d);
  }
  CHECK((Op - Op.transpose()).norm() < 1e-10 * Op.norm());  // symmetric
  const Eigen::MatrixXd rhs = fit_projection_rhs(Pi, fs.keys, C, W0);
  const Eigen::VectorXd xd = Op.ldlt().solve(Eigen::Map<const Eigen::VectorXd>(rhs.data(), m * d));
  CgOptions o;
  o.ridge = ridge;
  const CgResult r = fit_projection(Pi, fs.keys, C, W0, o);
  CHECK(r.precision == "float64");
  CHECK(r.converged);
  CHECK_FALSE(r.curvature_abort);
  CHECK((Eigen::Map<const Eigen::VectorXd>(r.X.data(), m * d) - xd).norm() < 1e-7 * xd.norm());
  // float32 path (forced) reaches its own tolerance on the same system.
  o.precision = "float32";
  const CgResult r32 = fit_projection(Pi, fs.keys, C, W0, o);
  CHECK(r32.precision == "float32");
  CHECK((r32.X - r.X).norm() < 1e-3 * r.X.norm());
}

TEST_CASE("method parser: verbatim text, options, errors that list the valid choices") {
  const MethodSpec w = parse_method("hebbian:whitened,ridge=1e-4");
  CHECK(w.kind == MethodKind::whitened);
  CHECK(w.ridge == 1e-4);
  CHECK(w.text == "hebbian:whitened,ridge=1e-4");
  const MethodSpec dd = parse_method("hebbian:data-dependent,cg-tol=1e-6,cg-max-iter=50,cg-precision=float64");
  CHECK(dd.cg_tol == 1e-6);
  CHECK(dd.cg_max_iter == 50);
  CHECK(dd.cg_precision == "float64");
  CHECK(parse_method("ntk").kind == MethodKind::ntk);
  CHECK(parse_method("hebbian").kind == MethodKind::sketched);
  CHECK(parse_method("hebbian:exact-k2").kind == MethodKind::exact_k2);
  try {
    parse_method("hebian");
    FAIL("no error");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("hebbian:whitened") != std::string::npos);
  }
  CHECK_THROWS_AS(parse_method("hebbian,ridge=1"), UserError);          // sketched takes no options
  CHECK_THROWS_AS(parse_method("hebbian:whitened,rige=1"), UserError);  // typo
  CHECK_THROWS_AS(parse_method("hebbian:whitened,ridge=-1"), UserError);
  CHECK_THROWS_AS(parse_method("hebbian:whitened,ridge=abc"), UserError);
  CHECK_THROWS_AS(parse_method("ntk,ridge=1"), UserError);
  CHECK_THROWS_AS(parse_method(""), UserError);
}

TEST_CASE("split_method_list: options stay with their method (hebb capacity and hebb ssfr --methods)") {
  using V = std::vector<std::string>;
  CHECK(split_method_list({"hebbian:whitened,ridge=1e-6,ntk"}) == V{"hebbian:whitened,ridge=1e-6", "ntk"});
  CHECK(split_method_list({"gd,precision=tf32,epochs=10,hebbian"}) == V{"gd,precision=tf32,epochs=10", "hebbian"});
  CHECK(split_method_list({"gd", "ntk,hebbian:data-dependent,cg-tol=1e-6"}) ==
        V{"gd", "ntk", "hebbian:data-dependent,cg-tol=1e-6"});  // repeated flags / preset arrays
  CHECK(split_method_list({"gd:transformer,gate=relu"}) == V{"gd:transformer,gate=relu"});
  // A leading option has no method to join: it stays a token, and parse_method refuses it by name.
  CHECK(split_method_list({"ridge=1,ntk"}) == V{"ridge=1", "ntk"});
  CHECK_THROWS_AS(parse_method(split_method_list({"ridge=1,ntk"})[0]), UserError);
  CHECK(split_method_list({}).empty());
}
