// Device pieces of the local editors' target-residual optimization (spec hebbian.md §4.9; host driver
// src/edit/edit_local_cuda.cpp; CPU reference src/edit/edit_local.cpp): gathering one row per edited fact
// (its last prompt position) out of a [N, w] activation, the per-fact loss check (non-finite, early stop),
// and the per-fact Adam step on r with the optional norm clip, written back into the model's residual rows.
// The residual state (r, Adam m, v) is float64 whatever the model's type T. Host-side declarations only.
// Nothing allocates or synchronises; every reduction has a fixed order (bit-identical run to run).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace memcap::nn::cuda {

// out[b·w + j] = in[rows[b]·w + j] (as double), b < B, j < w.
template <class T>
void edit_gather_rows(double* out, const T* in, const std::int32_t* rows, std::int64_t B, std::int64_t w,
                      cudaStream_t stream);

// Per fact b: loss[b] = losses[rows[b]]; a non-finite loss sets bad_step[b] = step if it is still −1;
// early_stop > 0 and loss < early_stop clears active[b]. counts[0] = facts still active, counts[1] = facts
// with a non-finite loss at this step (both overwritten).
template <class T>
void edit_residual_check(const T* losses, const std::int32_t* rows, std::int64_t B, double early_stop,
                         std::int64_t step, std::int32_t* active, double* loss, std::int32_t* bad_step,
                         std::int32_t* counts, cudaStream_t stream);

// Per active fact b (one block each): g = g_scale · g_f[rows[b]·d + ·] (+ wd · r, PyTorch Adam's L2 decay),
// m, v, r updated as nn::cpu::adam_update (not AdamW) at step t; then, when clip is true and
// ||r_b|| > limit[b] and ||r_b|| > 0, r_b *= limit[b] / ||r_b|| (edit_local.cpp's clip).
// Every fact's r_b is written (as T) into f_add[rows[b]·d + ·] (the model's tail_add rows).
template <class T>
void edit_residual_adam(double* r, double* m, double* v, T* f_add, const T* g_f, const std::int32_t* rows,
                        const std::int32_t* active, const double* limit, std::int64_t B, std::int64_t d,
                        double g_scale, double lr, double beta1, double beta2, double eps, double weight_decay,
                        std::int64_t t, bool clip, cudaStream_t stream);

}  // namespace memcap::nn::cuda
