// GPU whitened readout (spec §2.3; CPU reference: whitened_readout / solve_symmetric in
// ridge_readout.cpp): Gram by DSYRK over feature tiles (primal over key rows, dual over feature
// columns, so Φ never exists whole), then cuSOLVER Cholesky with the CPU's fallbacks (pivoted LDLᵀ
// by sytrf/sytrs, then a pseudo-inverse eigen-solve by syevd) and the same primal/dual rule.
#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include <cstdio>
#include <vector>

#include "core/gpu.hpp"
#include "mlp/construct_cuda_impl.hpp"
#include "mlp_features.cuh"

namespace memcap::mlp::cudaimpl {
namespace {

// cuSOLVER 64-bit API parameters object (RAII).
struct SolverParams {
  cusolverDnParams_t p = nullptr;
  SolverParams() { MEMCAP_CUSOLVER_CHECK(cusolverDnCreateParams(&p)); }
  ~SolverParams() {
    if (p) cusolverDnDestroyParams(p);
  }
  SolverParams(const SolverParams&) = delete;
  SolverParams& operator=(const SolverParams&) = delete;
};

// Cholesky factor (lower) in place; info on the device.
void potrf(Ctx& c, double* S, std::int64_t n, int* info) {
  SolverParams prm;
  std::size_t dev_bytes = 0, host_bytes = 0;
  MEMCAP_CUSOLVER_CHECK(cusolverDnXpotrf_bufferSize(c.h.solver(), prm.p, CUBLAS_FILL_MODE_LOWER, n, CUDA_R_64F, S, n,
                                                    CUDA_R_64F, &dev_bytes, &host_bytes));
  void* dev_ws = c.workspace(dev_bytes);
  std::vector<char> host_ws(std::max<std::size_t>(host_bytes, 1));
  MEMCAP_CUSOLVER_CHECK(cusolverDnXpotrf(c.h.solver(), prm.p, CUBLAS_FILL_MODE_LOWER, n, CUDA_R_64F, S, n, CUDA_R_64F,
                                         dev_ws, dev_bytes, host_ws.data(), host_bytes, info));
  if (host_bytes) c.sync();  // the host workspace must outlive the call
}

void potrs(Ctx& c, const double* S, std::int64_t n, double* R, std::int64_t nrhs, int* info) {
  SolverParams prm;
  MEMCAP_CUSOLVER_CHECK(cusolverDnXpotrs(c.h.solver(), prm.p, CUBLAS_FILL_MODE_LOWER, n, nrhs, CUDA_R_64F, S, n,
                                         CUDA_R_64F, R, n, info));
}

// *flag (device) = 1 if x holds NaN/Inf; read on the host.
bool all_finite(Ctx& c, const double* x, std::int64_t n, int* flag) {
  c.zero(flag, 1);
  cuda::flag_nonfinite(c.s, n, x, flag);
  int bad = 0;
  c.read(&bad, flag);
  return bad == 0;
}

void restore(Ctx& c, double* S, std::int64_t n, const double* diag, double* R, const double* R0, std::int64_t nrhs) {
  c.copy(R, R0, n * nrhs);
  cuda::mirror_triangle(c.s, n, S, n, /*lower_to_upper=*/false);
  cuda::set_diagonal(c.s, n, S, n, diag);
}

// Pivoted LDLᵀ (Bunch-Kaufman): sytrf (32-bit pivots) then the 64-bit sytrs. False if it failed.
bool ldlt_solve(Ctx& c, double* S, std::int64_t n, double* R, std::int64_t nrhs, int* info, int* flag) {
  require(n < (std::int64_t(1) << 31), "pivoted LDLᵀ fallback: n = {} is too large for cuSOLVER sytrf", n);
  const int ni = static_cast<int>(n);
  int lwork = 0;
  MEMCAP_CUSOLVER_CHECK(cusolverDnDsytrf_bufferSize(c.h.solver(), ni, S, ni, &lwork));
  auto* work = static_cast<double*>(c.workspace(static_cast<std::size_t>(std::max(lwork, 1)) * sizeof(double)));
  auto* ipiv = static_cast<int*>(c.workspace(static_cast<std::size_t>(n) * sizeof(int)));
  auto* ipiv64 = static_cast<std::int64_t*>(c.workspace(static_cast<std::size_t>(n) * sizeof(std::int64_t)));
  MEMCAP_CUSOLVER_CHECK(cusolverDnDsytrf(c.h.solver(), CUBLAS_FILL_MODE_LOWER, ni, S, ni, ipiv, work, lwork, info));
  int h_info = 0;
  c.read(&h_info, info);
  if (h_info != 0) return false;
  cuda::widen_pivots(c.s, n, ipiv, ipiv64);
  std::size_t dev_bytes = 0, host_bytes = 0;
  MEMCAP_CUSOLVER_CHECK(cusolverDnXsytrs_bufferSize(c.h.solver(), CUBLAS_FILL_MODE_LOWER, n, nrhs, CUDA_R_64F, S, n,
                                                    ipiv64, CUDA_R_64F, R, n, &dev_bytes, &host_bytes));
  void* dev_ws = c.workspace(dev_bytes);
  std::vector<char> host_ws(std::max<std::size_t>(host_bytes, 1));
  MEMCAP_CUSOLVER_CHECK(cusolverDnXsytrs(c.h.solver(), CUBLAS_FILL_MODE_LOWER, n, nrhs, CUDA_R_64F, S, n, ipiv64,
                                         CUDA_R_64F, R, n, dev_ws, dev_bytes, host_ws.data(), host_bytes, info));
  c.read(&h_info, info);
  return h_info == 0 && all_finite(c, R, n * nrhs, flag);
}

// Pseudo-inverse through the symmetric eigendecomposition (cut = max|λ| · n · 1e-16, as the CPU).
void eigen_solve(Ctx& c, double* S, std::int64_t n, double* R, const double* R0, std::int64_t nrhs, int* info,
                 int* flag) {
  auto* w = static_cast<double*>(c.workspace(static_cast<std::size_t>(n) * sizeof(double)));
  auto* t = static_cast<double*>(c.workspace(static_cast<std::size_t>(n * nrhs) * sizeof(double)));
  SolverParams prm;
  std::size_t dev_bytes = 0, host_bytes = 0;
  MEMCAP_CUSOLVER_CHECK(cusolverDnXsyevd_bufferSize(c.h.solver(), prm.p, CUSOLVER_EIG_MODE_VECTOR,
                                                    CUBLAS_FILL_MODE_LOWER, n, CUDA_R_64F, S, n, CUDA_R_64F, w,
                                                    CUDA_R_64F, &dev_bytes, &host_bytes));
  void* dev_ws = c.workspace(dev_bytes);
  std::vector<char> host_ws(std::max<std::size_t>(host_bytes, 1));
  MEMCAP_CUSOLVER_CHECK(cusolverDnXsyevd(c.h.solver(), prm.p, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n,
                                         CUDA_R_64F, S, n, CUDA_R_64F, w, CUDA_R_64F, dev_ws, dev_bytes,
                                         host_ws.data(), host_bytes, info));
  int h_info = 0;
  c.read(&h_info, info);
  if (h_info != 0) throw NumericError("symmetric eigen-solve failed: the system matrix is unusable");
  std::vector<double> ev(static_cast<std::size_t>(n));
  c.read(ev.data(), w, n);
  double amax = 0;
  for (double x : ev) amax = std::max(amax, std::abs(x));
  const double cut = amax * static_cast<double>(n) * 1e-16;
  gemm(c, true, false, n, nrhs, n, 1.0, S, n, R0, n, 0.0, t, n);  // Vᵀ R0
  cuda::scale_rows_pinv(c.s, n, nrhs, t, w, cut);
  gemm(c, false, false, n, nrhs, n, 1.0, S, n, t, n, 0.0, R, n);  // V diag(1/λ) Vᵀ R0
  if (!all_finite(c, R, n * nrhs, flag))
    throw NumericError("whitened readout: every solver produced NaN/Inf (check the inputs)");
}

}  // namespace

std::string solve_symmetric_device(Ctx& c, double* S, std::int64_t n, double* R, std::int64_t nrhs, double* diag,
                                   double* R0, int* info, bool careful, const DeviceFlags& flags) {
  if (n == 0) return "none";
  if (!careful) {  // Cholesky only; any failure raises the flag and the caller redoes the call carefully
    potrf(c, S, n, info);
    cuda::flag_nonzero(c.s, info, flags.solve_failed);
    potrs(c, S, n, R, nrhs, info);
    cuda::flag_nonfinite(c.s, n * nrhs, R, flags.solve_failed);
    return "cholesky";
  }
  // Keep what the fallbacks need: the upper triangle (mirror), the diagonal and the right-hand side.
  cuda::mirror_triangle(c.s, n, S, n, /*lower_to_upper=*/true);
  cuda::get_diagonal(c.s, n, S, n, diag);
  c.copy(R0, R, n * nrhs);
  int* flag = info + 1;  // layouts give info two ints
  potrf(c, S, n, info);
  int failed_pivot = 0;
  c.read(&failed_pivot, info);
  if (failed_pivot == 0) {
    potrs(c, S, n, R, nrhs, info);
    if (all_finite(c, R, n * nrhs, flag)) return "cholesky";
  }
  restore(c, S, n, diag, R, R0, nrhs);
  if (ldlt_solve(c, S, n, R, nrhs, info, flag)) {
    std::fprintf(stderr,
                 "note: Cholesky failed on the GPU (pivot %d not positive): solved with pivoted LDLᵀ (cusolver sytrf)\n",
                 failed_pivot);
    return "ldlt-bunch-kaufman";
  }
  restore(c, S, n, diag, R, R0, nrhs);
  eigen_solve(c, S, n, R, R0, nrhs, info, flag);
  std::fprintf(stderr, "note: Cholesky and LDLᵀ failed on the GPU: solved with a pseudo-inverse eigen-solve\n");
  return "eigen";
}

SolveOutcome whitened_stage(Ctx* c, DeviceArena& a, const DeviceModel& dm, const DeviceFacts& df, const Dims& z,
                            const Tiles& t, double ridge, bool careful, const DeviceFlags& flags) {
  require(ridge > 0, "ridge must be > 0 (got {})", ridge);
  SolveOutcome out;
  out.dual = z.m > z.F;  // the released code's branch rule: dual iff m > F strictly
  const std::int64_t n = out.dual ? z.F : z.m;
  double* S = a.take<double>(n * n);
  double* R = a.take<double>(n * z.d);
  const std::int64_t tile = out.dual ? z.F * t.feat_cols : t.feat_rows * z.m;
  double* H = a.take<double>(tile);
  double* W = a.take<double>(tile);
  double* diag = a.take<double>(n);
  double* R0 = a.take<double>(n * z.d);
  int* info = a.take<int>(2);
  if (!c) return out;
  if (!out.dual) {
    // (ΦᵀΦ/F + λI) Wᵀ = ΦᵀC_f/F, accumulated over row tiles of Φ.
    const double invF = 1.0 / static_cast<double>(z.F);
    for (std::int64_t r0 = 0; r0 < z.F; r0 += t.feat_rows) {
      const std::int64_t T = std::min(t.feat_rows, z.F - r0);
      hidden_tile(*c, dm, df.keys, z.F, r0, T, 0, z.m, H, W);
      const double beta = r0 == 0 ? 0.0 : 1.0;
      syrk(*c, true, z.m, T, invF, H, T, beta, S, z.m);
      gemm(*c, true, false, z.m, z.d, T, invF, H, T, df.targets + r0, z.F, beta, R, z.m);
    }
    cuda::add_diagonal(c->s, z.m, S, z.m, ridge);
    out.solver = solve_symmetric_device(*c, S, z.m, R, z.d, diag, R0, info, careful, flags);
    transpose(*c, z.d, z.m, R, z.m, dm.B, z.d);
  } else {
    // (ΦΦᵀ + λI) Z = C_f, W = Zᵀ Φ: Gram over column tiles of Φ, then Φ recomputed for the product.
    for (std::int64_t c0 = 0; c0 < z.m; c0 += t.feat_cols) {
      const std::int64_t k = std::min(t.feat_cols, z.m - c0);
      hidden_tile(*c, dm, df.keys, z.F, 0, z.F, c0, k, H, W);
      syrk(*c, false, z.F, k, 1.0, H, z.F, c0 == 0 ? 0.0 : 1.0, S, z.F);
    }
    cuda::add_diagonal(c->s, z.F, S, z.F, ridge);
    c->copy(R, df.targets, z.F * z.d);
    out.solver = solve_symmetric_device(*c, S, z.F, R, z.d, diag, R0, info, careful, flags);
    for (std::int64_t c0 = 0; c0 < z.m; c0 += t.feat_cols) {
      const std::int64_t k = std::min(t.feat_cols, z.m - c0);
      hidden_tile(*c, dm, df.keys, z.F, 0, z.F, c0, k, H, W);
      gemm(*c, true, false, z.d, k, z.F, 1.0, R, z.F, H, z.F, 0.0, dm.B + c0 * z.d, z.d);
    }
  }
  return out;
}

}  // namespace memcap::mlp::cudaimpl

namespace memcap::mlp {

std::string solve_symmetric_cuda(Eigen::MatrixXd& S, Eigen::MatrixXd& R, gpu::Handles& h) {
  require(S.rows() == S.cols() && R.rows() == S.rows(), "solve: S is {}x{}, right-hand side {}x{}", S.rows(),
          S.cols(), R.rows(), R.cols());
  const std::int64_t n = S.rows(), k = R.cols();
  if (n == 0) return "none";
  const std::size_t bytes = static_cast<std::size_t>(2 * n * n + 3 * n * k + n) * sizeof(double) + 64;
  gpu::require_device_memory(bytes, fmt::format("the GPU symmetric solve (n = {}, {} right-hand sides)", n, k));
  using namespace cudaimpl;
  Ctx c(h);
  gpu::Tensor dS({n * n}, gpu::DType::f64), dR({n * k}, gpu::DType::f64), dR0({n * k}, gpu::DType::f64),
      dd({n}, gpu::DType::f64), di({4}, gpu::DType::i32);
  c.write(dS.data<double>(), S.data(), S.size());
  c.write(dR.data<double>(), R.data(), R.size());
  c.zero(di.data<int>(), 4);
  const DeviceFlags flags{di.data<int>() + 2, di.data<int>() + 3};
  const std::string solver = solve_symmetric_device(c, dS.data<double>(), n, dR.data<double>(), k, dd.data<double>(),
                                                    dR0.data<double>(), di.data<int>(), true, flags);
  c.read(R.data(), dR.data<double>(), R.size());
  c.read(S.data(), dS.data<double>(), S.size());
  return solver;
}

}  // namespace memcap::mlp
#endif  // MEMCAP_HAVE_CUDA
