// CUDA kernels of the E7 recall protocol (see ramnet_recall.cuh). Float64; rounding-exact intrinsics
// (__dmul_rn, __dadd_rn, __dsub_rn, __ddiv_rn) wherever the CPU reference fixes an order, so that feature
// products, GSU steps and sparse reads are the CPU's bit for bit. Row reductions use one block per row.
#include <cuda_runtime.h>

#include <cstdint>

#include "smem_limit.cuh"
#include "core/gpu.hpp"
#include "ramnet_recall.cuh"

namespace memcap::ramnet::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::int64_t n, std::int64_t cap = 1 << 20) {
  std::int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

unsigned grid_rows(std::int64_t rows) { return static_cast<unsigned>(rows < 65535 ? (rows < 1 ? 1 : rows) : 65535); }

__device__ inline double product_weight(const double* p, int U, int dp, std::int64_t flat) {
  std::int64_t f = flat;
  double acc = p[f % dp];
  f /= dp;
  for (int u = 1; u < U; ++u) {
    acc = __dmul_rn(acc, p[u * dp + f % dp]);
    f /= dp;
  }
  return acc;
}

// 1 − w accurately (see recall_cpu.cpp one_minus_weight).
__device__ inline double one_minus_weight(const double* p, int U, int dp, std::int64_t flat, double w) {
  if (w < 0.5) return __dsub_rn(1.0, w);
  double s = 0;
  std::int64_t f = flat;
  for (int u = 0; u < U; ++u) {
    const int a = static_cast<int>(f % dp);
    f /= dp;
    double d = 0;
    for (int j = 0; j < dp; ++j)
      if (j != a) d = __dadd_rn(d, p[u * dp + j]);
    s = __dadd_rn(s, log1p(-d));
  }
  return -expm1(s);
}

__device__ inline double gate(double omw, double w, const GateParams& g) {
  if (g.gamma > 0) {
    const double a = __dmul_rn(omw, g.emg);
    return __ddiv_rn(a, __dadd_rn(a, w));
  }
  return __ddiv_rn(omw, __dadd_rn(omw, __dmul_rn(w, g.eg)));
}

// Block reductions (blockDim.x == kThreads).
__device__ double block_max(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] = fmax(sh[threadIdx.x], sh[threadIdx.x + o]);
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

__device__ double block_sum(double v, double* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

// ---- features, Top-K ----------------------------------------------------------------------------

__global__ void k_dense_features(const double* prob, int U, int dp, std::int64_t r0, std::int64_t rows,
                                 std::int64_t a0, std::int64_t cols, double* out, std::int64_t ld) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  // Digits of slot a0 + c (slots < 2^26: 32-bit arithmetic).
  int dig[64];
  unsigned a = static_cast<unsigned>(a0 + c);
  for (int u = 0; u < U; ++u) {
    dig[u] = static_cast<int>(a % static_cast<unsigned>(dp));
    a /= static_cast<unsigned>(dp);
  }
  for (std::int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    const double* p = prob + (r0 + i) * U * dp;
    double acc = p[dig[0]];
    for (int u = 1; u < U; ++u) acc = __dmul_rn(acc, p[u * dp + dig[u]]);
    out[i * ld + c] = acc;
  }
}

__device__ inline bool before(std::int64_t sa, std::int64_t fa, std::int64_t sb, std::int64_t fb) {
  return sa > sb || (sa == sb && fa < fb);
}

// Insert (s, f) into the sorted list (S, F) of count c and capacity K; element k at k·n (rows interleaved).
__device__ inline void list_insert(std::int64_t* S, std::int64_t* F, std::int64_t n, std::int64_t K, std::int64_t& c,
                                   std::int64_t s, std::int64_t f) {
  if (c == K && !before(s, f, S[(K - 1) * n], F[(K - 1) * n])) return;
  std::int64_t pos = c == K ? K - 1 : c;
  while (pos > 0 && before(s, f, S[(pos - 1) * n], F[(pos - 1) * n])) {
    S[pos * n] = S[(pos - 1) * n];
    F[pos * n] = F[(pos - 1) * n];
    --pos;
  }
  S[pos * n] = s;
  F[pos * n] = f;
  if (c < K) ++c;
}

__global__ void k_topk(const std::int64_t* q, int U, int dp, std::int64_t n, std::int64_t K, std::int64_t* flat,
                       std::int64_t* scratch) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  std::int64_t* cs = scratch + i;
  std::int64_t* cf = scratch + K * n + i;
  std::int64_t* ns = scratch + 2 * K * n + i;
  std::int64_t* nf = scratch + 3 * K * n + i;
  const std::int64_t* qi = q + i * U * dp;
  std::int64_t cnt = 0;
  for (int j = 0; j < dp; ++j) list_insert(cs, cf, n, K, cnt, qi[j], j);
  std::int64_t stride = dp;
  for (int u = 1; u < U; ++u) {
    const std::int64_t* qu = qi + u * dp;
    std::int64_t qmax = qu[0];
    for (int j = 1; j < dp; ++j) qmax = qu[j] > qmax ? qu[j] : qmax;
    std::int64_t nc = 0;
    for (std::int64_t e = 0; e < cnt; ++e) {
      const std::int64_t se = cs[e * n], fe = cf[e * n];
      // Prefixes come best first: once even the best extension scores below the K-th kept one, stop.
      if (nc == K && se + qmax < ns[(K - 1) * n]) break;
      for (int j = 0; j < dp; ++j) list_insert(ns, nf, n, K, nc, se + qu[j], fe + j * stride);
    }
    std::int64_t* t = cs;
    cs = ns;
    ns = t;
    t = cf;
    cf = nf;
    nf = t;
    cnt = nc;
    stride *= dp;
  }
  for (std::int64_t k = 0; k < K; ++k) flat[i * K + k] = k < cnt ? cf[k * n] : -1;
}

__global__ void k_sparse_weights(const double* prob, int U, int dp, std::int64_t n, std::int64_t K,
                                 const std::int64_t* flat, double* weight) {
  const std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * K) return;
  weight[e] = product_weight(prob + (e / K) * U * dp, U, dp, flat[e]);
}

// ---- GSU ----------------------------------------------------------------------------------------

__global__ void k_scatter_cumulative(const std::int64_t* flat, const double* weight, std::int64_t n, std::int64_t K,
                                     const double* Va, int cols, double* S) {
  for (std::int64_t e = blockIdx.x; e < n * K; e += gridDim.x) {
    const double w = weight[e];
    const double* v = Va + (e / K) * cols;
    double* dst = S + flat[e] * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) atomicAdd(dst + c, w * v[c]);
  }
}

__global__ void k_gsu_dense(const double* prob, int U, int dp, std::int64_t N, std::int64_t a0, std::int64_t cols,
                            double* L, std::int64_t ld, double* X, std::int64_t xld, int mcol, GateParams g) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const std::int64_t a = a0 + c;
  int dig[64];
  std::int64_t f = a;
  for (int u = 0; u < U; ++u) {
    dig[u] = static_cast<int>(f % dp);
    f /= dp;
  }
  double mm = 0;
  for (std::int64_t t = 0; t < N; ++t) {
    const double* p = prob + t * U * dp;
    double w = p[dig[0]];
    for (int u = 1; u < U; ++u) w = __dmul_rn(w, p[u * dp + dig[u]]);
    double lam = 0;
    if (w != 0) {
      const double gt = gate(one_minus_weight(p, U, dp, a, w), w, g);
      mm = __dadd_rn(__dmul_rn(gt, mm), w);
      lam = __ddiv_rn(w, __dadd_rn(mm, g.eps));
    }
    L[t * ld + c] = lam;
  }
  X[a * xld + mcol] = mm;
  double P = 1;
  for (std::int64_t t = N - 1; t >= 0; --t) {
    const double lam = L[t * ld + c];
    L[t * ld + c] = __dmul_rn(lam, P);
    P = __dmul_rn(P, __dsub_rn(1.0, lam));
  }
}

__global__ void k_gsu_sparse(const std::int64_t* flat, const double* weight, const double* prob, int U, int dp,
                             std::int64_t N, std::int64_t K, const double* V, int dv, double* mass, double* state,
                             GateParams g) {
  extern __shared__ double sh[];
  double* lam = sh;                                               // K
  std::int64_t* slot = reinterpret_cast<std::int64_t*>(sh + K);  // K
  for (std::int64_t t = 0; t < N; ++t) {
    for (std::int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      const std::int64_t e = t * K + k;
      const double w = weight[e];
      const std::int64_t a = flat[e];
      double l = 0;
      if (w != 0) {
        const double gt = gate(one_minus_weight(prob + t * U * dp, U, dp, a, w), w, g);
        const double m = __dadd_rn(__dmul_rn(gt, mass[a]), w);
        mass[a] = m;
        l = __ddiv_rn(w, __dadd_rn(m, g.eps));
      }
      lam[k] = l;
      slot[k] = a;
    }
    __syncthreads();
    const double* v = V + t * dv;
    for (std::int64_t idx = threadIdx.x; idx < K * dv; idx += blockDim.x) {
      const std::int64_t k = idx / dv;
      const int c = static_cast<int>(idx - k * dv);
      const double l = lam[k];
      if (l == 0) continue;
      double* s = state + slot[k] * dv + c;
      *s = __dadd_rn(*s, __dmul_rn(l, __dsub_rn(v[c], *s)));
    }
    __syncthreads();
  }
}

__global__ void k_state_to_x(const double* state, const double* mass, std::int64_t D, int dv, bool mass_form,
                             double* X) {
  const std::int64_t cols = dv + 1;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < D * cols;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t a = e / cols;
    const int c = static_cast<int>(e - a * cols);
    X[e] = c == dv ? mass[a] : (mass_form ? __dmul_rn(state[a * dv + c], mass[a]) : state[a * dv + c]);
  }
}

__global__ void k_scale_by_mass(double* X, std::int64_t D, int dv, bool divide) {
  const std::int64_t cols = dv + 1;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < D * dv;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t a = e / dv;
    const int c = static_cast<int>(e - a * dv);
    const double m = X[a * cols + dv];
    double& x = X[a * cols + c];
    if (divide) x = m > 0 ? __ddiv_rn(x, m) : 0.0;
    else x = __dmul_rn(x, m);
  }
}

__global__ void k_sparse_read(const std::int64_t* flat, const double* weight, std::int64_t n, std::int64_t K,
                              const double* X, int cols, double* Oa) {
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n * cols;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / cols;
    const int c = static_cast<int>(e - i * cols);
    double acc = 0;
    for (std::int64_t k = 0; k < K; ++k)
      acc = __dadd_rn(acc, __dmul_rn(weight[i * K + k], X[flat[i * K + k] * cols + c]));
    Oa[e] = acc;
  }
}

__global__ void k_finish_outputs(const double* Oa, std::int64_t n, int dv, double eps, bool divide, double* O) {
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n * dv;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / dv;
    const int c = static_cast<int>(e - i * dv);
    const double x = Oa[i * (dv + 1) + c];
    if (!divide) {
      O[e] = x;
      continue;
    }
    const double den = __dadd_rn(Oa[i * (dv + 1) + dv], eps);
    O[e] = (den > 0 && isfinite(den)) ? __ddiv_rn(x, den) : 0.0;
  }
}

// ---- quadratic baselines -------------------------------------------------------------------------

__global__ void k_softmax_rows(double* A, std::int64_t N, double it, double* sums) {
  __shared__ double sh[kThreads];
  double* row = A + static_cast<std::int64_t>(blockIdx.x) * N;
  double mx = -INFINITY;
  for (std::int64_t s = threadIdx.x; s < N; s += blockDim.x) mx = fmax(mx, __dmul_rn(row[s], it));
  mx = block_max(mx, sh);
  double sum = 0;
  for (std::int64_t s = threadIdx.x; s < N; s += blockDim.x) {
    const double e = exp(__dsub_rn(__dmul_rn(row[s], it), mx));
    row[s] = e;
    sum += e;
  }
  sum = block_sum(sum, sh);
  if (threadIdx.x == 0) sums[blockIdx.x] = sum;
}

constexpr int kKappaTile = 32;

__global__ void k_kappa_tile(const double* pr, const double* pw, int U, int dp, std::int64_t rows, std::int64_t N,
                             double* A) {
  extern __shared__ double sh[];
  const int W = U * dp;
  double* spr = sh;
  double* spw = sh + kKappaTile * W;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.y) * kKappaTile;
  const std::int64_t s0 = static_cast<std::int64_t>(blockIdx.x) * kKappaTile;
  for (int idx = threadIdx.x; idx < kKappaTile * W; idx += blockDim.x) {
    const int r = idx / W, c = idx - r * W;
    spr[idx] = i0 + r < rows ? pr[(i0 + r) * W + c] : 0.0;
    spw[idx] = s0 + r < N ? pw[(s0 + r) * W + c] : 0.0;
  }
  __syncthreads();
  const int ts = threadIdx.x % kKappaTile, ti = threadIdx.x / kKappaTile;  // 8 row groups
  const double fdp = static_cast<double>(dp);
  for (int r = ti; r < kKappaTile; r += kThreads / kKappaTile) {
    if (i0 + r >= rows || s0 + ts >= N) continue;
    const double* a = spr + r * W;
    const double* b = spw + ts * W;
    double prod = 1;
    for (int u = 0; u < U; ++u) {
      double gsum = 0;
      for (int j = 0; j < dp; ++j) gsum += a[u * dp + j] * b[u * dp + j];
      const double term = fdp * gsum;
      prod = u == 0 ? term : prod * term;
    }
    A[(i0 + r) * N + s0 + ts] = prod;
  }
}

__global__ void k_kappa_finish(const double* pr, const double* pw, int U, int dp, std::int64_t N, double tiny,
                               double* A, double* sums) {
  __shared__ double sh[kThreads];
  const std::int64_t i = blockIdx.x;
  double* row = A + i * N;
  double mx = -INFINITY;
  for (std::int64_t s = threadIdx.x; s < N; s += blockDim.x) mx = fmax(mx, row[s]);
  mx = block_max(mx, sh);
  if (!(mx >= tiny)) {  // extreme β: the products underflow; redo the row in log space
    const int W = U * dp;
    const double* q = pr + i * W;
    double lmax = -INFINITY;
    for (std::int64_t s = threadIdx.x; s < N; s += blockDim.x) {
      const double* k = pw + s * W;
      double l = 0;
      for (int u = 0; u < U; ++u) {
        double g = 0;
        for (int j = 0; j < dp; ++j) g += q[u * dp + j] * k[u * dp + j];
        l += log(dp * g);
      }
      row[s] = l;
      lmax = fmax(lmax, l);
    }
    lmax = block_max(lmax, sh);
    for (std::int64_t s = threadIdx.x; s < N; s += blockDim.x) row[s] = lmax == -INFINITY ? 0.0 : exp(row[s] - lmax);
    __syncthreads();
  }
  double sum = 0;
  for (std::int64_t s = threadIdx.x; s < N; s += blockDim.x) sum += row[s];
  sum = block_sum(sum, sh);
  if (threadIdx.x == 0) sums[i] = sum;
}

__global__ void k_divide_rows(double* O, std::int64_t rows, int dv, const double* sums) {
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < rows * dv;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double s = sums[e / dv];
    O[e] = (s > 0 && isfinite(s)) ? O[e] / s : 0.0;
  }
}

// ---- linear baselines ----------------------------------------------------------------------------

__global__ void k_elu(const double* X, std::int64_t n, double* F) {
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    F[e] = X[e] > 0 ? X[e] + 1.0 : exp(X[e]);
}

__global__ void k_favor_shift(double* P, std::int64_t rows, std::int64_t D, const double* X, int d, double ht) {
  for (std::int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    double h = 0;
    for (int c = 0; c < d; ++c) h += X[i * d + c] * X[i * d + c];
    h *= ht;
    for (std::int64_t a = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; a < D;
         a += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
      P[i * D + a] -= h;
  }
}

__global__ void k_max_partial(const double* P, std::int64_t count, double* partial) {
  __shared__ double sh[kThreads];
  double mx = -INFINITY;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    mx = fmax(mx, P[e]);
  mx = block_max(mx, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = mx;
}

__global__ void k_exp_global(double* P, std::int64_t count, double c) {
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    P[e] = exp(P[e] - c);
}

__global__ void k_exp_rows(double* P, std::int64_t D) {
  __shared__ double sh[kThreads];
  double* row = P + static_cast<std::int64_t>(blockIdx.x) * D;
  double mx = -INFINITY;
  for (std::int64_t a = threadIdx.x; a < D; a += blockDim.x) mx = fmax(mx, row[a]);
  mx = block_max(mx, sh);
  for (std::int64_t a = threadIdx.x; a < D; a += blockDim.x) row[a] = exp(row[a] - mx);
}

// ---- decoding --------------------------------------------------------------------------------------

__global__ void k_decode_rows(const double* G, std::int64_t N, std::int64_t r0, const double* inv, const double* vn2,
                              const double* O, int dv, std::int64_t* argmax, double* nmse) {
  __shared__ double sv[kThreads];
  __shared__ std::int64_t sj[kThreads];
  const std::int64_t r = blockIdx.x, i = r0 + r;
  const double* row = G + r * N;
  double on2 = 0;
  for (int c = threadIdx.x; c < dv; c += blockDim.x) on2 += O[i * dv + c] * O[i * dv + c];
  on2 = block_sum(on2, sv);
  double best = -INFINITY;
  std::int64_t bj = -1;
  for (std::int64_t j = threadIdx.x; j < N; j += blockDim.x) {
    const double v = __dmul_rn(row[j], inv[j]);
    if (v > best) {
      best = v;
      bj = j;
    }
  }
  sv[threadIdx.x] = best;
  sj[threadIdx.x] = bj;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      const double v2 = sv[threadIdx.x + o];
      const std::int64_t j2 = sj[threadIdx.x + o];
      const double v1 = sv[threadIdx.x];
      const std::int64_t j1 = sj[threadIdx.x];
      if (j2 >= 0 && (j1 < 0 || v2 > v1 || (v2 == v1 && j2 < j1))) {
        sv[threadIdx.x] = v2;
        sj[threadIdx.x] = j2;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const bool dead = !(on2 > 0) || !isfinite(on2);
    argmax[i] = dead ? -1 : sj[0];
    if (dead) {
      nmse[i] = 1.0;
    } else {
      const double gi = row[i];
      const double c2 = gi * gi / (on2 * vn2[i]);
      const double v = 1.0 - c2;
      nmse[i] = v < 0 ? 0.0 : (v > 1 ? 1.0 : v);
    }
  }
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------------

void dense_features(const double* prob, int U, int dp, std::int64_t r0, std::int64_t rows, std::int64_t a0,
                    std::int64_t cols, double* out, std::int64_t ld, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), grid_rows(rows));
  k_dense_features<<<grid, kThreads, 0, s>>>(prob, U, dp, r0, rows, a0, cols, out, ld);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet dense_features");
}

void topk_lists(const std::int64_t* q, int U, int dp, std::int64_t n, std::int64_t K, std::int64_t* flat,
                std::int64_t* scratch, cudaStream_t s) {
  if (n <= 0) return;
  k_topk<<<static_cast<unsigned>((n + 127) / 128), 128, 0, s>>>(q, U, dp, n, K, flat, scratch);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet topk_lists");
}

void sparse_weights(const double* prob, int U, int dp, std::int64_t n, std::int64_t K, const std::int64_t* flat,
                    double* weight, cudaStream_t s) {
  if (n * K <= 0) return;
  k_sparse_weights<<<static_cast<unsigned>((n * K + kThreads - 1) / kThreads), kThreads, 0, s>>>(prob, U, dp, n, K,
                                                                                                  flat, weight);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet sparse_weights");
}

void scatter_cumulative(const std::int64_t* flat, const double* weight, std::int64_t n, std::int64_t K,
                        const double* Va, int cols, double* S, cudaStream_t s) {
  if (n * K <= 0) return;
  const int threads = cols <= 32 ? 32 : (cols <= 64 ? 64 : 128);
  const std::int64_t b = n * K < (1 << 20) ? n * K : (1 << 20);
  k_scatter_cumulative<<<static_cast<unsigned>(b), threads, 0, s>>>(flat, weight, n, K, Va, cols, S);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet scatter_cumulative");
}

void gsu_dense(const double* prob, int U, int dp, std::int64_t N, std::int64_t a0, std::int64_t cols, double* L,
               std::int64_t ld, double* X, std::int64_t xld, int mcol, GateParams g, cudaStream_t s) {
  if (cols <= 0) return;
  k_gsu_dense<<<static_cast<unsigned>((cols + 127) / 128), 128, 0, s>>>(prob, U, dp, N, a0, cols, L, ld, X, xld, mcol, g);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet gsu_dense");
}

void gsu_sparse(const std::int64_t* flat, const double* weight, const double* prob, int U, int dp, std::int64_t N,
                std::int64_t K, const double* V, int dv, double* mass, double* state, GateParams g, cudaStream_t s) {
  if (N <= 0) return;
  const std::size_t smem = static_cast<std::size_t>(K) * (sizeof(double) + sizeof(std::int64_t));
  k_gsu_sparse<<<1, kThreads, smem, s>>>(flat, weight, prob, U, dp, N, K, V, dv, mass, state, g);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet gsu_sparse");
}

void state_to_x(const double* state, const double* mass, std::int64_t D, int dv, bool mass_form, double* X,
                cudaStream_t s) {
  k_state_to_x<<<blocks_for(D * (dv + 1)), kThreads, 0, s>>>(state, mass, D, dv, mass_form, X);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet state_to_x");
}

void scale_by_mass(double* X, std::int64_t D, int dv, bool divide, cudaStream_t s) {
  k_scale_by_mass<<<blocks_for(D * dv), kThreads, 0, s>>>(X, D, dv, divide);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet scale_by_mass");
}

void sparse_read(const std::int64_t* flat, const double* weight, std::int64_t n, std::int64_t K, const double* X,
                 int cols, double* Oa, cudaStream_t s) {
  k_sparse_read<<<blocks_for(n * cols), kThreads, 0, s>>>(flat, weight, n, K, X, cols, Oa);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet sparse_read");
}

void finish_outputs(const double* Oa, std::int64_t n, int dv, double eps, bool divide, double* O, cudaStream_t s) {
  k_finish_outputs<<<blocks_for(n * dv), kThreads, 0, s>>>(Oa, n, dv, eps, divide, O);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet finish_outputs");
}

void softmax_rows(double* A, std::int64_t rows, std::int64_t N, double it, double* sums, cudaStream_t s) {
  if (rows <= 0) return;
  k_softmax_rows<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(A, N, it, sums);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet softmax_rows");
}

void kappa_rows(const double* pr, const double* pw, int U, int dp, std::int64_t rows, std::int64_t N, double tiny,
                double* A, double* sums, cudaStream_t s) {
  if (rows <= 0) return;
  const std::size_t smem = 2 * static_cast<std::size_t>(kKappaTile) * U * dp * sizeof(double);
  if (smem > 48 * 1024)
    ::memcap::cuda_detail::raise_dynamic_smem(k_kappa_tile, smem);
  const dim3 grid(static_cast<unsigned>((N + kKappaTile - 1) / kKappaTile),
                  static_cast<unsigned>((rows + kKappaTile - 1) / kKappaTile));
  k_kappa_tile<<<grid, kThreads, smem, s>>>(pr, pw, U, dp, rows, N, A);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet kappa_tile");
  k_kappa_finish<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(pr, pw, U, dp, N, tiny, A, sums);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet kappa_finish");
}

void divide_rows(double* O, std::int64_t rows, int dv, const double* sums, cudaStream_t s) {
  k_divide_rows<<<blocks_for(rows * dv), kThreads, 0, s>>>(O, rows, dv, sums);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet divide_rows");
}

void elu_features(const double* X, std::int64_t n, double* F, cudaStream_t s) {
  k_elu<<<blocks_for(n), kThreads, 0, s>>>(X, n, F);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet elu_features");
}

void favor_shift(double* P, std::int64_t rows, std::int64_t D, const double* X, int d, double ht, cudaStream_t s) {
  if (rows <= 0) return;
  const dim3 grid(blocks_for(D, 4096), grid_rows(rows));
  k_favor_shift<<<grid, kThreads, 0, s>>>(P, rows, D, X, d, ht);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet favor_shift");
}

void max_value(const double* P, std::int64_t count, double* out, cudaStream_t s) {
  // Two passes: partial maxima of at most 1024 blocks into out[1..], then out[0] = their maximum.
  const unsigned b = blocks_for(count, 1024);
  k_max_partial<<<b, kThreads, 0, s>>>(P, count, out + 1);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet max_partial");
  k_max_partial<<<1, kThreads, 0, s>>>(out + 1, b, out);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet max_final");
}

void exp_shift_global(double* P, std::int64_t count, double c, cudaStream_t s) {
  k_exp_global<<<blocks_for(count), kThreads, 0, s>>>(P, count, c);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet exp_shift_global");
}

void exp_shift_rows(double* P, std::int64_t rows, std::int64_t D, cudaStream_t s) {
  if (rows <= 0) return;
  k_exp_rows<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(P, D);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet exp_shift_rows");
}

void decode_rows(const double* G, std::int64_t rows, std::int64_t N, std::int64_t r0, const double* inv,
                 const double* vn2, const double* O, int dv, std::int64_t* argmax, double* nmse, cudaStream_t s) {
  if (rows <= 0) return;
  k_decode_rows<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(G, N, r0, inv, vn2, O, dv, argmax, nmse);
  MEMCAP_CUDA_CHECK_LAUNCH("ramnet decode_rows");
}

}  // namespace memcap::ramnet::cuda
