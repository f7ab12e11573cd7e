// CUDA trial of the capacity protocol (spec §4.6). Per query tile: raw Gram blocks by cuBLAS SGEMM,
// an elementwise kernel turns them into the map's coefficients A (tile x K), a row kernel sums the
// pSNR distractor power, row sums, error scales and coherence in float64; the closed-form readout
// A [V|1], the state readout psi(Q)^T [S|Z] (softmax: a streaming KV-cache pass with a running max),
// the relative deviation between them, and the decode GEMM + row argmax. CPU reference:
// src/kata/capacity_cpu.cpp. Never holds more than a tile x K slice of A.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/gpu.hpp"
#include "kata_capacity.cuh"
#include "kata_feature_map.cuh"

namespace memcap::kata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kTileFloats = std::int64_t(1) << 25;  // 128 MiB per tile buffer

// One stream and its cuBLAS handle per host thread, made on the first trial and kept for the life
// of the process (like a static handle: destroying them at exit could run after the CUDA runtime
// has unloaded). SGEMMs run in plain float32: no TF32 down-conversion.
struct TrialContext {
  gpu::Stream stream;
  gpu::Handles handles{stream};
};

TrialContext& context() {
  thread_local TrialContext* ctx = [] {
    auto c = std::make_unique<TrialContext>();
    MEMCAP_CUBLAS_CHECK(cublasSetMathMode(c->handles.blas(), CUBLAS_DEFAULT_MATH));
    return c.release();
  }();
  return *ctx;
}

// The device arrays of one trial: each a gpu::Tensor, all freed when the trial returns or throws.
struct TrialArrays {
  std::vector<gpu::Tensor> owned;
  template <class T>
  T* alloc(std::int64_t n) {
    owned.emplace_back(std::vector<std::int64_t>{n}, gpu::dtype_of<T>());
    return owned.back().data<T>();
  }
  template <class T>
  T* copy(const T* host, std::int64_t n, const gpu::Stream& s) {
    T* d = alloc<T>(n);
    owned.back().upload(host, s);  // host arrays outlive the trial's last synchronize
    return d;
  }
};

// Row-major C (M x N) = op(A) op(B) with row-major operands (cuBLAS sees the transposes).
void gemm_rm(cublasHandle_t h, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t Kd, const float* A,
             std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc) {
  const float alpha = 1.0f;
  MEMCAP_CUBLAS_CHECK(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  static_cast<int>(N), static_cast<int>(M), static_cast<int>(Kd), &alpha, B,
                                  static_cast<int>(ldb), A, static_cast<int>(lda), &beta, C, static_cast<int>(ldc)));
}

unsigned blocks_for(std::int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void accumulate_square_kernel(float* A, const float* G, std::int64_t n, bool first) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = G[i];
  A[i] = first ? g * g : A[i] + g * g;
}

// Elementwise completion of A (rows: query norms xn/xn2; columns: key norms un/un2).
__global__ void finish_kernel(MapParams p, float* A, std::int64_t t, std::int64_t K, const float* xn,
                              const float* xn2, const float* un, const float* un2, float umax) {
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= t * K) return;
  const std::int64_t r = idx / K, j = idx % K;
  float a = A[idx];
  const float eps = static_cast<float>(p.eps);
  switch (p.kind) {
    case MapKind::LorentzRay: a = 0.5f * (1.0f + a / (fmaxf(xn[r], 1e-30f) * fmaxf(un[j], 1e-30f))); break;
    case MapKind::LorentzLift: a = a + xn[r] * un[j]; break;
    case MapKind::BlockPsd: a = a + eps * (xn2[r] + un2[j]) + p.g * eps * eps * p.m; break;
    case MapKind::SumPsd: {
      const float s = static_cast<float>(p.scale);
      a = s * s * a + eps * s * (xn2[r] + un2[j]) + eps * eps * p.m;
      break;
    }
    case MapKind::Softmax: a = expf((a - xn[r] * umax) / static_cast<float>(p.tau)); break;
    default: break;
  }
  A[idx] = a;
}

template <class T, class Op>
__device__ T block_reduce(T v, T* shared, Op op) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  const T out = shared[0];
  __syncthreads();
  return out;
}

struct Add {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct Max {
  __device__ double operator()(double a, double b) const { return a > b ? a : b; }
};

// One block per tile row: pSNR (float64 sums), row sum, error scale sum_j |A_ij||v_j|, coherence row max.
__global__ void row_stats_kernel(const float* A, const float* Akey, std::int64_t K, std::int64_t r0, bool softmax,
                                 const float* vnorm, const double* coh_a, const double* coh_b, double* psnr,
                                 double* rowsum, double* scale, double* cohmax) {
  __shared__ double sh[kThreads];
  const std::int64_t r = blockIdx.x, i = r0 + r;
  const float* row = A + r * K;
  const float* krow = Akey + r * K;
  double den = 0, sum = 0, scl = 0, cmax = 0;
  for (std::int64_t j = threadIdx.x; j < K; j += blockDim.x) {
    const double a = row[j];
    sum += a;
    scl += fabs(a) * vnorm[j];
    if (j == i) continue;
    den += a * a;
    const double ak = krow[j];
    const double c = softmax ? (ak > 0 ? exp(log(ak) + coh_a[i] + coh_b[j]) : 0.0) : fabs(ak) * coh_a[i] * coh_b[j];
    cmax = c > cmax ? c : cmax;
  }
  den = block_reduce(den, sh, Add{});
  sum = block_reduce(sum, sh, Add{});
  scl = block_reduce(scl, sh, Add{});
  cmax = block_reduce(cmax, sh, Max{});
  if (threadIdx.x == 0) {
    const double aii = row[i];
    psnr[r] = den > 0 ? aii * aii / den : HUGE_VAL;
    rowsum[r] = sum;
    scale[r] = scl;
    cohmax[r] = cmax;
  }
}

// Softmax KV-cache block: G (t x kb) holds q.u; updates the running max, writes P = exp(G/tau - max)
// in place and the factor exp(old max - new max) that rescales the running numerator.
__global__ void softmax_block_kernel(float* G, std::int64_t kb, float inv_tau, double* run_max, float* rescale) {
  __shared__ double sh[kThreads];
  const std::int64_t r = blockIdx.x;
  float* row = G + r * kb;
  double m = -HUGE_VAL;
  for (std::int64_t j = threadIdx.x; j < kb; j += blockDim.x) m = fmax(m, static_cast<double>(row[j]) * inv_tau);
  m = block_reduce(m, sh, Max{});
  const double m_old = run_max[r], m_new = fmax(m_old, m);
  for (std::int64_t j = threadIdx.x; j < kb; j += blockDim.x)
    row[j] = static_cast<float>(exp(static_cast<double>(row[j]) * inv_tau - m_new));
  if (threadIdx.x == 0) {
    rescale[r] = static_cast<float>(exp(m_old - m_new));
    run_max[r] = m_new;
  }
}

__global__ void scale_rows_kernel(float* X, std::int64_t rows, std::int64_t cols, const float* s) {
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < rows * cols) X[idx] *= s[idx / cols];
}

// Per row: normalized readouts, relative deviation state vs closed form, and O for decoding.
__global__ void deviation_kernel(const float* Ost, const float* Ncf, std::int64_t t, int d_v, bool normalized,
                                 const double* rowsum, const double* scale, float* O, double* dev) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= t) return;
  const int dv1 = d_v + 1;
  const double dst = Ost[r * dv1 + d_v], dcf = rowsum[r];
  const double ns = normalized ? 1.0 / dst : 1.0, nc = normalized ? 1.0 / dcf : 1.0;
  double diff = 0;
  for (int k = 0; k < d_v; ++k) {
    const double o1 = Ost[r * dv1 + k] * ns, o2 = Ncf[r * dv1 + k] * nc;
    diff += (o1 - o2) * (o1 - o2);
    O[r * d_v + k] = static_cast<float>(o1);
  }
  const double s = normalized ? scale[r] / fabs(dcf) : scale[r];
  double e = s > 0 ? sqrt(diff) / s : 0.0;
  if (!(e == e) || isinf(e)) e = HUGE_VAL;
  dev[r] = e;
}

__global__ void argmax_kernel(const float* S, std::int64_t n, std::int64_t* out) {
  __shared__ float best_v[kThreads];
  __shared__ std::int64_t best_i[kThreads];
  const std::int64_t r = blockIdx.x;
  const float* row = S + r * n;
  float bv = -INFINITY;
  std::int64_t bi = n;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
    if (row[j] > bv) bv = row[j], bi = j;  // strided: first max of this thread's slice
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float v2 = best_v[threadIdx.x + s];
      const std::int64_t i2 = best_i[threadIdx.x + s];
      if (v2 > best_v[threadIdx.x] || (v2 == best_v[threadIdx.x] && i2 < best_i[threadIdx.x]))
        best_v[threadIdx.x] = v2, best_i[threadIdx.x] = i2;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = best_i[0];
}

}  // namespace

void capacity_trial(const CapacityTrialInput& in, CapacityTrialOutput& out) {
  const MapParams& p = in.p;
  const std::int64_t K = in.K, d = p.d, n_psi = in.n_psi, n_dec = in.n_dec;
  const int d_v = in.d_v, dv1 = in.d_v + 1;
  const bool softmax = p.kind == MapKind::Softmax;
  const bool psi_gram = p.kind == MapKind::Orthant || p.kind == MapKind::Lorentz;

  // Host-side small arrays: norms, value norms, [V | 1], PSD pair table.
  std::vector<float> un(K), un2(K), qn(K), qn2(K), vnorm(K), vext(static_cast<std::size_t>(K) * dv1);
  float umax = 0.0f;
  for (std::int64_t i = 0; i < K; ++i) {
    double a = 0, b = 0, c = 0;
    for (std::int64_t k = 0; k < d; ++k) {
      a += double(in.U[i * d + k]) * in.U[i * d + k];
      b += double(in.Q[i * d + k]) * in.Q[i * d + k];
    }
    for (int k = 0; k < d_v; ++k) {
      c += double(in.V[i * d_v + k]) * in.V[i * d_v + k];
      vext[i * dv1 + k] = in.V[i * d_v + k];
    }
    vext[i * dv1 + d_v] = 1.0f;
    un2[i] = static_cast<float>(a);
    un[i] = static_cast<float>(std::sqrt(a));
    qn2[i] = static_cast<float>(b);
    qn[i] = static_cast<float>(std::sqrt(b));
    vnorm[i] = static_cast<float>(std::sqrt(c));
    umax = std::max(umax, un[i]);
  }

  std::int64_t t = in.tile_rows > 0 ? in.tile_rows
                                    : kTileFloats / std::max<std::int64_t>({K, n_psi, n_dec, std::int64_t(dv1), 1});
  t = std::clamp<std::int64_t>(t, 1, K);

  TrialContext& ctx = context();
  const gpu::Stream& st = ctx.stream;
  cublasHandle_t blas = ctx.handles.blas();
  TrialArrays mem;
  const float* dU = mem.copy(in.U, K * d, st);
  const float* dQ = mem.copy(in.Q, K * d, st);
  const float* dV = mem.copy(vext.data(), K * dv1, st);
  const float* dDec = mem.copy(in.dec, n_dec * d_v, st);
  const float *dun = mem.copy(un.data(), K, st), *dun2 = mem.copy(un2.data(), K, st);
  const float *dqn = mem.copy(qn.data(), K, st), *dqn2 = mem.copy(qn2.data(), K, st);
  const float* dvn = mem.copy(vnorm.data(), K, st);
  const double *dca = mem.copy(in.key_coh_a, K, st), *dcb = mem.copy(in.key_coh_b, K, st);
  float *A = mem.alloc<float>(t * K), *G = mem.alloc<float>(t * K);
  float* Akey = mem.alloc<float>(in.queries_are_keys ? 0 : t * K);
  float* psi = mem.alloc<float>(softmax ? 0 : t * n_psi);
  float* psiU = mem.alloc<float>(psi_gram ? K * n_psi : 0);
  float* psi_aux = mem.alloc<float>(softmax ? 0 : K);  // per-row scratch of launch_psi_rows (rows <= K)
  const DeviceMap dmap = device_map(p);
  float* S = mem.alloc<float>(softmax ? 0 : n_psi * dv1);
  float *Ncf = mem.alloc<float>(t * dv1), *Ost = mem.alloc<float>(t * dv1), *O = mem.alloc<float>(t * d_v);
  float* scores = mem.alloc<float>(t * n_dec);
  float* resc = mem.alloc<float>(softmax ? t : 0);
  double *psnr = mem.alloc<double>(t), *rowsum = mem.alloc<double>(t), *scale = mem.alloc<double>(t);
  double *cohmax = mem.alloc<double>(t), *dev = mem.alloc<double>(t), *runmax = mem.alloc<double>(softmax ? t : 0);
  std::int64_t* amax = mem.alloc<std::int64_t>(t);
  // Poison every output buffer with NaN (0xFF bytes; -1 for the argmax): an unwritten entry cannot pass.
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(Ncf, 0xFF, sizeof(float) * t * dv1, st.get()));
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(Ost, 0xFF, sizeof(float) * t * dv1, st.get()));
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(O, 0xFF, sizeof(float) * t * d_v, st.get()));
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(scores, 0xFF, sizeof(float) * t * n_dec, st.get()));
  for (auto* b : {psnr, rowsum, scale, cohmax, dev})
    MEMCAP_CUDA_CHECK(cudaMemsetAsync(b, 0xFF, sizeof(double) * t, st.get()));
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(amax, 0xFF, sizeof(std::int64_t) * t, st.get()));

  auto features = [&](const float* X, std::int64_t rows, float* dst) {
    launch_psi_rows(dmap, X, rows, dst, n_psi, psi_aux, st.get());  // the one device psi (kata_feature_map.cuh)
  };
  // A (tb x K) for rows X (device, tb x d) with norms xn/xn2 (device).
  auto build_tile = [&](const float* X, std::int64_t tb, const float* xn, const float* xn2, float* dst) {
    switch (p.kind) {
      case MapKind::Linear: gemm_rm(blas, false, true, tb, K, d, X, d, dU, d, 0.0f, dst, K); return;
      case MapKind::Orthant:
      case MapKind::Lorentz:
        features(X, tb, psi);
        gemm_rm(blas, false, true, tb, K, n_psi, psi, n_psi, psiU, n_psi, 0.0f, dst, K);
        return;
      case MapKind::BlockPsd:
        for (int a = 0; a < p.g; ++a) {
          gemm_rm(blas, false, true, tb, K, p.m, X + a * p.m, d, dU + a * p.m, d, 0.0f, G, K);
          accumulate_square_kernel<<<blocks_for(tb * K), kThreads, 0, st.get()>>>(dst, G, tb * K, a == 0);
          MEMCAP_CUDA_CHECK_LAUNCH("accumulate_square_kernel");
        }
        break;
      case MapKind::SumPsd:
        for (int a = 0; a < p.g; ++a)
          for (int b = 0; b < p.g; ++b) {
            gemm_rm(blas, false, true, tb, K, p.m, X + a * p.m, d, dU + b * p.m, d, 0.0f, G, K);
            accumulate_square_kernel<<<blocks_for(tb * K), kThreads, 0, st.get()>>>(dst, G, tb * K,
                                                                                     a == 0 && b == 0);
            MEMCAP_CUDA_CHECK_LAUNCH("accumulate_square_kernel");
          }
        break;
      default: gemm_rm(blas, false, true, tb, K, d, X, d, dU, d, 0.0f, dst, K); break;
    }
    finish_kernel<<<blocks_for(tb * K), kThreads, 0, st.get()>>>(p, dst, tb, K, xn, xn2, dun, dun2, umax);
    MEMCAP_CUDA_CHECK_LAUNCH("finish_kernel");
  };

  // Write: [S | Z] = Psi(U)^T [V | 1], key tiles at a time (float32 accumulation in cuBLAS).
  if (!softmax) {
    MEMCAP_CUDA_CHECK(cudaMemsetAsync(S, 0, sizeof(float) * n_psi * dv1, st.get()));
    for (std::int64_t c0 = 0; c0 < K; c0 += t) {
      const std::int64_t cb = std::min(t, K - c0);
      features(dU + c0 * d, cb, psi);
      gemm_rm(blas, true, false, n_psi, dv1, cb, psi, n_psi, dV + c0 * dv1, dv1, 1.0f, S, dv1);
    }
    if (psi_gram) features(dU, K, psiU);
  }

  std::vector<double> h_psnr(t), h_coh(t), h_dev(t), runmax_init(softmax ? t : 0, -HUGE_VAL);
  std::vector<std::int64_t> h_amax(t);
  out.correct = 0;
  out.coherence = 0;
  out.max_deviation = 0;
  for (std::int64_t r0 = 0; r0 < K; r0 += t) {
    const std::int64_t tb = std::min(t, K - r0);
    const float* Qt = dQ + r0 * d;
    build_tile(Qt, tb, dqn + r0, dqn2 + r0, A);
    const float* Ak = A;
    if (!in.queries_are_keys) {
      build_tile(dU + r0 * d, tb, dun + r0, dun2 + r0, Akey);
      Ak = Akey;
    }
    row_stats_kernel<<<static_cast<unsigned>(tb), kThreads, 0, st.get()>>>(A, Ak, K, r0, softmax, dvn, dca, dcb,
                                                                          psnr, rowsum, scale, cohmax);
    MEMCAP_CUDA_CHECK_LAUNCH("row_stats_kernel");
    // Closed form: [N | D] = A [V | 1].
    gemm_rm(blas, false, false, tb, dv1, K, A, K, dV, dv1, 0.0f, Ncf, dv1);
    // State readout.
    if (softmax) {
      MEMCAP_CUDA_CHECK(
          cudaMemcpyAsync(runmax, runmax_init.data(), sizeof(double) * tb, cudaMemcpyHostToDevice, st.get()));
      MEMCAP_CUDA_CHECK(cudaMemsetAsync(Ost, 0, sizeof(float) * tb * dv1, st.get()));
      const std::int64_t kb = std::max<std::int64_t>(1, std::min(K, kTileFloats / std::max<std::int64_t>(tb, 1)));
      for (std::int64_t c0 = 0; c0 < K; c0 += kb) {  // key blocks (G holds tb x kb <= t x K)
        const std::int64_t cb = std::min(kb, K - c0);
        gemm_rm(blas, false, true, tb, cb, d, Qt, d, dU + c0 * d, d, 0.0f, G, cb);
        softmax_block_kernel<<<static_cast<unsigned>(tb), kThreads, 0, st.get()>>>(
            G, cb, static_cast<float>(1.0 / p.tau), runmax, resc);
        MEMCAP_CUDA_CHECK_LAUNCH("softmax_block_kernel");
        scale_rows_kernel<<<blocks_for(tb * dv1), kThreads, 0, st.get()>>>(Ost, tb, dv1, resc);
        MEMCAP_CUDA_CHECK_LAUNCH("scale_rows_kernel");
        gemm_rm(blas, false, false, tb, dv1, cb, G, cb, dV + c0 * dv1, dv1, 1.0f, Ost, dv1);
      }
    } else {
      features(Qt, tb, psi);
      gemm_rm(blas, false, false, tb, dv1, n_psi, psi, n_psi, S, dv1, 0.0f, Ost, dv1);
    }
    deviation_kernel<<<blocks_for(tb), kThreads, 0, st.get()>>>(Ost, Ncf, tb, d_v, in.normalized || softmax,
                                                                rowsum, scale, O, dev);
    MEMCAP_CUDA_CHECK_LAUNCH("deviation_kernel");
    gemm_rm(blas, false, true, tb, n_dec, d_v, O, d_v, dDec, d_v, 0.0f, scores, n_dec);
    argmax_kernel<<<static_cast<unsigned>(tb), kThreads, 0, st.get()>>>(scores, n_dec, amax);
    MEMCAP_CUDA_CHECK_LAUNCH("argmax_kernel");

    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(out.psnr + r0, psnr, sizeof(double) * tb, cudaMemcpyDeviceToHost, st.get()));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(h_coh.data(), cohmax, sizeof(double) * tb, cudaMemcpyDeviceToHost, st.get()));
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(h_dev.data(), dev, sizeof(double) * tb, cudaMemcpyDeviceToHost, st.get()));
    MEMCAP_CUDA_CHECK(
        cudaMemcpyAsync(h_amax.data(), amax, sizeof(std::int64_t) * tb, cudaMemcpyDeviceToHost, st.get()));
    st.synchronize();
    for (std::int64_t r = 0; r < tb; ++r) {
      out.coherence = std::max(out.coherence, h_coh[r]);
      out.max_deviation = std::max(out.max_deviation, h_dev[r]);
      if (h_amax[r] == in.target[r0 + r]) ++out.correct;
    }
  }
}

}  // namespace memcap::kata::cuda
