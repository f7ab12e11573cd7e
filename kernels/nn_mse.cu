// Mean squared error on the GPU (kernels/nn_layers.cuh; CPU reference nn::cpu::mse_* in
// src/nn/layers.cpp). The loss is summed in double by one block in a fixed order (no atomics);
// the gradient is a grid-stride element-wise kernel.
#include <cuda_runtime.h>

#include "nn_device.cuh"
#include "nn_layers.cuh"

namespace memcap::nn::cuda {

namespace {

template <class T>
__global__ void __launch_bounds__(1024) mse_forward_kernel(const T* __restrict__ y, const T* __restrict__ t,
                                                           std::int64_t n, double* loss) {
  __shared__ double s_sum[32];
  double s = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double e = static_cast<double>(y[i]) - static_cast<double>(t[i]);
    s += e * e;
  }
  s = dev::block_sum(s, s_sum);
  if (threadIdx.x == 0) *loss = s / static_cast<double>(n);
}

template <class T>
__global__ void mse_backward_kernel(T* dy, const T* y, const T* t, std::int64_t n, T scale) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    dy[i] = (y[i] - t[i]) * scale;
}

void check_nd(std::int64_t N, std::int64_t D) {
  if (N < 1 || D < 1)
    cuda_detail::throw_user_error("MSE needs a non-empty N x D output (got " + std::to_string(N) + " x " +
                                  std::to_string(D) + ")");
}

}  // namespace

template <class T>
void mse_forward(const T* y, const T* t, std::int64_t N, std::int64_t D, double* loss, cudaStream_t stream) {
  check_nd(N, D);
  mse_forward_kernel<T><<<1, 1024, 0, stream>>>(y, t, N * D, loss);
  MEMCAP_CUDA_CHECK_LAUNCH("mse_forward_kernel");
}

template <class T>
void mse_backward(T* dy, const T* y, const T* t, std::int64_t N, std::int64_t D, double dloss, cudaStream_t stream) {
  check_nd(N, D);
  const std::int64_t n = N * D;
  const T scale = static_cast<T>(2.0 * dloss / static_cast<double>(n));
  mse_backward_kernel<T><<<dev::elem_blocks(n), dev::kElemThreads, 0, stream>>>(dy, y, t, n, scale);
  MEMCAP_CUDA_CHECK_LAUNCH("mse_backward_kernel");
}

#define MEMCAP_NN_MSE(T)                                                                                  \
  template void mse_forward<T>(const T*, const T*, std::int64_t, std::int64_t, double*, cudaStream_t);   \
  template void mse_backward<T>(T*, const T*, const T*, std::int64_t, std::int64_t, double, cudaStream_t);
MEMCAP_NN_MSE(float)
MEMCAP_NN_MSE(double)
#undef MEMCAP_NN_MSE

}  // namespace memcap::nn::cuda
