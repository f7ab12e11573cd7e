// CUDA sequence-model layers of the MQAR language model (src/kata/mqar_model_cuda.cpp), the device twins
// of the CPU float64 references of the same names in nn::cpu (nn/layernorm.hpp, nn/rmsnorm_gain.hpp,
// nn/embedding.hpp, nn/causal_conv.hpp) and of the ℓ2 row norm of kata::mqar (mqar_mixers.hpp), plus the
// element-wise glue of the model (sigmoid, residual add, BaseConv gating, row gather / scatter).
// Host-side declarations only; float and double; every function runs on `stream`, allocates nothing and
// never synchronises, so a training step that calls them can be captured in a CUDA graph.
//
// Determinism: no floating-point atomics. Row statistics: one warp per row, fixed shuffle trees.
// Parameter gradients that sum over rows (LayerNorm / RMSNorm gains and biases, conv weights and biases)
// use a two-stage column reduction: fixed chunks of kColChunkRows rows summed in float64 into `scratch`
// ([chunks, columns] doubles, seq_col_scratch_elems), then the chunks summed in order and ADDED to the
// gradient. The embedding backward sorts the token ids (CUB stable radix sort, deterministic) and sums
// each token's rows in position order onto its table row (the CPU reference's order, bit for bit in
// float64). Backward functions OVERWRITE input gradients and ADD into parameter gradients, as nn::cpu.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace memcap::nn::cuda {

constexpr std::int64_t kColChunkRows = 256;  // rows per chunk of the deterministic column reductions

// Doubles of scratch a column reduction over N rows and `cols` columns needs (the largest of a step's
// reductions sizes one shared scratch: LayerNorm C, RMSNorm C, conv C·K).
std::size_t seq_col_scratch_elems(std::int64_t N, std::int64_t cols);

// out[c] += Σ_n x[n, c] over row-major [N, cols] (a bias gradient) by the two-stage column reduction above;
// scratch: seq_col_scratch_elems(N, cols) doubles. Many more blocks than nn_layers' one-stage bias gradient.
template <class T>
void column_sums_add(T* out, const T* x, std::int64_t N, std::int64_t cols, double* scratch, cudaStream_t stream);

// ---- LayerNorm (nn::cpu::layernorm_*): rows N of width C; mean / rstd [N] kept (may be null).
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, std::int64_t N,
                       std::int64_t C, double eps, cudaStream_t stream);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, std::int64_t N, std::int64_t C, double* scratch, cudaStream_t stream);
// Fused with the residual add around them (nn::cpu::add_layernorm_forward / layernorm_backward_add, same
// results bit for bit as residual_add + layernorm_*): sum = a + b then out = LayerNorm(sum), one pass (sum may
// alias a or b); dinp = add + LayerNorm's input gradient (dinp may alias add or dout).
template <class T>
void add_layernorm_forward(T* sum, T* out, T* mean, T* rstd, const T* a, const T* b, const T* weight, const T* bias,
                           std::int64_t N, std::int64_t C, double eps, cudaStream_t stream);
template <class T>
void layernorm_backward_add(T* dinp, T* dweight, T* dbias, const T* add, const T* dout, const T* inp, const T* weight,
                            const T* mean, const T* rstd, std::int64_t N, std::int64_t C, double* scratch,
                            cudaStream_t stream);

// ---- RMSNorm with gain (nn::cpu::rmsnorm_gain_*): rows N of width C (the per-head norm: N·H rows of d_head).
template <class T>
void rmsnorm_gain_forward(T* out, T* rstd, const T* inp, const T* weight, std::int64_t N, std::int64_t C, double eps,
                          cudaStream_t stream);
template <class T>
void rmsnorm_gain_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd,
                           std::int64_t N, std::int64_t C, double* scratch, cudaStream_t stream);

// ---- embedding (nn::cpu::embedding_*). Tokens must lie in [0, V) (the host validates them).
template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* table, std::int64_t N, std::int64_t V,
                       std::int64_t C, cudaStream_t stream);
std::size_t embedding_backward_workspace_bytes(std::int64_t N, std::int64_t V);
// dtable[tokens[n],:] += dout[n,:], rows added in n order per token. workspace: embedding_backward_workspace_bytes.
template <class T>
void embedding_backward(T* dtable, const std::int32_t* tokens, const T* dout, std::int64_t N, std::int64_t V,
                        std::int64_t C, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

// ---- depthwise causal conv (nn::cpu::causal_conv_*), [B, T, C] rows, weight [C, K], bias may be null.
template <class T>
void causal_conv_forward(T* out, const T* inp, const T* weight, const T* bias, std::int64_t B, std::int64_t Tlen,
                         std::int64_t C, std::int64_t K, cudaStream_t stream);
template <class T>
void causal_conv_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::int64_t B,
                          std::int64_t Tlen, std::int64_t C, std::int64_t K, double* scratch, cudaStream_t stream);

// ---- ℓ2 row norm (kata::mqar::l2norm_rows_*): out = x / sqrt(‖x‖² + eps), rstd [N] kept.
template <class T>
void l2norm_rows_forward(T* out, T* rstd, const T* inp, std::int64_t N, std::int64_t C, double eps,
                         cudaStream_t stream);
// dinp = rstd·dout − rstd³ (x·dout) x (overwritten).
template <class T>
void l2norm_rows_backward(T* dinp, const T* dout, const T* inp, const T* rstd, std::int64_t N, std::int64_t C,
                          cudaStream_t stream);

// ---- element-wise glue (in place allowed: an output may alias an input of the same index).
template <class T>
void sigmoid_forward(T* y, const T* x, std::int64_t n, cudaStream_t stream);  // y = σ(x)
template <class T>
void sigmoid_backward(T* dx, const T* dy, const T* y, std::int64_t n, cudaStream_t stream);  // dx = dy·y(1−y)
template <class T>
void residual_add(T* out, const T* a, const T* b, std::int64_t n, cudaStream_t stream);  // out = a + b
// BaseConv: y = conv ⊙ proj + x; backward dconv = dy ⊙ proj, dproj = dy ⊙ conv.
template <class T>
void baseconv_gate_forward(T* y, const T* conv, const T* proj, const T* x, std::int64_t n, cudaStream_t stream);
template <class T>
void baseconv_gate_backward(T* dconv, T* dproj, const T* dy, const T* conv, const T* proj, std::int64_t n,
                            cudaStream_t stream);

// ---- labelled rows: out[a,:] = src[rows[a],:]; dst[rows[a],:] += in[a,:] (rows distinct: no conflicts).
template <class T>
void gather_rows(T* out, const T* src, const std::int64_t* rows, std::int64_t n, std::int64_t C, cudaStream_t stream);
template <class T>
void scatter_add_rows(T* dst, const std::int64_t* rows, const T* in, std::int64_t n, std::int64_t C,
                      cudaStream_t stream);

}  // namespace memcap::nn::cuda
