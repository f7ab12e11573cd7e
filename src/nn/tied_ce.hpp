// Tied-embedding logits + softmax cross-entropy over a large vocabulary without the N×V logit matrix
// (the output layer of the fact-editing LM, spec hebbian.md §6.4: logits = E o, V ≈ 32,815, d = 256).
// Logits z[n,j] = X[n,:]·E[j,:] are formed tile by tile (rows × vocabulary columns); the forward keeps a
// per-row online log-sum-exp and argmax, the backward recomputes each tile. CPU, templated on the
// scalar (double = the float64 reference), single-threaded; kernels/nn_edit_layers.cuh has the CUDA
// version (cuBLAS tiles into a bounded scratch). Rows whose target is kIgnoreLabel are skipped.
#pragma once
#include <cstdint>

namespace memcap::nn {

inline constexpr std::int32_t kIgnoreLabel = -100;  // PyTorch's ignore_index; padding labels of §4.9

namespace cpu {

// losses[n] = logsumexp_j z[n,j] − z[n,target[n]] (0 for ignored rows), lse[n] = logsumexp_j z[n,j] (every
// row; kept for the backward), argmax[n] = argmax_j z[n,j] (smallest index on ties; every row; may be
// null). Returns the mean loss over the rows whose target is not ignored (0 when there are none) and
// writes their count to *n_valid (may be null). UserError for a target outside [0, V) other than
// kIgnoreLabel, or V < 1.
template <class T>
double tied_logits_ce_forward(T* losses, T* lse, std::int32_t* argmax, const T* X, const T* E,
                              const std::int32_t* targets, std::int64_t N, std::int64_t V, std::int64_t C,
                              std::int64_t* n_valid);
// With g[n,j] = (softmax(z[n,:])_j − [j = target[n]])·scale for non-ignored rows and 0 for ignored ones
// (scale = dloss / n_valid for the mean loss): dX = g·E (overwritten; null skips), dE += gᵀ·X (null
// skips). lse from the forward.
template <class T>
void tied_logits_ce_backward(T* dX, T* dE, const T* X, const T* E, const std::int32_t* targets, const T* lse,
                             std::int64_t N, std::int64_t V, std::int64_t C, double scale);

}  // namespace cpu
}  // namespace memcap::nn
