// Target-residual optimization of the local editors on the GPU (kernels/nn_edit_residual.cuh).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/gpu.hpp"
#include "nn_device.cuh"
#include "nn_edit_residual.cuh"

namespace memcap::nn::cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void gather_rows_kernel(double* out, const T* in, const std::int32_t* rows, std::int64_t B,
                                   std::int64_t w) {
  const std::int64_t n = B * w;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / w, j = i - b * w;
    out[i] = static_cast<double>(in[static_cast<std::int64_t>(rows[b]) * w + j]);
  }
}

template <class T>
__global__ void residual_check_kernel(const T* losses, const std::int32_t* rows, std::int64_t B, double early_stop,
                                      std::int64_t step, std::int32_t* active, double* loss, std::int32_t* bad_step,
                                      std::int32_t* counts) {
  __shared__ int n_active, n_bad;
  if (threadIdx.x == 0) n_active = 0, n_bad = 0;
  __syncthreads();
  int my_active = 0, my_bad = 0;
  for (std::int64_t b = threadIdx.x; b < B; b += blockDim.x) {
    const double l = static_cast<double>(losses[rows[b]]);
    loss[b] = l;
    if (!isfinite(l)) {
      ++my_bad;
      if (bad_step[b] < 0) bad_step[b] = static_cast<std::int32_t>(step);
    }
    if (early_stop > 0 && l < early_stop) active[b] = 0;
    my_active += active[b] != 0;
  }
  atomicAdd(&n_active, my_active);
  atomicAdd(&n_bad, my_bad);
  __syncthreads();
  if (threadIdx.x == 0) counts[0] = n_active, counts[1] = n_bad;
}

template <class T>
__global__ void residual_adam_kernel(double* r, double* m, double* v, T* f_add, const T* g_f,
                                     const std::int32_t* rows, const std::int32_t* active, const double* limit,
                                     std::int64_t d, double g_scale, double lr, double beta1, double beta2,
                                     double eps, double wd, double step_size, double bc2_sqrt, bool clip) {
  const std::int64_t b = blockIdx.x;
  double* rb = r + b * d;
  const std::int64_t row = rows[b];
  if (active[b]) {
    double* mb = m + b * d;
    double* vb = v + b * d;
    const T* gb = g_f + row * d;
    const double w1 = 1.0 - beta1, w2 = 1.0 - beta2;
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      double gi = g_scale * static_cast<double>(gb[j]);
      if (wd != 0) gi += wd * rb[j];
      const double mi = w1 < 0.5 ? mb[j] + w1 * (gi - mb[j]) : gi - (gi - mb[j]) * (1.0 - w1);  // torch lerp
      const double vi = vb[j] * beta2 + w2 * gi * gi;
      mb[j] = mi;
      vb[j] = vi;
      rb[j] -= step_size * (mi / (sqrt(vi) / bc2_sqrt + eps));
    }
    if (clip) {  // ||r_b|| as max |r| sqrt(Σ (r / max)²): a huge --edit-lr would overflow Σ r² (and clip r to 0)
      __shared__ double part[kThreads];
      double mx = 0;
      for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) mx = fmax(mx, fabs(rb[j]));
      part[threadIdx.x] = mx;
      __syncthreads();
      for (int k = kThreads / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) part[threadIdx.x] = fmax(part[threadIdx.x], part[threadIdx.x + k]);
        __syncthreads();
      }
      mx = part[0];
      __syncthreads();
      double s = 0;
      if (mx > 0)
        for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) s += (rb[j] / mx) * (rb[j] / mx);
      part[threadIdx.x] = s;
      __syncthreads();
      for (int k = kThreads / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
      }
      const double nrm = mx * sqrt(part[0]), lim = limit[b];
      if (nrm > lim && nrm > 0) {
        const double scale = lim / nrm;
        for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) rb[j] *= scale;
      }
    }
  }
  T* fb = f_add + row * d;
  for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) fb[j] = static_cast<T>(rb[j]);
}

}  // namespace

template <class T>
void edit_gather_rows(double* out, const T* in, const std::int32_t* rows, std::int64_t B, std::int64_t w,
                      cudaStream_t stream) {
  if (B <= 0 || w <= 0) return;
  gather_rows_kernel<T><<<dev::elem_blocks(B * w), dev::kElemThreads, 0, stream>>>(out, in, rows, B, w);
  MEMCAP_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

template <class T>
void edit_residual_check(const T* losses, const std::int32_t* rows, std::int64_t B, double early_stop,
                         std::int64_t step, std::int32_t* active, double* loss, std::int32_t* bad_step,
                         std::int32_t* counts, cudaStream_t stream) {
  if (B <= 0) cuda_detail::throw_user_error("edit_residual_check: no facts");
  residual_check_kernel<T><<<1, kThreads, 0, stream>>>(losses, rows, B, early_stop, step, active, loss, bad_step,
                                                       counts);
  MEMCAP_CUDA_CHECK_LAUNCH("residual_check_kernel");
}

template <class T>
void edit_residual_adam(double* r, double* m, double* v, T* f_add, const T* g_f, const std::int32_t* rows,
                        const std::int32_t* active, const double* limit, std::int64_t B, std::int64_t d,
                        double g_scale, double lr, double beta1, double beta2, double eps, double weight_decay,
                        std::int64_t t, bool clip, cudaStream_t stream) {
  if (t < 1) cuda_detail::throw_user_error("edit_residual_adam: step t must be >= 1");
  if (B <= 0 || d <= 0) return;
  const double step_size = lr / (1.0 - std::pow(beta1, static_cast<double>(t)));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t)));
  residual_adam_kernel<T><<<static_cast<unsigned>(B), kThreads, 0, stream>>>(
      r, m, v, f_add, g_f, rows, active, limit, d, g_scale, lr, beta1, beta2, eps, weight_decay, step_size, bc2_sqrt,
      clip);
  MEMCAP_CUDA_CHECK_LAUNCH("residual_adam_kernel");
}

#define MEMCAP_NN_EDIT_RESIDUAL_INSTANTIATE(T)                                                                     \
  template void edit_gather_rows<T>(double*, const T*, const std::int32_t*, std::int64_t, std::int64_t,           \
                                    cudaStream_t);                                                                \
  template void edit_residual_check<T>(const T*, const std::int32_t*, std::int64_t, double, std::int64_t,         \
                                       std::int32_t*, double*, std::int32_t*, std::int32_t*, cudaStream_t);       \
  template void edit_residual_adam<T>(double*, double*, double*, T*, const T*, const std::int32_t*,               \
                                      const std::int32_t*, const double*, std::int64_t, std::int64_t, double,     \
                                      double, double, double, double, double, std::int64_t, bool, cudaStream_t);
MEMCAP_NN_EDIT_RESIDUAL_INSTANTIATE(float)
MEMCAP_NN_EDIT_RESIDUAL_INSTANTIATE(double)
#undef MEMCAP_NN_EDIT_RESIDUAL_INSTANTIATE

}  // namespace memcap::nn::cuda
