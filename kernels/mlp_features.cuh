// Elementwise device kernels of the closed-form MLP constructions' GPU path (host launchers; CPU
// references: src/mlp/gated_mlp.cpp hidden(), src/core/random_fill.cpp normal_matrix(), the
// Hadamard/ridge/diagonal steps of src/mlp/ridge_readout.cpp). All matrices are column-major.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace memcap::mlp::cuda {

// out[i + j*rows] = scale * rng::normal(seed, stream, i*cols + j): the column-major image of
// rng::normal_matrix(rows, cols, seed, stream) times scale (device log/cos: may differ by a few ulp).
void normal_matrix(cudaStream_t s, std::int64_t rows, std::int64_t cols, std::uint64_t seed, std::uint64_t stream,
                   double scale, double* out);
// Divide each column of a rows x cols matrix by max(||column||, 1e-30) (NTK projection).
void normalize_columns(cudaStream_t s, std::int64_t rows, std::int64_t cols, double* M);

// Gate σ of GatedMLP: identity, relu, or silu x·sigmoid(x) (the CPU's overflow-free sigmoid).
enum Gate : int { kGateIdentity = 0, kGateRelu = 1, kGateSilu = 2 };
// Gated hidden layer of one tile (rows x cols, ld rows): H = (H + bu[j]) * σ(W + bg[j]);
// bu / bg may be null (no bias). H holds X Aᵀ, W holds X Gᵀ on entry.
void hidden_combine(cudaStream_t s, std::int64_t rows, std::int64_t cols, double* H, const double* W,
                    const double* bu, const double* bg, int gate);

// a[i] = a[i] * b[i]
void hadamard(cudaStream_t s, std::int64_t n, double* a, const double* b);
void hadamard(cudaStream_t s, std::int64_t n, float* a, const float* b);
// x[i] = x[i] * x[i]
void square(cudaStream_t s, std::int64_t n, double* x);
// Conversions (out may not alias in).
void convert(cudaStream_t s, std::int64_t n, const double* in, float* out);
void convert(cudaStream_t s, std::int64_t n, const float* in, double* out);
void convert(cudaStream_t s, std::int64_t n, const double* in, double* out);
// M[i, j] += bias[j] for a rows x cols matrix (ld rows): the output bias of every row.
void add_column_bias(cudaStream_t s, std::int64_t rows, std::int64_t cols, double* M, const double* bias);

// Square matrices (n x n, leading dimension ld).
void add_diagonal(cudaStream_t s, std::int64_t n, double* S, std::int64_t ld, double v);
void get_diagonal(cudaStream_t s, std::int64_t n, const double* S, std::int64_t ld, double* out);
void set_diagonal(cudaStream_t s, std::int64_t n, double* S, std::int64_t ld, const double* in);
// lower_to_upper: copy the strict lower triangle onto the strict upper one; else the reverse.
void mirror_triangle(cudaStream_t s, std::int64_t n, double* S, std::int64_t ld, bool lower_to_upper);

// *flag = 1 if any x[i] is NaN/Inf (flag is never cleared here).
void flag_nonfinite(cudaStream_t s, std::int64_t n, const double* x, int* flag);
void flag_nonfinite(cudaStream_t s, std::int64_t n, const float* x, int* flag);
// *flag = 1 if *info != 0.
void flag_nonzero(cudaStream_t s, const int* info, int* flag);
// out[i] = in[i] (cuSOLVER sytrf pivots, int -> int64 for Xsytrs).
void widen_pivots(cudaStream_t s, std::int64_t n, const int* in, std::int64_t* out);
// Pseudo-inverse scaling of an n x k matrix (ld n): row i *= |w_i| > cut ? 1/w_i : 0.
void scale_rows_pinv(cudaStream_t s, std::int64_t n, std::int64_t k, double* T, const double* w, double cut);

}  // namespace memcap::mlp::cuda
