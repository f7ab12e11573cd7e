// The one device implementation of the KATA feature maps (kernels/kata_feature_map.cuh: ψ per feature slot and its
// VJP, psi_vjp_row → psi_vjp_coord_psd for the PSD maps) compiled for the host by the C++ compiler (the CUDA headers
// make __device__ empty there), in its float64 instantiation, against the float64 CPU FeatureMap::apply and
// FeatureMap::vjp, for every map with a device ψ. No GPU needed: this runs in CI wherever the CUDA toolkit is
// installed, and checks the same source the kernels compile (the fp32 instantiations run on the GPU in
// gpu_test_kata_attention, "device psi and its VJP ...").
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kata/feature_map.hpp"
#include "kata_feature_map.cuh"

using namespace memcap::kata;

namespace {
double rel(const std::vector<double>& got, const Eigen::MatrixXd& ref, int r) {
  double num = 0, den = 0;
  for (int i = 0; i < ref.cols(); ++i) {
    num += (got[static_cast<std::size_t>(i)] - ref(r, i)) * (got[static_cast<std::size_t>(i)] - ref(r, i));
    den += ref(r, i) * ref(r, i);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
}  // namespace

TEST_CASE("device psi and VJP (kata_feature_map.cuh) compiled for the host = FeatureMap::apply / vjp in float64") {
  std::mt19937_64 gen(11);
  std::normal_distribution<double> nd;
  int checked = 0;
  for (const char* spec : {"linear", "orthant", "lorentz", "m1", "m2:eps=1e-4", "m4", "sigma2", "sigma4:eps=0,scale=0.25"})
    for (const int d : {8, 32, 64}) {
      const FeatureMap fm = FeatureMap::parse(spec, d);
      const cuda::DeviceMap dm = cuda::device_map(fm.params());
      const int n = dm.n_features;
      REQUIRE(n == fm.feature_dim());
      Eigen::MatrixXd X(4, d), G(4, n);
      for (int r = 0; r < 4; ++r) {
        for (int i = 0; i < d; ++i) X(r, i) = nd(gen);
        for (int f = 0; f < n; ++f) G(r, f) = nd(gen);
      }
      X(3, 0) = 0.0;  // an exact zero coordinate (orthant's one-sided derivative)
      const Eigen::MatrixXd psi_ref = fm.apply(X), vjp_ref = fm.vjp(X, G);
      for (int r = 0; r < 4; ++r) {
        std::vector<double> x(static_cast<std::size_t>(d)), g(static_cast<std::size_t>(n)), psi(static_cast<std::size_t>(n)),
            gx(static_cast<std::size_t>(d));
        for (int i = 0; i < d; ++i) x[static_cast<std::size_t>(i)] = X(r, i);
        for (int f = 0; f < n; ++f) g[static_cast<std::size_t>(f)] = G(r, f);
        cuda::with_map_kind(dm.kind, [&](auto kind) {
          constexpr MapKind K = decltype(kind)::value;
          const double aux = cuda::psi_aux<K, double>(dm, x.data());
          for (int f = 0; f < n; ++f) psi[static_cast<std::size_t>(f)] = cuda::psi_value<K, double>(dm, x.data(), f, aux);
          cuda::psi_vjp_row<K, double>(dm, x.data(), g.data(), gx.data());
        });
        INFO(spec << " d=" << d << " row " << r);
        CHECK(rel(psi, psi_ref, r) < 1e-13);
        CHECK(rel(gx, vjp_ref, r) < 1e-13);
        ++checked;
      }
    }
  CHECK(checked == 8 * 3 * 4);
  // the packed index is the inverse of packed_pair
  for (const int m : {1, 2, 7, 32})
    for (int l = 0; l < m * (m + 1) / 2; ++l) {
      int i = 0, j = 0;
      cuda::packed_pair(m, l, i, j);
      CHECK(cuda::packed_index(m, i, j) == l);
      CHECK(cuda::packed_index(m, j, i) == l);
    }
}

TEST_CASE("the paired feature order of M_g (scan-g4p): every pair once, ψ(q)·ψ(k) unchanged, n_ψ padded at d = 64") {
  for (const int m : {2, 4, 8, 16, 32, 64}) {
    const int slots = cuda::paired_block_slots(m);
    std::vector<int> seen(static_cast<std::size_t>(m * m), 0);
    int inactive = 0;
    for (int l = 0; l < slots; ++l) {
      int i = -1, j = -1;
      const bool active = cuda::paired_pair(m, l, i, j);
      REQUIRE(i >= 0);
      REQUIRE(j < m);
      if (l % 2 == 1) {  // the second slot of a pair: same row, next column, the first column even
        int i0 = -1, j0 = -1;
        cuda::paired_pair(m, l - 1, i0, j0);
        CHECK(i0 == i);
        CHECK(j0 + 1 == j);
        CHECK(j0 % 2 == 0);
      }
      if (!active) {
        ++inactive;
        CHECK(i % 2 == 1);
        CHECK(j == i - 1);
        continue;
      }
      CHECK(i <= j);
      ++seen[static_cast<std::size_t>(i * m + j)];
    }
    CHECK(inactive == m / 2);
    int once = 0;
    for (int i = 0; i < m; ++i)
      for (int j = i; j < m; ++j) once += seen[static_cast<std::size_t>(i * m + j)] == 1 ? 1 : 0;
    CHECK(once == m * (m + 1) / 2);
  }
  std::mt19937_64 gen(5);
  std::normal_distribution<double> nd;
  for (const char* spec : {"m1", "m2:eps=1e-3", "m4", "m8:eps=0.5"})
    for (const int d : {8, 32, 64}) {
      const FeatureMap fm = FeatureMap::parse(spec, d);
      const cuda::DeviceMap dm = cuda::device_map(fm.params());
      if (dm.m % 2 != 0) continue;  // the paired order needs an even block width (m8 at d = 8: m = 1)
      const int total = dm.g * cuda::paired_block_slots(dm.m);
      if (d == 64) CHECK(total == dm.n_padded);
      CHECK(total >= dm.n_features);
      std::vector<double> q(static_cast<std::size_t>(d)), k(static_cast<std::size_t>(d));
      for (int rep = 0; rep < 3; ++rep) {
        for (int i = 0; i < d; ++i) {
          q[static_cast<std::size_t>(i)] = nd(gen);
          k[static_cast<std::size_t>(i)] = nd(gen);
        }
        double packed = 0, paired = 0, magnitude = 0;  // magnitude: Σ |ψ_f(q) ψ_f(k)|, the sums' rounding scale
        for (int f = 0; f < dm.n_features; ++f) {
          const double t = cuda::psi_value<MapKind::BlockPsd, double>(dm, q.data(), f, 0.0) *
                           cuda::psi_value<MapKind::BlockPsd, double>(dm, k.data(), f, 0.0);
          packed += t;
          magnitude += std::abs(t);
        }
        for (int f = 0; f < total + 64; ++f) {  // past the g blocks: inactive
          const auto s = cuda::make_paired_slot<double>(dm, f);
          if (f >= total) CHECK_FALSE(s.active);
          paired += cuda::eval_slot<MapKind::BlockPsd, double>(dm, s, q.data(), 0.0) *
                    cuda::eval_slot<MapKind::BlockPsd, double>(dm, s, k.data(), 0.0);
        }
        INFO(std::string(spec) << " d=" << d);
        CHECK(std::abs(paired - packed) <= 1e-13 * magnitude);
      }
    }
}
