// Plain description of a capacity kernel (map kind and its constants), shared by the CPU path and
// the CUDA kernels (kernels/kata_capacity.cu); no Eigen, no fmt, so nvcc can include it.
#pragma once

namespace memcap::kata {

// Which closed form. Packing of PSD factors: packed, off-diagonals scaled by sqrt(2) (spec §2.4).
enum class CapacityKernelKind : int {
  linear = 0,        // q.k (signed reference)
  orthant = 1,       // sum_i (relu(q_i)+eps)(relu(k_i)+eps)
  lorentz = 2,       // L3 implementation map (y, |y|(1+s^2)), n_psi = d
  lorentz_ray = 3,   // L2: 2^{-1/2}(x/|x|, 1), kernel (1 + cos(q,k))/2, n_psi = d+1
  lorentz_lift = 4,  // L1: (x, |x|), kernel q.k + |q||k|, n_psi = d+1
  psd_blocks = 5,    // M_g (g = 1: M1; deg2 = M1 with eps = 0): sum_a (q_a.k_a)^2 + eps terms
  psd_sum = 6,       // Sigma_g: c^2 sum_{a,b} (q_a.k_b)^2 + eps c (|q|^2+|k|^2) + eps^2 m
  softmax = 7,       // exp(q.k / tau), full KV cache as the "state"
};

struct CapacityKernelParams {
  CapacityKernelKind kind = CapacityKernelKind::linear;
  int d = 0;           // raw key dimension (d_head)
  int g = 1;           // blocks (M_g, Sigma_g)
  int m = 0;           // block width d/g
  double eps = 0.0;    // interior regularizer (orthant, M_g, Sigma_g)
  double scale = 1.0;  // Sigma_g factor c (1/4 for sigma4)
  double tau = 0.0;    // softmax temperature
};

}  // namespace memcap::kata
