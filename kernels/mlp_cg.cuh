// Device pieces of the data-dependent construction's Jacobi-preconditioned CG (CPU reference:
// run_cg in src/mlp/construct_data_dependent.cpp): deterministic two-stage dot products with
// float64 accumulation, the fused X/R/Z update, the P update and the Jacobi diagonal with its
// (W0ᵀ Gv W0)_rr factor. The CG scalars, the iteration count and the stopping test live on the device, so
// the host can enqueue several iterations and read the scalars once: after the stopping iteration every
// kernel leaves X, R, Z, P and the scalars as they were (the result is the same as reading after each one).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace memcap::mlp::cuda {

// Reduction blocks of the two-stage dot products (partials arrays hold this many doubles).
inline constexpr int kCgReduceBlocks = 256;

struct CgScalars {
  double pq = 0;         // <P, Op(P)>
  double rz = 0;         // <R, Z> of the current iterate
  double rnorm2 = 0;     // ||R||² after the update
  double beta = 0;       // rz_new / rz (P = Z + beta P)
  double rhs_norm2 = 0;  // ||RHS||² (start)
  double tol = 0;        // stop once sqrt(rnorm2) <= tol * sqrt(rhs_norm2)
  long long iterations = 0, max_iter = 0;  // completed iterations; stop when iterations reaches max_iter
  int done = 0;          // 1: stopped (converged, curvature abort or max_iter); later iterations change nothing
  int converged = 0, curvature = 0;  // why it stopped (curvature: <P, Op(P)> <= 0, nothing moved)
};

// Start: X = 0, Z = dinv ⊙ R, P = Z; sc->rhs_norm2 = sc->rnorm2 = <R,R>, sc->rz = <R,Z>, the stopping rule
// (tol, max_iter), iterations = 0, done = (max_iter <= 0).
void cg_start(cudaStream_t s, std::int64_t n, const float* dinv, const float* R, float* X, float* Z, float* P,
              double* partials, CgScalars* sc, double tol, std::int64_t max_iter);
void cg_start(cudaStream_t s, std::int64_t n, const double* dinv, const double* R, double* X, double* Z, double* P,
              double* partials, CgScalars* sc, double tol, std::int64_t max_iter);
// Unless done: sc->pq = <P, Q>; pq <= 0 (or NaN) sets curvature and done.
void cg_dot_pq(cudaStream_t s, std::int64_t n, const float* P, const float* Q, double* partials, CgScalars* sc);
void cg_dot_pq(cudaStream_t s, std::int64_t n, const double* P, const double* Q, double* partials, CgScalars* sc);
// Unless done: alpha = rz/pq, X += (T)alpha P, R -= (T)alpha Q, Z = dinv ⊙ R; then sc->rnorm2 = <R,R>,
// sc->beta = <R,Z>/sc->rz, sc->rz = <R,Z>, iterations + 1, and the stopping test (converged, or max_iter).
void cg_update(cudaStream_t s, std::int64_t n, float* X, float* R, const float* P, const float* Q, const float* dinv,
               float* Z, double* partials, CgScalars* sc);
void cg_update(cudaStream_t s, std::int64_t n, double* X, double* R, const double* P, const double* Q,
               const double* dinv, double* Z, double* partials, CgScalars* sc);
// Unless done: P = Z + (T)sc->beta P.
void cg_update_p(cudaStream_t s, std::int64_t n, const float* Z, float* P, const CgScalars* sc);
void cg_update_p(cudaStream_t s, std::int64_t n, const double* Z, double* P, const CgScalars* sc);
// Q += (T)ridge ⊙ P   (the + λX term of Op).
void add_scaled(cudaStream_t s, std::int64_t n, float* Q, const float* P, double ridge);
void add_scaled(cudaStream_t s, std::int64_t n, double* Q, const double* P, double ridge);

// out[r] = Σ_a W0[a,r] (GvW0)[a,r]  (d x m, column-major): the diagonal of W0ᵀ Gv W0.
void column_dots(cudaStream_t s, std::int64_t d, std::int64_t m, const double* W0, const double* GvW0, double* out);
// dinv[r + a*m] = (T)(1 / max(Mrr[r] * diag[r + a*m] + ridge, floor)).
void jacobi_inverse(cudaStream_t s, std::int64_t m, std::int64_t d, const double* Mrr, const double* diag,
                    double ridge, double floor, float* dinv);
void jacobi_inverse(cudaStream_t s, std::int64_t m, std::int64_t d, const double* Mrr, const double* diag,
                    double ridge, double floor, double* dinv);

// Fused float32 operator (mlp_cg_fused.cu): Op(P) = (Π ⊙ (W0ᵀ Gv W0 (Π ⊙ (P Kᵀ)))) K + λP without the m x F
// intermediates of the cuBLAS form, in two kernels around the small product t2 = Gv t1 (the caller's GEMM).
// Column-major operands: P, out m x d; Π m x F; K F x d; KT = Kᵀ (d x F, i.e. K row-major); W0t d x m (the
// fit's W0); t1 d x F; t2T F x d (= t1ᵀ Gv, Gv symmetric). ws: cg_fused_workspace_floats floats. Shapes with
// 1 <= d <= kCgFusedMaxDim (cg_fused_supported); otherwise use the cuBLAS form.
inline constexpr std::int64_t kCgFusedMaxDim = 128;
// The kernels' forms: plain (SIMT float32 FMAs), prefetch (the same, reading the next Π tile into registers during
// the current one: the same arithmetic, bit for bit) and tf32x3 (tensor cores, error-compensated 3xTF32 products:
// float32-accurate, not bitwise equal to the SIMT forms).
enum class CgFusedKind { plain, prefetch, tf32x3 };
bool cg_fused_supported(std::int64_t m, std::int64_t d, std::int64_t F);
// Whether both kernels of `kind` at width d fit the current device's opt-in shared memory per block (H100/H200:
// every form; the tf32x3 form needs 110 KB at d <= 64 and 199 KB at d <= 128, the SIMT forms 87 / 138 KB).
bool cg_fused_fits(std::int64_t d, CgFusedKind kind);
std::int64_t cg_fused_workspace_floats(std::int64_t m, std::int64_t d, std::int64_t F);
void cg_fused_transpose_keys(cudaStream_t s, std::int64_t F, std::int64_t d, const float* K, float* KT);
// t1 = W0ᵀ·(Π ⊙ (P Kᵀ)), i.e. t1[a + i d] = Σ_r W0t[a + r d] Π[r + i m] Σ_j P[r + j m] K[i + j F].
void cg_fused_first(cudaStream_t s, std::int64_t m, std::int64_t d, std::int64_t F, const float* P, const float* Pi,
                    const float* K, const float* W0t, float* ws, float* t1, CgFusedKind kind = CgFusedKind::plain);
// out = (Π ⊙ (W0 t2)) K + ridge P, i.e. out[r + j m] = Σ_i Π[r + i m] (Σ_b W0t[b + r d] t2T[i + b F]) KT[j + i d]
// + ridge P[r + j m].
void cg_fused_second(cudaStream_t s, std::int64_t m, std::int64_t d, std::int64_t F, const float* P, const float* Pi,
                     const float* KT, const float* W0t, const float* t2T, double ridge, float* ws, float* out,
                     CgFusedKind kind = CgFusedKind::plain);

}  // namespace memcap::mlp::cuda
