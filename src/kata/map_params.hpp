// The one identity of a KATA feature map (spec kata.md §2): the kind enum and the resolved constants of a
// parsed map. FeatureMap::parse (feature_map.hpp) is the only producer; the CPU forms, `kata capacity`,
// `kata bench` and every CUDA kernel (kernels/kata_feature_map.cuh evaluates ψ and its VJP from it) read this.
// Plain C++ (no Eigen, no fmt): nvcc includes it.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define MEMCAP_HD __host__ __device__
#else
#define MEMCAP_HD
#endif

namespace memcap::kata {

// Linear ψ(x)=x; Orthant ReLU(x)+ε; Lorentz the L3 implementation map (y, ‖y‖(1+s²)); LorentzLift (x, ‖x‖);
// LorentzRay 2^{-1/2}(x/‖x‖, 1); BlockPsd M_g; SumPsd Σ_g; EvenDegree packed u^{⊗2r}; Softmax exp(⟨x,y⟩/τ)
// (kernel only, no finite ψ).
enum class MapKind : int { Linear, Orthant, Lorentz, LorentzLift, LorentzRay, BlockPsd, SumPsd, EvenDegree, Softmax };

struct MapParams {
  MapKind kind = MapKind::Linear;
  int d = 0;                   // input width (the head width)
  int g = 1;                   // blocks of M_g / Σ_g (1 otherwise)
  int m = 0;                   // block width d / g for the PSD maps, d otherwise
  int degree = 1;              // 1, 2 (PSD), 2r (EvenDegree)
  std::int64_t n_features = 0; // packed n_ψ (0 for softmax)
  double eps = 0.0;            // orthant: ReLU(x)+ε; PSD: εI (per block for M_g, once for Σ_g)
  double scale = 1.0;          // c of Σ_g
  double tau = 0.0;            // softmax temperature

  MEMCAP_HD constexpr bool is_psd() const { return kind == MapKind::BlockPsd || kind == MapKind::SumPsd; }
  // A cone map: every kernel value is >= 0, so the normalized readout is defined.
  MEMCAP_HD constexpr bool nonnegative() const { return kind != MapKind::Linear; }
  // n_ψ = d and ψ elementwise or nearly (linear, orthant, Lorentz L3): the tree scan's maps (§5.3).
  MEMCAP_HD constexpr bool is_linear_family() const {
    return kind == MapKind::Linear || kind == MapKind::Orthant || kind == MapKind::Lorentz;
  }
  // ψ and its VJP exist on the device (kernels/kata_feature_map.cuh): every kind but EvenDegree and Softmax.
  MEMCAP_HD constexpr bool has_device_psi() const {
    return is_psd() || is_linear_family() || kind == MapKind::LorentzLift || kind == MapKind::LorentzRay;
  }
};

}  // namespace memcap::kata
