// GPU path of the closed-form constructions (sketched, whitened primal/dual, data-dependent CG,
// NTK; spec hebbian.md §2.1-2.5) and of argmax accuracy / margins over all P values. float64
// throughout (cuBLAS DGEMM, cuSOLVER Cholesky with the CPU path's fallbacks) except the
// data-dependent CG, which keeps the released code's float32-when-m·d>8192 rule. Random feature
// matrices are drawn on the device from the same Philox (seed, stream, index) as the CPU path,
// so CPU and GPU build the same model. Memory is bounded by tiling over rows of the fact set.
#pragma once
#ifdef MEMCAP_HAVE_CUDA
#include <Eigen/Dense>
#include <cstdint>
#include <string>

#include "mlp/factset.hpp"
#include "mlp/gated_mlp.hpp"
#include "mlp/method.hpp"

namespace memcap::gpu { class Handles; }

namespace memcap::mlp {

struct CudaProbe {
  double accuracy = 0;      // argmax accuracy over all F facts (all P values competing)
  double min_margin = 0;    // raw-output min margin (margin::MarginConvention::raw_output)
  std::string solver_note;  // which solver ran (as GatedMLP::solver_note)
};

// Build the method's MLP on the GPU and copy it back (float64) — the same model build_mlp makes (gd: trained
// by train_gd_cuda on the handles' stream).
GatedMLP build_mlp_cuda(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                        gpu::Handles& h);
// Build and evaluate without copying the model back (what a capacity probe needs).
CudaProbe probe_width_cuda(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                           gpu::Handles& h);
// Accuracy and min margin of a given model on the GPU (raw outputs).
CudaProbe evaluate_mlp_cuda(const GatedMLP& mlp, const FactSet& facts, gpu::Handles& h);
// Peak device bytes a build+probe of this size needs (checked before any allocation).
std::size_t closed_form_cuda_bytes(const MethodSpec& method, std::int64_t F, std::int64_t P, std::int64_t d,
                                   std::int64_t width);

// ---- additions (cfgpu) ---------------------------------------------------------------------------
// Knobs of the GPU path for tests and benchmarks; the defaults are what the apps and the capacity
// search use.
struct CudaTuning {
  std::int64_t tile = 0;     // rows / columns per tile of every loop; 0 = automatic (<= 2^26 elements per buffer)
  bool device_draw = false;  // draw A0/A1 and the NTK matrices with the device Philox kernel (device log/cos:
                             // a few ulp from the host draw) instead of drawing on the host and uploading
                             // (the default: bit-identical to the CPU path's matrices)
  bool poison = false;       // fill the device arena with NaN first (tests: an unwritten buffer cannot pass)
};
GatedMLP build_mlp_cuda(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                        gpu::Handles& h, const CudaTuning& tuning);
CudaProbe probe_width_cuda(const MethodSpec& method, const FactSet& facts, std::int64_t width, std::uint64_t seed,
                           gpu::Handles& h, const CudaTuning& tuning);
CudaProbe evaluate_mlp_cuda(const GatedMLP& mlp, const FactSet& facts, gpu::Handles& h, const CudaTuning& tuning);

// Per-key margins of MLP(queries) (F x d, one query per key) against all P values, as
// margin::margins_from_outputs with the raw (normalize = false) or normalized-output convention.
struct CudaMargins {
  Eigen::VectorXd per_key;  // γ_i
  Eigen::VectorXi worst;    // best competitor j*(i) (smallest index on ties)
  Eigen::VectorXi argmax;   // argmax over all P values (smallest index on ties)
  double min_margin = 0;    // NaN when some γ_i is NaN/Inf
  double accuracy = 0;
};
CudaMargins margins_mlp_cuda(const GatedMLP& mlp, const FactSet& facts, const Eigen::MatrixXd& queries,
                             bool normalize, gpu::Handles& h, const CudaTuning& tuning = {});

// True for the methods built here (all closed-form ones, exact-K2 included); false for GD.
bool has_cuda_construction(const MethodSpec& method);

// solve_symmetric (ridge_readout.cpp) on the GPU: Cholesky, then pivoted LDLᵀ (cuSOLVER sytrf/sytrs),
// then a pseudo-inverse eigen-solve (syevd); S (lower triangle used) is destroyed, R becomes X.
std::string solve_symmetric_cuda(Eigen::MatrixXd& S, Eigen::MatrixXd& R, gpu::Handles& h);
// rng::normal_matrix drawn by the device kernel (for measuring its ulp distance to the host draw).
Eigen::MatrixXd normal_matrix_cuda(std::int64_t rows, std::int64_t cols, std::uint64_t seed, std::uint64_t stream,
                                   gpu::Handles& h);

}  // namespace memcap::mlp
#endif
