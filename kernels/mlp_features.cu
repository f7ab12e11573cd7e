// Elementwise kernels of the closed-form constructions (see mlp_features.cuh): Philox normal
// draws, the gated hidden layer of a tile, Hadamard products, conversions, diagonal / triangle
// edits of the Gram matrices and non-finite flags. Grid-stride loops, 64-bit indices. Products and
// sums that the CPU does as separate operations use __dmul_rn / __dadd_rn (no FMA contraction).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "core/rng.hpp"
#include "cuda_check.cuh"
#include "mlp_features.cuh"

namespace memcap::mlp::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(b, std::int64_t(1) << 20)));
}

#define MLP_GRID_LOOP(i, n)                                                                        \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__global__ void normal_matrix_kernel(std::int64_t rows, std::int64_t cols, std::uint64_t seed, std::uint64_t stream,
                                     double scale, double* out) {
  MLP_GRID_LOOP(idx, rows * cols) {
    const std::int64_t i = idx % rows, j = idx / rows;
    const double z = rng::normal(seed, stream, static_cast<std::uint64_t>(i * cols + j));
    out[idx] = __dmul_rn(scale, z);
  }
}

// One block per column: norm by a fixed-order tree, then divide.
__global__ void normalize_columns_kernel(std::int64_t rows, double* M) {
  __shared__ double part[kThreads];
  double* c = M + static_cast<std::int64_t>(blockIdx.x) * rows;
  double acc = 0;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) acc += c[i] * c[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  const double div = fmax(sqrt(part[0]), 1e-30);
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) c[i] = c[i] / div;
}

__device__ inline double silu(double x) {
  if (x >= 0) return __dmul_rn(x, 1.0 / __dadd_rn(1.0, exp(-x)));
  const double e = exp(x);
  return __dmul_rn(x, e / __dadd_rn(1.0, e));
}

__global__ void hidden_combine_kernel(std::int64_t rows, std::int64_t cols, double* H, const double* W,
                                      const double* bu, const double* bg, int gate) {
  MLP_GRID_LOOP(idx, rows * cols) {
    const std::int64_t j = idx / rows;
    double up = H[idx], gt = W[idx];
    if (bu) up = __dadd_rn(up, bu[j]);
    if (bg) gt = __dadd_rn(gt, bg[j]);
    if (gate == kGateRelu) gt = gt > 0.0 ? gt : 0.0;
    if (gate == kGateSilu) gt = silu(gt);
    H[idx] = __dmul_rn(up, gt);
  }
}

__global__ void hadamard_kernel(std::int64_t n, double* a, const double* b) {
  MLP_GRID_LOOP(i, n) a[i] = __dmul_rn(a[i], b[i]);
}
__global__ void hadamard_kernel(std::int64_t n, float* a, const float* b) {
  MLP_GRID_LOOP(i, n) a[i] = __fmul_rn(a[i], b[i]);
}
__global__ void square_kernel(std::int64_t n, double* x) {
  MLP_GRID_LOOP(i, n) x[i] = __dmul_rn(x[i], x[i]);
}
template <class A, class B>
__global__ void convert_kernel(std::int64_t n, const A* in, B* out) {
  MLP_GRID_LOOP(i, n) out[i] = static_cast<B>(in[i]);
}
__global__ void add_column_bias_kernel(std::int64_t rows, std::int64_t cols, double* M, const double* bias) {
  MLP_GRID_LOOP(idx, rows * cols) M[idx] = __dadd_rn(M[idx], bias[idx / rows]);
}
__global__ void add_diagonal_kernel(std::int64_t n, double* S, std::int64_t ld, double v) {
  MLP_GRID_LOOP(i, n) S[i * ld + i] = __dadd_rn(S[i * ld + i], v);
}
__global__ void get_diagonal_kernel(std::int64_t n, const double* S, std::int64_t ld, double* out) {
  MLP_GRID_LOOP(i, n) out[i] = S[i * ld + i];
}
__global__ void set_diagonal_kernel(std::int64_t n, double* S, std::int64_t ld, const double* in) {
  MLP_GRID_LOOP(i, n) S[i * ld + i] = in[i];
}
// Element (i, j), i > j (lower) <-> (j, i) (upper); column-major: (i, j) at i + j*ld.
__global__ void mirror_kernel(std::int64_t n, double* S, std::int64_t ld, bool lower_to_upper) {
  MLP_GRID_LOOP(idx, n * n) {
    const std::int64_t i = idx % n, j = idx / n;
    if (i > j) {
      if (lower_to_upper)
        S[j + i * ld] = S[i + j * ld];
      else
        S[i + j * ld] = S[j + i * ld];
    }
  }
}
template <class T>
__global__ void flag_nonfinite_kernel(std::int64_t n, const T* x, int* flag) {
  MLP_GRID_LOOP(i, n) {
    if (!isfinite(x[i])) *flag = 1;
  }
}
__global__ void flag_nonzero_kernel(const int* info, int* flag) {
  if (*info != 0) *flag = 1;
}
__global__ void widen_kernel(std::int64_t n, const int* in, std::int64_t* out) {
  MLP_GRID_LOOP(i, n) out[i] = in[i];
}
__global__ void scale_rows_pinv_kernel(std::int64_t n, std::int64_t k, double* T, const double* w, double cut) {
  MLP_GRID_LOOP(idx, n * k) {
    const std::int64_t i = idx % n;
    const double inv = fabs(w[i]) > cut ? 1.0 / w[i] : 0.0;
    T[idx] = __dmul_rn(inv, T[idx]);
  }
}

}  // namespace

void normal_matrix(cudaStream_t s, std::int64_t rows, std::int64_t cols, std::uint64_t seed, std::uint64_t stream,
                   double scale, double* out) {
  if (rows * cols == 0) return;
  normal_matrix_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, seed, stream, scale, out);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp normal_matrix");
}

void normalize_columns(cudaStream_t s, std::int64_t rows, std::int64_t cols, double* M) {
  if (rows * cols == 0) return;
  normalize_columns_kernel<<<static_cast<unsigned>(cols), kThreads, 0, s>>>(rows, M);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp normalize_columns");
}

void hidden_combine(cudaStream_t s, std::int64_t rows, std::int64_t cols, double* H, const double* W,
                    const double* bu, const double* bg, int gate) {
  if (rows * cols == 0) return;
  hidden_combine_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, H, W, bu, bg, gate);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp hidden_combine");
}

void hadamard(cudaStream_t s, std::int64_t n, double* a, const double* b) {
  if (n == 0) return;
  hadamard_kernel<<<grid_for(n), kThreads, 0, s>>>(n, a, b);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp hadamard f64");
}
void hadamard(cudaStream_t s, std::int64_t n, float* a, const float* b) {
  if (n == 0) return;
  hadamard_kernel<<<grid_for(n), kThreads, 0, s>>>(n, a, b);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp hadamard f32");
}
void square(cudaStream_t s, std::int64_t n, double* x) {
  if (n == 0) return;
  square_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp square");
}
void convert(cudaStream_t s, std::int64_t n, const double* in, float* out) {
  if (n == 0) return;
  convert_kernel<<<grid_for(n), kThreads, 0, s>>>(n, in, out);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp convert f64->f32");
}
void convert(cudaStream_t s, std::int64_t n, const float* in, double* out) {
  if (n == 0) return;
  convert_kernel<<<grid_for(n), kThreads, 0, s>>>(n, in, out);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp convert f32->f64");
}
void convert(cudaStream_t s, std::int64_t n, const double* in, double* out) {
  if (n == 0) return;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<std::size_t>(n) * sizeof(double), cudaMemcpyDeviceToDevice, s));
}
void add_column_bias(cudaStream_t s, std::int64_t rows, std::int64_t cols, double* M, const double* bias) {
  if (rows * cols == 0) return;
  add_column_bias_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, M, bias);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp add_column_bias");
}
void add_diagonal(cudaStream_t s, std::int64_t n, double* S, std::int64_t ld, double v) {
  if (n == 0) return;
  add_diagonal_kernel<<<grid_for(n), kThreads, 0, s>>>(n, S, ld, v);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp add_diagonal");
}
void get_diagonal(cudaStream_t s, std::int64_t n, const double* S, std::int64_t ld, double* out) {
  if (n == 0) return;
  get_diagonal_kernel<<<grid_for(n), kThreads, 0, s>>>(n, S, ld, out);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp get_diagonal");
}
void set_diagonal(cudaStream_t s, std::int64_t n, double* S, std::int64_t ld, const double* in) {
  if (n == 0) return;
  set_diagonal_kernel<<<grid_for(n), kThreads, 0, s>>>(n, S, ld, in);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp set_diagonal");
}
void mirror_triangle(cudaStream_t s, std::int64_t n, double* S, std::int64_t ld, bool lower_to_upper) {
  if (n < 2) return;
  mirror_kernel<<<grid_for(n * n), kThreads, 0, s>>>(n, S, ld, lower_to_upper);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp mirror_triangle");
}
void flag_nonfinite(cudaStream_t s, std::int64_t n, const double* x, int* flag) {
  if (n == 0) return;
  flag_nonfinite_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x, flag);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp flag_nonfinite f64");
}
void flag_nonfinite(cudaStream_t s, std::int64_t n, const float* x, int* flag) {
  if (n == 0) return;
  flag_nonfinite_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x, flag);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp flag_nonfinite f32");
}
void flag_nonzero(cudaStream_t s, const int* info, int* flag) {
  flag_nonzero_kernel<<<1, 1, 0, s>>>(info, flag);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp flag_nonzero");
}
void widen_pivots(cudaStream_t s, std::int64_t n, const int* in, std::int64_t* out) {
  if (n == 0) return;
  widen_kernel<<<grid_for(n), kThreads, 0, s>>>(n, in, out);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp widen_pivots");
}
void scale_rows_pinv(cudaStream_t s, std::int64_t n, std::int64_t k, double* T, const double* w, double cut) {
  if (n * k == 0) return;
  scale_rows_pinv_kernel<<<grid_for(n * k), kThreads, 0, s>>>(n, k, T, w, cut);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp scale_rows_pinv");
}

}  // namespace memcap::mlp::cuda
