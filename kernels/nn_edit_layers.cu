// GELU, RoPE, low-rank path and router mix of the §6.4 block on the GPU (kernels/nn_edit_layers.cuh;
// CPU reference src/nn/edit_layers.cpp). Element-wise grid-stride kernels (every element read before
// its output is written, so in-place use works), cuBLAS GEMMs for the low-rank path, one warp per row
// for the router's gate gradient (fixed shuffle tree).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <string>
#include <type_traits>

#include "core/gpu.hpp"
#include "nn_device.cuh"
#include "nn_edit_layers.cuh"
#include "nn_layers.cuh"  // check_handle_stream

namespace memcap::nn::cuda {

namespace {

#define MEMCAP_EDIT_GRID_STRIDE(i, n)                                                          \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (n);        \
       i += std::int64_t(gridDim.x) * blockDim.x)

__device__ __forceinline__ float erf_(float x) { return erff(x); }
__device__ __forceinline__ double erf_(double x) { return erf(x); }

template <class T>
__global__ void gelu_fwd_kernel(T* y, const T* x, std::int64_t n) {
  MEMCAP_EDIT_GRID_STRIDE(i, n) {
    const T v = x[i];
    y[i] = T(0.5) * v * (T(1) + erf_(v * T(0.70710678118654752440)));
  }
}

template <class T>
__global__ void gelu_bwd_kernel(T* dx, const T* dy, const T* x, std::int64_t n) {
  MEMCAP_EDIT_GRID_STRIDE(i, n) {
    const T v = x[i], d = dy[i];
    const T cdf = T(0.5) * (T(1) + erf_(v * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * dev::exp_(T(-0.5) * v * v);
    dx[i] = d * (cdf + v * pdf);
  }
}

// One thread per (row, j < dh/2) pair; rows are [B·T·H] of dh, token t = (row / H) mod T.
template <class T>
__global__ void rope_kernel(T* out, const T* inp, std::int64_t rows, std::int64_t Tn, std::int64_t H,
                            std::int64_t dh, std::int64_t ld, double base, double sign) {
  const std::int64_t half = dh / 2;
  MEMCAP_EDIT_GRID_STRIDE(i, rows * half) {
    const std::int64_t j = i % half, row = i / half, token = row / H, t = token % Tn;
    const double theta = static_cast<double>(t) * pow(base, -2.0 * static_cast<double>(j) / static_cast<double>(dh));
    double s, c;
    sincos(theta, &s, &c);
    s *= sign;
    const std::int64_t o = token * ld + (row % H) * dh + j;  // ld = H·dh: contiguous rows
    const double x1 = inp[o], x2 = inp[o + half];
    out[o] = static_cast<T>(x1 * c - x2 * s);
    out[o + half] = static_cast<T>(x2 * c + x1 * s);
  }
}

template <class T>
__global__ void router_mix_fwd_kernel(T* out, T* alpha, const T* z, const T* f, const T* l, std::int64_t N,
                                      cuda_detail::FastDivmod C) {
  MEMCAP_EDIT_GRID_STRIDE(i, N * C.divisor()) {
    std::int64_t n, c;
    C.divmod(i, n, c);
    const T a = dev::sigmoid(z[n]);
    const T fi = f[i], li = l[i];
    if (c == 0) alpha[n] = a;
    out[i] = a * fi + (T(1) - a) * li;
  }
}

// One warp per row: lane c0 sums c = c0, c0 + 32, ... in order (double), then the fixed shuffle tree.
template <class T>
__global__ void router_mix_bwd_kernel(T* dz, T* df, T* dl, const T* dout, const T* alpha, const T* f, const T* l,
                                      std::int64_t N, std::int64_t C) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = (std::int64_t(gridDim.x) * blockDim.x) >> 5;
  for (std::int64_t n = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) >> 5; n < N; n += warps) {
    const T a = alpha[n];
    double s = 0;
    for (std::int64_t c = lane; c < C; c += 32) {
      const std::int64_t i = n * C + c;
      const T g = dout[i];
      s += static_cast<double>(g) * (static_cast<double>(f[i]) - static_cast<double>(l[i]));
      if (df) df[i] = a * g;
      if (dl) dl[i] = (T(1) - a) * g;
    }
    s = dev::warp_sum(s);
    if (lane == 0 && dz) dz[n] = static_cast<T>(static_cast<double>(a) * (1.0 - static_cast<double>(a)) * s);
  }
}

int to_int(std::int64_t v, const char* what) { return cublas_int(v, "low-rank layer", what); }

void check_shape(bool ok, const std::string& what) {
  if (!ok) cuda_detail::throw_user_error(what);
}

}  // namespace

template <class T>
void gelu_forward(T* y, const T* x, std::int64_t n, cudaStream_t stream) {
  check_shape(n >= 0, "gelu: negative size");
  if (n == 0) return;
  gelu_fwd_kernel<T><<<dev::elem_blocks(n), dev::kElemThreads, 0, stream>>>(y, x, n);
  MEMCAP_CUDA_CHECK_LAUNCH("gelu_fwd_kernel");
}

template <class T>
void gelu_backward(T* dx, const T* dy, const T* x, std::int64_t n, cudaStream_t stream) {
  check_shape(n >= 0, "gelu: negative size");
  if (n == 0) return;
  gelu_bwd_kernel<T><<<dev::elem_blocks(n), dev::kElemThreads, 0, stream>>>(dx, dy, x, n);
  MEMCAP_CUDA_CHECK_LAUNCH("gelu_bwd_kernel");
}

namespace {
template <class T>
void rope_launch(T* out, const T* inp, std::int64_t ld, std::int64_t B, std::int64_t Tn, std::int64_t H,
                 std::int64_t dh, double base, double sign, cudaStream_t stream) {
  check_shape(B >= 0 && Tn >= 0 && H >= 0 && dh >= 2 && dh % 2 == 0,
              "rope: bad shape B = " + std::to_string(B) + ", T = " + std::to_string(Tn) + ", H = " +
                  std::to_string(H) + ", dh = " + std::to_string(dh) + " (dh must be even)");
  check_shape(ld >= H * dh, "rope: row stride " + std::to_string(ld) + " below H·dh = " + std::to_string(H * dh));
  check_shape(base > 0, "rope: base must be positive");
  const std::int64_t rows = B * Tn * H;
  if (rows == 0) return;
  rope_kernel<T><<<dev::elem_blocks(rows * (dh / 2)), dev::kElemThreads, 0, stream>>>(out, inp, rows, Tn, H, dh, ld,
                                                                                      base, sign);
  MEMCAP_CUDA_CHECK_LAUNCH("rope_kernel");
}
}  // namespace

template <class T>
void rope_forward(T* out, const T* inp, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dh, double base,
                  cudaStream_t stream) {
  rope_launch(out, inp, H * dh, B, Tn, H, dh, base, 1.0, stream);
}

template <class T>
void rope_forward_ld(T* out, const T* inp, std::int64_t ld, std::int64_t B, std::int64_t Tn, std::int64_t H,
                     std::int64_t dh, double base, cudaStream_t stream) {
  rope_launch(out, inp, ld, B, Tn, H, dh, base, 1.0, stream);
}

template <class T>
void rope_backward_ld(T* dinp, const T* dout, std::int64_t ld, std::int64_t B, std::int64_t Tn, std::int64_t H,
                      std::int64_t dh, double base, cudaStream_t stream) {
  rope_launch(dinp, dout, ld, B, Tn, H, dh, base, -1.0, stream);
}

template <class T>
void rope_backward(T* dinp, const T* dout, std::int64_t B, std::int64_t Tn, std::int64_t H, std::int64_t dh,
                   double base, cudaStream_t stream) {
  rope_launch(dinp, dout, H * dh, B, Tn, H, dh, base, -1.0, stream);
}

template <class T>
void lowrank_forward(T* out, T* mid, const T* inp, const T* U, const T* V, std::int64_t N, std::int64_t C,
                     std::int64_t R, cublasHandle_t h, cudaStream_t stream) {
  check_shape(C >= 1 && R >= 1, "lowrank: C and R must be positive");
  const int n = to_int(N, "N"), c = to_int(C, "C"), r = to_int(R, "R");
  if (n == 0) return;
  check_handle_stream(h, stream);
  gemm_cm<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, r, n, c, T(1), U, r, inp, c, T(0), mid, r);   // mid_cm = U_cm · inp_cm
  gemm_cm<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, c, n, r, T(1), V, c, mid, r, T(0), out, c);   // out_cm = V_cm · mid_cm
}

template <class T>
void lowrank_backward(T* dinp, T* dU, T* dV, T* dmid, const T* dout, const T* inp, const T* mid, const T* U,
                      const T* V, std::int64_t N, std::int64_t C, std::int64_t R, cublasHandle_t h,
                      cudaStream_t stream) {
  check_shape(C >= 1 && R >= 1, "lowrank: C and R must be positive");
  const int n = to_int(N, "N"), c = to_int(C, "C"), r = to_int(R, "R");
  if (n == 0) return;
  check_handle_stream(h, stream);
  gemm_cm<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, r, n, c, T(1), V, c, dout, c, T(0), dmid, r);  // dmid_cm = V_cmᵀ · dout_cm
  if (dV) gemm_cm<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, c, r, n, T(1), dout, c, mid, r, T(1), dV, c);   // dV_cm += dout_cm · mid_cmᵀ
  if (dU) gemm_cm<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, r, c, n, T(1), dmid, r, inp, c, T(1), dU, r);   // dU_cm += dmid_cm · inp_cmᵀ
  if (dinp) gemm_cm<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, c, n, r, T(1), U, r, dmid, r, T(0), dinp, c);  // dinp_cm = U_cmᵀ · dmid_cm
}

template <class T>
void router_mix_forward(T* out, T* alpha, const T* z, const T* f, const T* l, std::int64_t N, std::int64_t C,
                        cudaStream_t stream) {
  check_shape(N >= 0 && C >= 1, "router_mix: bad shape");
  if (N == 0) return;
  router_mix_fwd_kernel<T><<<dev::elem_blocks(N * C), dev::kElemThreads, 0, stream>>>(out, alpha, z, f, l, N,
                                                                                        cuda_detail::FastDivmod(C));
  MEMCAP_CUDA_CHECK_LAUNCH("router_mix_fwd_kernel");
}

template <class T>
void router_mix_backward(T* dz, T* df, T* dl, const T* dout, const T* alpha, const T* f, const T* l, std::int64_t N,
                         std::int64_t C, cudaStream_t stream) {
  check_shape(N >= 0 && C >= 1, "router_mix: bad shape");
  if (N == 0) return;
  router_mix_bwd_kernel<T><<<dev::elem_blocks(N * 32), dev::kElemThreads, 0, stream>>>(dz, df, dl, dout, alpha, f, l,
                                                                                       N, C);
  MEMCAP_CUDA_CHECK_LAUNCH("router_mix_bwd_kernel");
}

#define MEMCAP_NN_EDIT_INSTANTIATE(T)                                                                            \
  template void gelu_forward<T>(T*, const T*, std::int64_t, cudaStream_t);                                      \
  template void gelu_backward<T>(T*, const T*, const T*, std::int64_t, cudaStream_t);                           \
  template void rope_forward<T>(T*, const T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, double,   \
                                cudaStream_t);                                                                   \
  template void rope_backward<T>(T*, const T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, double,  \
                                 cudaStream_t);                                                                  \
  template void rope_forward_ld<T>(T*, const T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,        \
                                   std::int64_t, double, cudaStream_t);                                          \
  template void rope_backward_ld<T>(T*, const T*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,       \
                                    std::int64_t, double, cudaStream_t);                                         \
  template void lowrank_forward<T>(T*, T*, const T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t, \
                                   cublasHandle_t, cudaStream_t);                                                \
  template void lowrank_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*, const T*, std::int64_t, \
                                    std::int64_t, std::int64_t, cublasHandle_t, cudaStream_t);                   \
  template void router_mix_forward<T>(T*, T*, const T*, const T*, const T*, std::int64_t, std::int64_t,         \
                                      cudaStream_t);                                                             \
  template void router_mix_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, std::int64_t,        \
                                       std::int64_t, cudaStream_t);
MEMCAP_NN_EDIT_INSTANTIATE(float)
MEMCAP_NN_EDIT_INSTANTIATE(double)
#undef MEMCAP_NN_EDIT_INSTANTIATE

}  // namespace memcap::nn::cuda
