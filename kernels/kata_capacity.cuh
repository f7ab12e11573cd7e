// CUDA trial of the capacity protocol (spec §4.6); CPU reference: src/kata/capacity_cpu.cpp.
// Float32 coefficients, features, state and GEMMs (cuBLAS SGEMM, no TF32), float64 per-row sums.
// The K x K coefficient matrix exists only as row tiles (tile x K), so K = 131072 fits.
#pragma once
#include <cstdint>

#include "kata/map_params.hpp"

namespace memcap::kata::cuda {

struct CapacityTrialInput {
  MapParams p;  // deg2 arrives as M_1 with eps = 0 (CapacityKernel::params)
  std::int64_t n_psi = 0;        // feature width (0 for softmax)
  bool normalized = true;        // readout psi(q)^T S / psi(q)^T Z
  bool queries_are_keys = true;  // Q == U: coherence reuses the query tile
  std::int64_t K = 0;
  int d_v = 0;
  std::int64_t n_dec = 0;
  const float* U = nullptr;            // K x d, row-major (host)
  const float* Q = nullptr;            // K x d
  const float* V = nullptr;            // K x d_v
  const float* dec = nullptr;          // n_dec x d_v (decode rows)
  const std::int64_t* target = nullptr;  // K
  const double* key_coh_a = nullptr;   // K: 1/sqrt(k(u,u)) (softmax: |u_i| umax / tau - log k(u_i,u_i) / 2)
  const double* key_coh_b = nullptr;   // K: 1/sqrt(k(u,u)) (softmax: - log k(u_j,u_j) / 2)
  std::int64_t tile_rows = 0;          // 0: automatic
};

struct CapacityTrialOutput {
  double* psnr = nullptr;  // K (host), written
  std::int64_t correct = 0;
  double coherence = 0;
  double max_deviation = 0;
};

// Runs one trial on the current device. Throws memcap::DeviceError on CUDA/cuBLAS failures.
void capacity_trial(const CapacityTrialInput& in, CapacityTrialOutput& out);

}  // namespace memcap::kata::cuda
