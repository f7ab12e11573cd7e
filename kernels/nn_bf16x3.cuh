// Split-operand bf16 products ("bf16x3", the GD trainer's precision bf16x3): a float32 operand is written as
// A = A_hi + A_lo with A_hi = bf16(A) and A_lo = bf16(A − A_hi) (round to nearest even both times), and a product
// A B is formed on the bf16 tensor cores as A_hi B_hi + A_hi B_lo + A_lo B_hi with fp32 accumulation (the
// A_lo B_lo term, ~2^-16 relative, is dropped). About 16 significant bits of each operand survive, against 8
// for one bf16 pass and 24 for float32: relative error of a 300 x 64 x 200 product against float64 4.8e-6
// (one pass 2.6e-3, float32 3.8e-7; experiments/bench/gd_bf16_emulation.py), and in the emulation the GD
// model trains as in float32 when its two logit products are formed this way (docs/perf.md, thirty-fifth
// session). CPU reference: the float64 product (tests/gpu/test_nn_layers.cpp checks the tolerance).
//
// The products are cuBLAS GEMMs (cublasGemmEx, bf16 inputs, fp32 output, CUBLAS_COMPUTE_32F): the three passes
// of a product with a short inner dimension run as one GEMM over the concatenated inner dimension,
//   Z = Y Wᵀ = [Y_hi | Y_hi | Y_lo] · [W_hi | W_lo | W_hi]ᵀ   (K = 3C),
// and those with a long inner dimension (the gradient through the logits) as three GEMMs accumulating into one
// fp32 output. Row-major buffers as in nn_layers.cuh; the handle must be bound to the stream.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace memcap::nn::cuda {

// Segment width of a split row: Cp = C rounded up to a multiple of 8, so that every segment and row starts on
// 16 bytes (cuBLAS's tensor-core kernels want aligned operands); the padding is zero, which adds nothing.
inline std::int64_t split3_width(std::int64_t C) { return (C + 7) / 8 * 8; }
// Row stride of a gradient plane of width P: rounded up the same way (entries beyond P are never read).
inline std::int64_t split_plane_ld(std::int64_t P) { return split3_width(P); }

// out [R][3Cp] (bf16) from x [R][C] (float): each row [x_hi | x_hi | x_lo] (lo_last, the "left" operand layout)
// or [x_hi | x_lo | x_hi] (!lo_last, the "right" operand layout of split3_linear_forward's W3), Cp = split3_width(C).
void split3_bf16(__nv_bfloat16* out, const float* x, std::int64_t R, std::int64_t C, bool lo_last,
                 cudaStream_t stream);

// out[N,OC] = inp[N,C] · W[OC,C]ᵀ in bf16x3: inp3 [N][3Cp] is scratch (written here from inp, lo_last layout),
// W3 [OC][3Cp] the weight in the !lo_last layout (split3_bf16(W3, W, OC, C, false) once while W is constant).
void split3_linear_forward(float* out, __nv_bfloat16* inp3, const float* inp, const __nv_bfloat16* W3, std::int64_t N,
                           std::int64_t C, std::int64_t OC, cublasHandle_t h, cudaStream_t stream);

// dinp[N,C] = dout[N,OC] · W[OC,C] in bf16x3 (overwritten), with dout given as its planes dout_hi, dout_lo
// ([N][ld] bf16 each, ld = split_plane_ld(OC); cross_entropy_forward_backward_split writes them) and W as
// split3_linear_forward's W3.
void split3_linear_backward_input(float* dinp, const __nv_bfloat16* dout_hi, const __nv_bfloat16* dout_lo,
                                  const __nv_bfloat16* W3, std::int64_t N, std::int64_t C, std::int64_t OC,
                                  cublasHandle_t h, cudaStream_t stream);

// cross_entropy_forward_backward (float) that writes dlogits as its two bf16 planes [N][split_plane_ld(P)]:
// d_hi = bf16(g), d_lo = bf16(g − d_hi), g the float gradient cross_entropy_forward_backward would write (the
// same per-row formulas, bit for bit). losses, correct, *loss_mean, *n_correct as there.
void cross_entropy_forward_backward_split(__nv_bfloat16* d_hi, __nv_bfloat16* d_lo, float* losses,
                                          const float* logits, const std::int32_t* targets, std::int64_t N,
                                          std::int64_t P, std::uint8_t* correct, double* loss_mean,
                                          std::int64_t* n_correct, double dloss, cudaStream_t stream);

}  // namespace memcap::nn::cuda
