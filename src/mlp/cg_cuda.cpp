// GPU data-dependent construction (spec §2.4; CPU reference: construct_data_dependent.cpp): W0 from
// the unscaled features, two Jacobi-preconditioned CG fits (A1 with A0 fixed, then A0 with the new
// A1) in the CPU's precision rule (float32 iff m·d > 8192 unless cg-precision says otherwise), the
// same tol / max-iter / curvature rules, then the whitened readout on the refitted features.
#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <limits>
#include <type_traits>

#include "core/gpu.hpp"
#include "mlp/construct_cuda_impl.hpp"
#include "mlp_cg.cuh"
#include "mlp_features.cuh"

namespace memcap::mlp::cudaimpl {
namespace {

// How Op(P) is computed, from this table (never silently: the variant enters the method note):
//   float64 CG (m·d <= 8192 by default)            -> cublas (GEMMs + Hadamard passes over m x F tensors)
//   float32, m x m operator cheaper (useM)        -> cublas (M = W0ᵀ Gv W0)
//   float32, d <= 64                              -> fused-tf32x3 (mlp_cg_fused.cu: no m x F intermediates,
//                                                    products on tensor cores in error-compensated 3xTF32;
//                                                    H200, d = 64, F = 4096: every probe's accuracy equal to
//                                                    the float32 SIMT and cuBLAS forms, docs/perf.md)
//   float32, d > 64                               -> cublas (the d <= 128 fused kernels are tested but the
//                                                    searches timed there converge in tens of iterations)
// A fused form whose shared memory does not fit the device (cg_fused_fits: GPUs with less than 110 KB a block
// opt-in) is replaced by the next row: fused-tf32x3 -> fused -> cublas.
// MEMCAP_CG_KERNEL=auto (default: this table), cublas (always the cuBLAS form), fused (plain float32 FMAs),
// fused-prefetch (the same, reading the next Π tile into registers during the current one: the same result bit
// for bit) or fused-tf32x3, the last three wherever the fused form is built and fits (float32, not useM,
// d <= 128; the cuBLAS form elsewhere, as the note says); anything else is a UserError. Benchmarks and tests
// compare them.
enum class CgOpVariant { cublas, fused, fused_prefetch, fused_tf32x3 };

const char* to_string(CgOpVariant v) {
  switch (v) {
    case CgOpVariant::fused: return "fused";
    case CgOpVariant::fused_prefetch: return "fused-prefetch";
    case CgOpVariant::fused_tf32x3: return "fused-tf32x3";
    default: return "cublas";
  }
}

cuda::CgFusedKind fused_kind(CgOpVariant v) {
  return v == CgOpVariant::fused_prefetch ? cuda::CgFusedKind::prefetch
         : v == CgOpVariant::fused_tf32x3 ? cuda::CgFusedKind::tf32x3
                                          : cuda::CgFusedKind::plain;
}

template <class T>
CgOpVariant cg_op_variant(std::int64_t m, std::int64_t d, std::int64_t F, bool useM) {
  const char* env = std::getenv("MEMCAP_CG_KERNEL");
  const std::string want = env && *env ? env : "auto";
  if (want != "auto" && want != "cublas" && want != "fused" && want != "fused-prefetch" && want != "fused-tf32x3")
    throw UserError(fmt::format(
        "unknown MEMCAP_CG_KERNEL '{}': use auto, fused, fused-prefetch, fused-tf32x3 or cublas", want));
  if (!std::is_same_v<T, float> || useM || !cuda::cg_fused_supported(m, d, F) || want == "cublas")
    return CgOpVariant::cublas;
  using Kind = cuda::CgFusedKind;
  auto pick = [d](CgOpVariant v, Kind k) { return cuda::cg_fused_fits(d, k) ? v : CgOpVariant::cublas; };
  if (want == "fused-prefetch") return pick(CgOpVariant::fused_prefetch, Kind::prefetch);
  if (want == "fused-tf32x3") return pick(CgOpVariant::fused_tf32x3, Kind::tf32x3);
  if (want == "fused") return pick(CgOpVariant::fused, Kind::plain);
  if (d > 64) return CgOpVariant::cublas;
  return cuda::cg_fused_fits(d, Kind::tf32x3) ? CgOpVariant::fused_tf32x3 : pick(CgOpVariant::fused, Kind::plain);
}

struct FitResult {
  CgOpVariant variant = CgOpVariant::cublas;
  std::int64_t iterations = 0;
  double rel_residual = 0;
  bool converged = false;
  bool curvature_abort = false;
};

// FitProjection on the device in precision T: min_X ½||I_F − C_f W0 Ψ(X)||² + ½λ||X||²,
// Ψ(X) = Π ⊙ (X Kᵀ), Π = A_other Kᵀ. Writes X (float64) to dst (m x d).
template <class T>
FitResult fit_projection_device(Ctx* c, DeviceArena& a, const double* A_other, double* dst, const double* W0,
                                const DeviceFacts& df, const Dims& z, const Tiles& t, double ridge, double tol,
                                std::int64_t max_iter) {
  const std::int64_t m = z.m, d = z.d, F = z.F, md = m * d, nc = t.cg_cols;
  const bool useM = static_cast<double>(m) * static_cast<double>(m) <
                    2.0 * static_cast<double>(d) * static_cast<double>(m) + static_cast<double>(d) * static_cast<double>(d);
  // Operator data in precision T, kept for the whole solve.
  T* Pi = a.take<T>(m * F);
  T* K = a.take<T>(F * d);
  T* W0t = a.take<T>(d * m);
  T* Gvt = a.take<T>(d * d);
  T* M = useM ? a.take<T>(m * m) : nullptr;
  T* X = a.take<T>(md);
  T* R = a.take<T>(md);
  T* Z = a.take<T>(md);
  T* P = a.take<T>(md);
  T* Q = a.take<T>(md);
  T* dinv = a.take<T>(md);
  double* partials = a.take<double>(2 * cuda::kCgReduceBlocks);
  auto* sc = a.take<cuda::CgScalars>(1);
  int* flag = a.take<int>(1);
  // Right-hand side and Jacobi diagonal, assembled in float64 then converted.
  {
    const std::size_t mark = a.mark();
    double* Gv = a.take<double>(d * d);
    double* GvW0 = a.take<double>(d * m);
    double* Mrr = a.take<double>(m);
    double* M64 = useM ? a.take<double>(m * m) : nullptr;
    double* rhs = a.take<double>(md);
    double* diag = a.take<double>(md);
    double* KSq = a.take<double>(F * d);
    double* PiD = a.take<double>(m * nc);
    double* wc = a.take<double>(m * nc);
    if (c) {
      gemm(*c, true, false, d, d, F, 1.0, df.targets, F, df.targets, F, 0.0, Gv, d);  // Gv = C_fᵀ C_f
      gemm(*c, false, false, d, m, d, 1.0, Gv, d, W0, d, 0.0, GvW0, d);
      cuda::column_dots(c->s, d, m, W0, GvW0, Mrr);                                      // (W0ᵀ Gv W0)_rr
      if (useM) {
        gemm(*c, true, false, m, m, d, 1.0, W0, d, GvW0, d, 0.0, M64, m);
        cuda::convert(c->s, m * m, M64, M);
      }
      cuda::convert(c->s, d * d, Gv, Gvt);
      cuda::convert(c->s, d * m, W0, W0t);
      cuda::convert(c->s, F * d, df.keys, K);
      c->copy(KSq, df.keys, F * d);
      cuda::square(c->s, F * d, KSq);
      for (std::int64_t i0 = 0; i0 < F; i0 += nc) {
        const std::int64_t n = std::min(nc, F - i0);
        const double beta = i0 == 0 ? 0.0 : 1.0;
        gemm(*c, false, true, m, n, d, 1.0, A_other, m, df.keys + i0, F, 0.0, PiD, m);       // Π tile
        cuda::convert(c->s, m * n, PiD, Pi + i0 * m);
        gemm(*c, true, true, m, n, d, 1.0, W0, d, df.targets + i0, F, 0.0, wc, m);          // W0ᵀ C_fᵀ
        cuda::hadamard(c->s, m * n, wc, PiD);
        gemm(*c, false, false, m, d, n, 1.0, wc, m, df.keys + i0, F, beta, rhs, m);         // (Π ⊙ W0ᵀC_fᵀ) K
        cuda::square(c->s, m * n, PiD);
        gemm(*c, false, false, m, d, n, 1.0, PiD, m, KSq + i0, F, beta, diag, m);          // Σ_i Π² K²
      }
      const double floor = std::max(ridge, static_cast<double>(std::numeric_limits<T>::epsilon()));
      cuda::jacobi_inverse(c->s, m, d, Mrr, diag, ridge, floor, dinv);
      cuda::convert(c->s, md, rhs, R);
    }
    a.release(mark);
  }
  const CgOpVariant variant = cg_op_variant<T>(m, d, F, useM);
  const bool fused = variant != CgOpVariant::cublas;
  const cuda::CgFusedKind kind = fused_kind(variant);
  T* psi = fused ? nullptr : a.take<T>(m * nc);
  T* u = fused ? nullptr : a.take<T>(m * nc);
  T* t1 = useM ? nullptr : a.take<T>(d * (fused ? F : nc));
  T* t2 = useM ? nullptr : a.take<T>(d * (fused ? F : nc));  // fused: t2ᵀ (F x d)
  T* KT = fused ? a.take<T>(F * d) : nullptr;
  T* ws = fused ? a.take<T>(cuda::cg_fused_workspace_floats(m, d, F)) : nullptr;
  FitResult res;
  res.variant = variant;
  if (!c) return res;
  if constexpr (std::is_same_v<T, float>)
    if (fused) cuda::cg_fused_transpose_keys(c->s, F, d, K, KT);

  // Op(P) = (Π ⊙ (W0ᵀ Gv W0 Ψ(P))) K + λP, over column tiles of keys.
  auto apply = [&](const T* in, T* out) {
    if constexpr (std::is_same_v<T, float>) {
      if (fused) {
        cuda::cg_fused_first(c->s, m, d, F, in, Pi, K, W0t, ws, t1, kind);
        gemm(*c, true, false, F, d, d, 1.0, t1, d, Gvt, d, 0.0, t2, F);  // t2ᵀ = t1ᵀ Gv (Gv symmetric)
        cuda::cg_fused_second(c->s, m, d, F, in, Pi, KT, W0t, t2, ridge, ws, out, kind);
        return;
      }
    }
    for (std::int64_t i0 = 0; i0 < F; i0 += nc) {
      const std::int64_t n = std::min(nc, F - i0);
      const T* Pit = Pi + i0 * m;
      gemm(*c, false, true, m, n, d, 1.0, in, m, K + i0, F, 0.0, psi, m);
      cuda::hadamard(c->s, m * n, psi, Pit);
      if (useM) {
        gemm(*c, false, false, m, n, m, 1.0, M, m, psi, m, 0.0, u, m);
      } else {
        gemm(*c, false, false, d, n, m, 1.0, W0t, d, psi, m, 0.0, t1, d);
        gemm(*c, false, false, d, n, d, 1.0, Gvt, d, t1, d, 0.0, t2, d);
        gemm(*c, true, false, m, n, d, 1.0, W0t, d, t2, d, 0.0, u, m);
      }
      cuda::hadamard(c->s, m * n, u, Pit);
      gemm(*c, false, false, m, d, n, 1.0, u, m, K + i0, F, i0 == 0 ? 0.0 : 1.0, out, m);
    }
    cuda::add_scaled(c->s, md, out, in, ridge);
  };

  cuda::CgScalars hs;
  cuda::cg_start(c->s, md, dinv, R, X, Z, P, partials, sc, tol, max_iter);
  c->read(&hs, sc);
  const double rhs_norm = std::sqrt(hs.rhs_norm2);
  if (rhs_norm == 0) {
    c->zero(dst, md);
    res.converged = true;
    return res;
  }
  // The stopping test runs on the device (mlp_cg.cuh): enqueue iterations in growing batches (1, 1, 1, 1, 2, ...
  // up to 16) and read the scalars once per batch; iterations past the stopping one change nothing, so the
  // result equals a read after every iteration while the GPU no longer waits for the host between them.
  std::int64_t launched = 0;
  while (launched < max_iter && !hs.done) {
    const std::int64_t batch = std::min<std::int64_t>(max_iter - launched, std::min<std::int64_t>(16, 1 + launched / 4));
    for (std::int64_t i = 0; i < batch; ++i) {
      apply(P, Q);
      cuda::cg_dot_pq(c->s, md, P, Q, partials, sc);
      cuda::cg_update(c->s, md, X, R, P, Q, dinv, Z, partials, sc);
      cuda::cg_update_p(c->s, md, Z, P, sc);
    }
    launched += batch;
    c->read(&hs, sc);
  }
  res.iterations = hs.iterations;
  res.converged = hs.converged != 0;
  res.curvature_abort = hs.curvature != 0;
  res.rel_residual = std::sqrt(hs.rnorm2) / rhs_norm;
  cuda::convert(c->s, md, X, dst);
  c->zero(flag, 1);
  cuda::flag_nonfinite(c->s, md, dst, flag);
  int bad = 0;
  c->read(&bad, flag);
  if (bad) throw NumericError("data-dependent CG produced NaN/Inf (try cg-precision=float64)");
  return res;
}

std::string describe(const FitResult& r) {
  return fmt::format("{} it{}, rel.res {:.2e}{}", r.iterations, r.converged ? "" : " (cap)", r.rel_residual,
                     r.curvature_abort ? ", curvature abort" : "");
}

}  // namespace

bool cg_uses_float32(const MethodSpec& method, std::int64_t m, std::int64_t d) {
  return method.cg_precision == "float32" || (method.cg_precision == "auto" && m * d > 8192);
}

std::string data_dependent_stage(Ctx* c, DeviceArena& a, const DeviceModel& dm, const DeviceFacts& df,
                                 const Dims& z, const Tiles& t, const MethodSpec& method, bool careful,
                                 const DeviceFlags& flags) {
  require(method.ridge > 0, "ridge must be > 0 (got {})", method.ridge);
  const std::int64_t m = z.m, d = z.d;
  // W0 = C_fᵀ Φ0 / F from the unscaled features (A = A0, G = A1 on entry), fixed for both solves.
  double* W0 = a.take<double>(d * m);
  {
    const std::size_t mark = a.mark();
    double* H = a.take<double>(z.F * t.feat_cols);
    double* W = a.take<double>(z.F * t.feat_cols);
    if (c)
      for (std::int64_t c0 = 0; c0 < m; c0 += t.feat_cols) {
        const std::int64_t n = std::min(t.feat_cols, m - c0);
        hidden_tile(*c, dm, df.keys, z.F, 0, z.F, c0, n, H, W);
        gemm(*c, true, false, d, n, z.F, 1.0 / static_cast<double>(z.F), df.targets, z.F, H, z.F, 0.0, W0 + c0 * d,
             d);
      }
    a.release(mark);
  }
  const bool f32 = cg_uses_float32(method, m, d);
  const double tol = method.cg_tol > 0 ? method.cg_tol : (f32 ? 1e-5 : 1e-10);
  const std::int64_t max_iter = method.cg_max_iter > 0 ? method.cg_max_iter
                                                       : std::min<std::int64_t>(std::max<std::int64_t>(2 * m, 128), 1024);
  auto fit = [&](const double* A_other, double* dst) {
    const std::size_t mark = a.mark();
    const FitResult r = f32 ? fit_projection_device<float>(c, a, A_other, dst, W0, df, z, t, method.ridge, tol, max_iter)
                            : fit_projection_device<double>(c, a, A_other, dst, W0, df, z, t, method.ridge, tol, max_iter);
    a.release(mark);
    return r;
  };
  const FitResult r1 = fit(dm.A, dm.G);  // A1 with A0 fixed
  const FitResult r0 = fit(dm.G, dm.A);  // then A0 with the new A1 fixed
  const std::size_t mark = a.mark();
  const SolveOutcome ro = whitened_stage(c, a, dm, df, z, t, method.ridge, careful, flags);
  a.release(mark);
  if (!c) return {};
  return fmt::format("cg {} ({} op): A1 {}; A0 {}; readout {} {}", f32 ? "float32" : "float64",
                     to_string(r1.variant), describe(r1), describe(r0),
                     ro.dual ? "dual" : "primal", ro.solver);
}

}  // namespace memcap::mlp::cudaimpl
#endif  // MEMCAP_HAVE_CUDA
