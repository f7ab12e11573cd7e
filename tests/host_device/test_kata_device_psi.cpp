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
