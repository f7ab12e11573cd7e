// Linear layer on the GPU (kernels/nn_layers.cuh; CPU reference nn::cpu::linear_* in src/nn/layers.cpp):
// cuBLAS GEMMs on row-major data (a row-major [R,C] array is a column-major C x R matrix), a bias
// broadcast kernel, and a bias-gradient column reduction with a fixed summation order.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <string>
#include <type_traits>

#include "core/gpu.hpp"
#include "nn_device.cuh"
#include "nn_layers.cuh"

namespace memcap::nn::cuda {

namespace {

template <class T>
__global__ void bias_add_kernel(T* __restrict__ out, const T* __restrict__ bias, std::int64_t N,
                                cuda_detail::FastDivmod OC) {
  const std::int64_t total = N * OC.divisor();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x)
    out[i] += bias[OC.mod(i)];  // no 64-bit division per element (fast_divmod.cuh)
}

// dbias[o] += Σ_n dout[n, o]: block (32, 32) owns 32 columns; thread (x, y) sums rows y, y+32, ... in
// order, then the 32 row-partials of a column are added in y order.
template <class T>
__global__ void bias_grad_kernel(T* __restrict__ dbias, const T* __restrict__ dout, std::int64_t N, std::int64_t OC) {
  __shared__ T part[32][33];
  const std::int64_t o = blockIdx.x * 32 + threadIdx.x;
  T s = 0;
  if (o < OC)
    for (std::int64_t n = threadIdx.y; n < N; n += 32) s += dout[n * OC + o];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    T t = 0;
    for (int y = 0; y < 32; ++y) t += part[y][threadIdx.x];
    dbias[o] += t;
  }
}

int to_int(std::int64_t v, const char* what) { return cublas_int(v, "linear layer", what); }

}  // namespace

int cublas_int(std::int64_t v, const char* layer, const char* what) {
  if (v < 0 || v > INT_MAX)
    cuda_detail::throw_user_error(std::string(layer) + ": " + what + " = " + std::to_string(v) +
                                  " is outside cuBLAS's 32-bit range; use smaller shapes");
  return static_cast<int>(v);
}

template <class T>
void gemm_cm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha, const T* A,
             int lda, const T* B, int ldb, T beta, T* C, int ldc) {
  if constexpr (std::is_same_v<T, float>)
    MEMCAP_CUBLAS_CHECK(cublasSgemm(h, ta, tb, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc));
  else
    MEMCAP_CUBLAS_CHECK(cublasDgemm(h, ta, tb, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc));
}
template void gemm_cm<float>(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, float, const float*,
                             int, const float*, int, float, float*, int);
template void gemm_cm<double>(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, double,
                              const double*, int, const double*, int, double, double*, int);

template <class T>
void gemm_rm(cublasHandle_t h, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, const T* A,
             const T* B, T* C, double beta) {
  // Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: swap the operands.
  gemm_cm<T>(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(N, "N"), to_int(M, "M"),
          to_int(K, "K"), T(1), B, to_int(tb ? K : N, "ldb"), A, to_int(ta ? M : K, "lda"), static_cast<T>(beta), C,
          to_int(N, "ldc"));
}
template void gemm_rm<float>(cublasHandle_t, bool, bool, std::int64_t, std::int64_t, std::int64_t, const float*,
                             const float*, float*, double);
template void gemm_rm<double>(cublasHandle_t, bool, bool, std::int64_t, std::int64_t, std::int64_t, const double*,
                              const double*, double*, double);

void check_handle_stream(cublasHandle_t h, cudaStream_t stream) {
  cudaStream_t bound = nullptr;
  MEMCAP_CUBLAS_CHECK(cublasGetStream(h, &bound));
  if (bound != stream)
    cuda_detail::throw_device_error(
        "nn::cuda: the cuBLAS handle is bound to another stream than the one the layer runs on "
        "(internal error: use the gpu::Handles of that stream)");
}

template <class T>
void linear_forward(T* out, const T* inp, const T* W, const T* bias, std::int64_t N, std::int64_t C,
                    std::int64_t OC, cublasHandle_t h, cudaStream_t stream) {
  const int n = to_int(N, "N"), c = to_int(C, "C"), oc = to_int(OC, "OC");
  if (n == 0 || oc == 0) return;
  check_handle_stream(h, stream);
  // out_cm (OC x N) = W_cmᵀ (OC x C) · inp_cm (C x N)
  gemm_cm<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, T(1), W, c > 0 ? c : 1, inp, c > 0 ? c : 1, T(0), out, oc);
  if (bias) {
    bias_add_kernel<T>
        <<<dev::elem_blocks(N * OC), dev::kElemThreads, 0, stream>>>(out, bias, N, cuda_detail::FastDivmod(OC));
    MEMCAP_CUDA_CHECK_LAUNCH("bias_add_kernel");
  }
}

template <class T>
void linear_backward(T* dinp, T* dW, T* dbias, const T* dout, const T* inp, const T* W, std::int64_t N,
                     std::int64_t C, std::int64_t OC, cublasHandle_t h, cudaStream_t stream) {
  const int n = to_int(N, "N"), c = to_int(C, "C"), oc = to_int(OC, "OC");
  check_handle_stream(h, stream);
  const int ldc = c > 0 ? c : 1, ldo = oc > 0 ? oc : 1;
  // dinp_cm (C x N) = W_cm (C x OC) · dout_cm (OC x N)
  if (dinp && n > 0 && c > 0) gemm_cm<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, T(1), W, ldc, dout, ldo, T(0), dinp, ldc);
  // dW_cm (C x OC) += inp_cm (C x N) · dout_cmᵀ (N x OC)
  if (dW && c > 0 && oc > 0) gemm_cm<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, T(1), inp, ldc, dout, ldo, T(1), dW, ldc);
  if (dbias && oc > 0 && n > 0) {
    const dim3 grid(static_cast<unsigned>((OC + 31) / 32)), block(32, 32);
    bias_grad_kernel<T><<<grid, block, 0, stream>>>(dbias, dout, N, OC);
    MEMCAP_CUDA_CHECK_LAUNCH("bias_grad_kernel");
  }
}

template <class T>
void gemm_cm_strided(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, std::int64_t M, std::int64_t N,
                     std::int64_t K, T alpha, const T* A, std::int64_t lda, std::int64_t sa, const T* B,
                     std::int64_t ldb, std::int64_t sb, T beta, T* C, std::int64_t ldc, std::int64_t sc,
                     std::int64_t batch) {
  const char* what = "strided-batched GEMM";
  const int m = cublas_int(M, what, "m"), n = cublas_int(N, what, "n"), k = cublas_int(K, what, "k"),
            b = cublas_int(batch, what, "batch"), la = cublas_int(lda, what, "lda"), lb = cublas_int(ldb, what, "ldb"),
            lc = cublas_int(ldc, what, "ldc");
  if (m == 0 || n == 0 || b == 0) return;
  if constexpr (std::is_same_v<T, float>)
    MEMCAP_CUBLAS_CHECK(cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, A, la, sa, B, lb, sb, &beta, C, lc, sc, b));
  else
    MEMCAP_CUBLAS_CHECK(cublasDgemmStridedBatched(h, ta, tb, m, n, k, &alpha, A, la, sa, B, lb, sb, &beta, C, lc, sc, b));
}
template void gemm_cm_strided<float>(cublasHandle_t, cublasOperation_t, cublasOperation_t, std::int64_t, std::int64_t,
                                     std::int64_t, float, const float*, std::int64_t, std::int64_t, const float*,
                                     std::int64_t, std::int64_t, float, float*, std::int64_t, std::int64_t,
                                     std::int64_t);
template void gemm_cm_strided<double>(cublasHandle_t, cublasOperation_t, cublasOperation_t, std::int64_t,
                                      std::int64_t, std::int64_t, double, const double*, std::int64_t, std::int64_t,
                                      const double*, std::int64_t, std::int64_t, double, double*, std::int64_t,
                                      std::int64_t, std::int64_t);


template <class T>
void linear_forward_batched(T* out, const T* inp, const T* W, std::int64_t batch, std::int64_t N, std::int64_t C,
                            std::int64_t OC, cublasHandle_t h, cudaStream_t stream) {
  const int n = to_int(N, "N"), c = to_int(C, "C"), oc = to_int(OC, "OC"), b = to_int(batch, "batch");
  if (n == 0 || oc == 0 || b == 0) return;
  check_handle_stream(h, stream);
  // out_cm[b] (OC x N) = W_cm[b]ᵀ (OC x C) · inp_cm (C x N); the input is shared (stride 0).
  gemm_cm_strided<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, T(1), W, c > 0 ? c : 1, static_cast<long long>(OC) * C, inp,
                  c > 0 ? c : 1, 0LL, T(0), out, oc, static_cast<long long>(N) * OC, b);
}

template <class T>
void linear_weight_grad_batched(T* dW, const T* dout, const T* inp, std::int64_t batch, std::int64_t N,
                                std::int64_t C, std::int64_t OC, cublasHandle_t h, cudaStream_t stream) {
  const int n = to_int(N, "N"), c = to_int(C, "C"), oc = to_int(OC, "OC"), b = to_int(batch, "batch");
  if (c == 0 || oc == 0 || b == 0) return;
  check_handle_stream(h, stream);
  // dW_cm[b] (C x OC) = inp_cm (C x N) · dout_cm[b]ᵀ (N x OC)
  gemm_cm_strided<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, T(1), inp, c, 0LL, dout, oc, static_cast<long long>(N) * OC,
                  T(0), dW, c, static_cast<long long>(OC) * C, b);
}

#define MEMCAP_NN_LINEAR(T)                                                                                    \
  template void linear_forward<T>(T*, const T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t,    \
                                  cublasHandle_t, cudaStream_t);                                               \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, std::int64_t, std::int64_t,        \
                                   std::int64_t, cublasHandle_t, cudaStream_t);                              \
  template void linear_forward_batched<T>(T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t,     \
                                          std::int64_t, cublasHandle_t, cudaStream_t);                          \
  template void linear_weight_grad_batched<T>(T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t, \
                                              std::int64_t, cublasHandle_t, cudaStream_t);
MEMCAP_NN_LINEAR(float)
MEMCAP_NN_LINEAR(double)
#undef MEMCAP_NN_LINEAR

}  // namespace memcap::nn::cuda
