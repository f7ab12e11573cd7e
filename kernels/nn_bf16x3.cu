// Split-operand bf16 products (kernels/nn_bf16x3.cuh): the split kernel and the cuBLAS GEMMs. The cross-entropy
// that writes its gradient as two bf16 planes lives with the other CE kernels (nn_cross_entropy.cu).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/gpu.hpp"
#include "nn_bf16x3.cuh"
#include "nn_device.cuh"
#include "nn_layers.cuh"

namespace memcap::nn::cuda {

namespace {

// out row r: three segments of width Cp = split3_width(C) (zero beyond C): x_hi, then x_hi | x_lo (lo_last) or
// x_lo | x_hi. One thread per (r, segment column).
__global__ void split3_kernel(__nv_bfloat16* __restrict__ out, const float* __restrict__ x, std::int64_t R, int C,
                              int Cp, bool lo_last) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= R * Cp) return;
  const std::int64_t r = i / Cp;
  const int c = static_cast<int>(i - r * Cp);
  __nv_bfloat16 hi = __float2bfloat16_rn(0.f), lo = hi;
  if (c < C) {
    const float v = x[r * C + c];
    hi = __float2bfloat16_rn(v);
    lo = __float2bfloat16_rn(v - __bfloat162float(hi));
  }
  __nv_bfloat16* o = out + r * 3 * Cp + c;
  o[0] = hi;
  o[Cp] = lo_last ? hi : lo;
  o[2 * Cp] = lo_last ? lo : hi;
}

void gemm_bf16(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
               const __nv_bfloat16* A, int lda, const __nv_bfloat16* B, int ldb, float beta, float* C, int ldc) {
  const float alpha = 1.f;
  MEMCAP_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C,
                                   CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void split3_bf16(__nv_bfloat16* out, const float* x, std::int64_t R, std::int64_t C, bool lo_last,
                 cudaStream_t stream) {
  const int c = cublas_int(C, "bf16x3 split", "C"), cp = cublas_int(split3_width(C), "bf16x3 split", "C");
  cublas_int(3 * static_cast<std::int64_t>(cp), "bf16x3 split", "3C");
  if (R == 0 || c == 0) return;
  split3_kernel<<<dev::elem_blocks(R * cp), dev::kElemThreads, 0, stream>>>(out, x, R, c, cp, lo_last);
  MEMCAP_CUDA_CHECK_LAUNCH("split3_kernel");
}

void split3_linear_forward(float* out, __nv_bfloat16* inp3, const float* inp, const __nv_bfloat16* W3, std::int64_t N,
                           std::int64_t C, std::int64_t OC, cublasHandle_t h, cudaStream_t stream) {
  const char* what = "bf16x3 linear layer";
  const int n = cublas_int(N, what, "N"), oc = cublas_int(OC, what, "OC"),
            k3 = cublas_int(3 * split3_width(C), what, "3C");
  if (n == 0 || oc == 0) return;
  check_handle_stream(h, stream);
  split3_bf16(inp3, inp, N, C, true, stream);
  // out_cm (OC x N) = W3_cmᵀ (OC x 3Cp) · inp3_cm (3Cp x N): [W_hi|W_lo|W_hi]·[x_hi|x_hi|x_lo] summed over 3Cp.
  gemm_bf16(h, CUBLAS_OP_T, CUBLAS_OP_N, oc, n, k3, W3, k3, inp3, k3, 0.f, out, oc);
}

void split3_linear_backward_input(float* dinp, const __nv_bfloat16* dout_hi, const __nv_bfloat16* dout_lo,
                                  const __nv_bfloat16* W3, std::int64_t N, std::int64_t C, std::int64_t OC,
                                  cublasHandle_t h, cudaStream_t stream) {
  const char* what = "bf16x3 linear layer";
  const int n = cublas_int(N, what, "N"), c = cublas_int(C, what, "C"), oc = cublas_int(OC, what, "OC");
  const std::int64_t cp = split3_width(C);
  const int ld3 = cublas_int(3 * cp, what, "3C");
  if (n == 0 || c == 0) return;
  check_handle_stream(h, stream);
  if (oc == 0) {
    MEMCAP_CUDA_CHECK(cudaMemsetAsync(dinp, 0, static_cast<std::size_t>(N * C) * sizeof(float), stream));
    return;
  }
  // dinp_cm (C x N) = W_cm (C x OC) · dout_cm (OC x N), W_hi = W3[:, 0:C], W_lo = W3[:, Cp:Cp+C] (ld 3Cp):
  // W_hi·d_hi + W_lo·d_hi + W_hi·d_lo, accumulated in the fp32 output.
  const int ldd = cublas_int(split_plane_ld(OC), what, "OC");
  gemm_bf16(h, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, W3, ld3, dout_hi, ldd, 0.f, dinp, c);
  gemm_bf16(h, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, W3 + cp, ld3, dout_hi, ldd, 1.f, dinp, c);
  gemm_bf16(h, CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, W3, ld3, dout_lo, ldd, 1.f, dinp, c);
}

}  // namespace memcap::nn::cuda
