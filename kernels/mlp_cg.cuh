// Device pieces of the data-dependent construction's Jacobi-preconditioned CG (CPU reference:
// run_cg in src/mlp/construct_data_dependent.cpp): deterministic two-stage dot products with
// float64 accumulation, the fused X/R/Z update, the P update and the Jacobi diagonal with its
// (W0ᵀ Gv W0)_rr factor. The CG scalars live on the device so one iteration needs one host read.
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
};

// Start: X = 0, Z = dinv ⊙ R, P = Z; sc->rhs_norm2 = <R,R>, sc->rz = <R,Z>.
void cg_start(cudaStream_t s, std::int64_t n, const float* dinv, const float* R, float* X, float* Z, float* P,
              double* partials, CgScalars* sc);
void cg_start(cudaStream_t s, std::int64_t n, const double* dinv, const double* R, double* X, double* Z, double* P,
              double* partials, CgScalars* sc);
// sc->pq = <P, Q>.
void cg_dot_pq(cudaStream_t s, std::int64_t n, const float* P, const float* Q, double* partials, CgScalars* sc);
void cg_dot_pq(cudaStream_t s, std::int64_t n, const double* P, const double* Q, double* partials, CgScalars* sc);
// If sc->pq > 0: alpha = rz/pq, X += (T)alpha P, R -= (T)alpha Q, Z = dinv ⊙ R; then
// sc->rnorm2 = <R,R>, sc->beta = <R,Z>/sc->rz, sc->rz = <R,Z>. Nothing is updated if pq <= 0.
void cg_update(cudaStream_t s, std::int64_t n, float* X, float* R, const float* P, const float* Q, const float* dinv,
               float* Z, double* partials, CgScalars* sc);
void cg_update(cudaStream_t s, std::int64_t n, double* X, double* R, const double* P, const double* Q,
               const double* dinv, double* Z, double* partials, CgScalars* sc);
// P = Z + (T)sc->beta P.
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

}  // namespace memcap::mlp::cuda
