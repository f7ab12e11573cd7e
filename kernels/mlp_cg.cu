// Jacobi-preconditioned CG pieces of the data-dependent construction (see mlp_cg.cuh). Every dot
// product is two-stage and fixed-order (kCgReduceBlocks partial sums, then one block), so a run is
// bitwise reproducible; products are accumulated in float64 also for the float32 CG.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "cuda_check.cuh"
#include "mlp_cg.cuh"

namespace memcap::mlp::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }

// Fixed-order block sum of kThreads values; result valid in thread 0.
__device__ inline double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  return sh[0];
}

#define CG_GRID_LOOP(i, n)                                                                         \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// Block sums of two per-thread values into partials[blockIdx.x] and partials[kCgReduceBlocks + blockIdx.x].
__device__ void store_pair_partials(double a, double b, double* partials, double* sh) {
  const double ra = block_sum(a, sh);
  if (threadIdx.x == 0) partials[blockIdx.x] = ra;
  __syncthreads();
  const double rb = block_sum(b, sh);
  if (threadIdx.x == 0) partials[kCgReduceBlocks + blockIdx.x] = rb;
}

// The two totals of store_pair_partials (one block; every thread gets them, in a fixed order).
__device__ void finish_pair_partials(const double* partials, double* sh, double& ra, double& rb) {
  double a = 0, b = 0;
  for (int i = threadIdx.x; i < kCgReduceBlocks; i += kThreads) {
    a += partials[i];
    b += partials[kCgReduceBlocks + i];
  }
  ra = block_sum(a, sh);
  __syncthreads();
  rb = block_sum(b, sh);
}

template <class T>
__global__ void start_kernel(std::int64_t n, const T* dinv, const T* R, T* X, T* Z, T* P, double* partials) {
  __shared__ double sh[kThreads];
  double rr = 0, rz = 0;
  CG_GRID_LOOP(i, n) {
    const T r = R[i], z = mul_rn(dinv[i], r);
    X[i] = T(0);
    Z[i] = z;
    P[i] = z;
    rr += static_cast<double>(r) * static_cast<double>(r);
    rz += static_cast<double>(r) * static_cast<double>(z);
  }
  store_pair_partials(rr, rz, partials, sh);
}

__global__ void start_finish_kernel(const double* partials, CgScalars* sc, double tol, long long max_iter) {
  __shared__ double sh[kThreads];
  double ra, rb;
  finish_pair_partials(partials, sh, ra, rb);
  if (threadIdx.x == 0) {
    sc->rhs_norm2 = ra;
    sc->rnorm2 = ra;
    sc->rz = rb;
    sc->pq = 0;
    sc->beta = 0;
    sc->tol = tol;
    sc->iterations = 0;
    sc->max_iter = max_iter;
    sc->done = max_iter <= 0 ? 1 : 0;
    sc->converged = 0;
    sc->curvature = 0;
  }
}

template <class T>
__global__ void dot_kernel(std::int64_t n, const T* x, const T* y, double* partials) {
  __shared__ double sh[kThreads];
  double acc = 0;
  CG_GRID_LOOP(i, n) acc += static_cast<double>(x[i]) * static_cast<double>(y[i]);
  const double a = block_sum(acc, sh);
  if (threadIdx.x == 0) partials[blockIdx.x] = a;
}

__global__ void pq_finish_kernel(const double* partials, CgScalars* sc) {
  __shared__ double sh[kThreads];
  if (sc->done) return;  // uniform across the block
  double a = 0;
  for (int i = threadIdx.x; i < kCgReduceBlocks; i += kThreads) a += partials[i];
  const double r = block_sum(a, sh);
  if (threadIdx.x == 0) {
    sc->pq = r;
    if (!(r > 0)) {  // curvature abort: nothing moves this iteration (update_kernel checks pq)
      sc->curvature = 1;
      sc->done = 1;
    }
  }
}

template <class T>
__global__ void update_kernel(std::int64_t n, T* X, T* R, const T* P, const T* Q, const T* dinv, T* Z,
                              double* partials, const CgScalars* sc) {
  __shared__ double sh[kThreads];
  const double pq = sc->pq;
  double rr = 0, rz = 0;
  if (!sc->done && pq > 0) {  // else: stopped earlier, or curvature abort this iteration: nothing moves
    const T alpha = static_cast<T>(sc->rz / pq);
    CG_GRID_LOOP(i, n) {
      X[i] = add_rn(X[i], mul_rn(alpha, P[i]));
      const T r = sub_rn(R[i], mul_rn(alpha, Q[i]));
      R[i] = r;
      const T z = mul_rn(dinv[i], r);
      Z[i] = z;
      rr += static_cast<double>(r) * static_cast<double>(r);
      rz += static_cast<double>(r) * static_cast<double>(z);
    }
  }
  store_pair_partials(rr, rz, partials, sh);
}

__global__ void update_finish_kernel(const double* partials, CgScalars* sc) {
  __shared__ double sh[kThreads];
  if (sc->done) return;  // uniform across the block (pq_finish of this iteration may have set it)
  double rr, rz_new;
  finish_pair_partials(partials, sh, rr, rz_new);
  if (threadIdx.x == 0) {
    sc->rnorm2 = rr;
    sc->beta = rz_new / sc->rz;
    sc->rz = rz_new;
    sc->iterations += 1;
    // The host rule, in the same float64 operations: sqrt(||R||²) <= tol sqrt(||RHS||²).
    if (sqrt(rr) <= sc->tol * sqrt(sc->rhs_norm2)) {
      sc->converged = 1;
      sc->done = 1;
    } else if (sc->iterations >= sc->max_iter) {
      sc->done = 1;
    }
  }
}

template <class T>
__global__ void update_p_kernel(std::int64_t n, const T* Z, T* P, const CgScalars* sc) {
  // done after this iteration's update: converged or max_iter (P is not used again), or stopped before.
  if (sc->done) return;
  const T beta = static_cast<T>(sc->beta);
  CG_GRID_LOOP(i, n) P[i] = add_rn(Z[i], mul_rn(beta, P[i]));
}

template <class T>
__global__ void add_scaled_kernel(std::int64_t n, T* Q, const T* P, T ridge) {
  CG_GRID_LOOP(i, n) Q[i] = add_rn(Q[i], mul_rn(ridge, P[i]));
}

__global__ void column_dots_kernel(std::int64_t d, std::int64_t m, const double* W0, const double* GvW0, double* out) {
  CG_GRID_LOOP(r, m) {
    const double* a = W0 + r * d;
    const double* b = GvW0 + r * d;
    double acc = 0;
    for (std::int64_t k = 0; k < d; ++k) acc += a[k] * b[k];
    out[r] = acc;
  }
}

template <class T>
__global__ void jacobi_kernel(std::int64_t m, std::int64_t d, const double* Mrr, const double* diag, double ridge,
                              double floor, T* dinv) {
  CG_GRID_LOOP(idx, m * d) {
    const std::int64_t r = idx % m;
    const double v = fmax(__dadd_rn(__dmul_rn(Mrr[r], diag[idx]), ridge), floor);
    dinv[idx] = static_cast<T>(1.0 / v);
  }
}

unsigned grid_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(b, std::int64_t(1) << 20)));
}

template <class T>
void start_impl(cudaStream_t s, std::int64_t n, const T* dinv, const T* R, T* X, T* Z, T* P, double* partials,
                CgScalars* sc, double tol, std::int64_t max_iter) {
  start_kernel<<<kCgReduceBlocks, kThreads, 0, s>>>(n, dinv, R, X, Z, P, partials);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg start");
  start_finish_kernel<<<1, kThreads, 0, s>>>(partials, sc, tol, static_cast<long long>(max_iter));
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg start_finish");
}

template <class T>
void dot_pq_impl(cudaStream_t s, std::int64_t n, const T* P, const T* Q, double* partials, CgScalars* sc) {
  dot_kernel<<<kCgReduceBlocks, kThreads, 0, s>>>(n, P, Q, partials);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg dot");
  pq_finish_kernel<<<1, kThreads, 0, s>>>(partials, sc);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg pq_finish");
}

template <class T>
void update_impl(cudaStream_t s, std::int64_t n, T* X, T* R, const T* P, const T* Q, const T* dinv, T* Z,
                 double* partials, CgScalars* sc) {
  update_kernel<<<kCgReduceBlocks, kThreads, 0, s>>>(n, X, R, P, Q, dinv, Z, partials, sc);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg update");
  update_finish_kernel<<<1, kThreads, 0, s>>>(partials, sc);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg update_finish");
}

template <class T>
void update_p_impl(cudaStream_t s, std::int64_t n, const T* Z, T* P, const CgScalars* sc) {
  if (n == 0) return;
  update_p_kernel<<<grid_for(n), kThreads, 0, s>>>(n, Z, P, sc);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg update_p");
}

template <class T>
void add_scaled_impl(cudaStream_t s, std::int64_t n, T* Q, const T* P, double ridge) {
  if (n == 0) return;
  add_scaled_kernel<<<grid_for(n), kThreads, 0, s>>>(n, Q, P, static_cast<T>(ridge));
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg add_scaled");
}

template <class T>
void jacobi_impl(cudaStream_t s, std::int64_t m, std::int64_t d, const double* Mrr, const double* diag, double ridge,
                 double floor, T* dinv) {
  if (m * d == 0) return;
  jacobi_kernel<<<grid_for(m * d), kThreads, 0, s>>>(m, d, Mrr, diag, ridge, floor, dinv);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp cg jacobi_inverse");
}

}  // namespace

void cg_start(cudaStream_t s, std::int64_t n, const float* dinv, const float* R, float* X, float* Z, float* P,
              double* partials, CgScalars* sc, double tol, std::int64_t max_iter) {
  start_impl(s, n, dinv, R, X, Z, P, partials, sc, tol, max_iter);
}
void cg_start(cudaStream_t s, std::int64_t n, const double* dinv, const double* R, double* X, double* Z, double* P,
              double* partials, CgScalars* sc, double tol, std::int64_t max_iter) {
  start_impl(s, n, dinv, R, X, Z, P, partials, sc, tol, max_iter);
}
void cg_dot_pq(cudaStream_t s, std::int64_t n, const float* P, const float* Q, double* partials, CgScalars* sc) {
  dot_pq_impl(s, n, P, Q, partials, sc);
}
void cg_dot_pq(cudaStream_t s, std::int64_t n, const double* P, const double* Q, double* partials, CgScalars* sc) {
  dot_pq_impl(s, n, P, Q, partials, sc);
}
void cg_update(cudaStream_t s, std::int64_t n, float* X, float* R, const float* P, const float* Q, const float* dinv,
               float* Z, double* partials, CgScalars* sc) {
  update_impl(s, n, X, R, P, Q, dinv, Z, partials, sc);
}
void cg_update(cudaStream_t s, std::int64_t n, double* X, double* R, const double* P, const double* Q,
               const double* dinv, double* Z, double* partials, CgScalars* sc) {
  update_impl(s, n, X, R, P, Q, dinv, Z, partials, sc);
}
void cg_update_p(cudaStream_t s, std::int64_t n, const float* Z, float* P, const CgScalars* sc) {
  update_p_impl(s, n, Z, P, sc);
}
void cg_update_p(cudaStream_t s, std::int64_t n, const double* Z, double* P, const CgScalars* sc) {
  update_p_impl(s, n, Z, P, sc);
}
void add_scaled(cudaStream_t s, std::int64_t n, float* Q, const float* P, double ridge) {
  add_scaled_impl(s, n, Q, P, ridge);
}
void add_scaled(cudaStream_t s, std::int64_t n, double* Q, const double* P, double ridge) {
  add_scaled_impl(s, n, Q, P, ridge);
}
void column_dots(cudaStream_t s, std::int64_t d, std::int64_t m, const double* W0, const double* GvW0, double* out) {
  if (m == 0) return;
  column_dots_kernel<<<grid_for(m), kThreads, 0, s>>>(d, m, W0, GvW0, out);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp column_dots");
}
void jacobi_inverse(cudaStream_t s, std::int64_t m, std::int64_t d, const double* Mrr, const double* diag,
                    double ridge, double floor, float* dinv) {
  jacobi_impl(s, m, d, Mrr, diag, ridge, floor, dinv);
}
void jacobi_inverse(cudaStream_t s, std::int64_t m, std::int64_t d, const double* Mrr, const double* diag,
                    double ridge, double floor, double* dinv) {
  jacobi_impl(s, m, d, Mrr, diag, ridge, floor, dinv);
}

}  // namespace memcap::mlp::cuda
