// Device helpers shared by the nn_*.cu kernels (include from .cu files only): activations and their
// derivatives (same formulas as src/nn/layers.cpp), deterministic warp/block reductions (fixed
// shuffle trees: every lane ends with the same bits, run to run), grid sizing, TF32 rounding.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda_check.cuh"
#include "fast_divmod.cuh"  // flat index -> (row, column) without a 64-bit division per element
#include "nn/layers.hpp"

namespace memcap::nn::cuda::dev {

constexpr int kAct_identity = static_cast<int>(Activation::identity);
constexpr int kAct_relu = static_cast<int>(Activation::relu);
constexpr int kAct_silu = static_cast<int>(Activation::silu);

__device__ __forceinline__ float exp_(float x) { return expf(x); }
__device__ __forceinline__ double exp_(double x) { return exp(x); }
__device__ __forceinline__ float log1p_(float x) { return log1pf(x); }
__device__ __forceinline__ double log1p_(double x) { return log1p(x); }
__device__ __forceinline__ float expm1_(float x) { return expm1f(x); }
__device__ __forceinline__ double expm1_(double x) { return expm1(x); }

template <class T>
__device__ __forceinline__ T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + exp_(-x));
  const T e = exp_(x);
  return e / (T(1) + e);
}

// σ(x) for the gate (identity | relu | silu).
template <class T>
__device__ __forceinline__ T act_value(T x, int act) {
  if (act == kAct_relu) return x > T(0) ? x : T(0);
  if (act == kAct_silu) return x * sigmoid(x);
  return x;
}

// σ'(x); ReLU'(0) = 0.
template <class T>
__device__ __forceinline__ T act_deriv(T x, int act) {
  if (act == kAct_relu) return x > T(0) ? T(1) : T(0);
  if (act == kAct_silu) {
    const T s = sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
  }
  return T(1);
}

// Both at once (the silu sigmoid computed once).
template <class T>
__device__ __forceinline__ void act_value_deriv(T x, int act, T& val, T& der) {
  if (act == kAct_relu) {
    val = x > T(0) ? x : T(0);
    der = x > T(0) ? T(1) : T(0);
  } else if (act == kAct_silu) {
    const T s = sigmoid(x);
    val = x * s;
    der = s * (T(1) + x * (T(1) - s));
  } else {
    val = x;
    der = T(1);
  }
}

// ---- deterministic reductions ---------------------------------------------------------------------
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
// `scratch` holds ≥ 32 values of T in shared memory; the call synchronizes the block twice.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < nw ? scratch[lane] : T(0);
  return warp_sum(r);
}

// (value, index) argmax: larger value wins, equal values -> smaller index; NaN never wins.
template <class T>
__device__ __forceinline__ void argmax_merge(T& v, int& i, T v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}
template <class T>
__device__ __forceinline__ void warp_argmax(T& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const T v2 = __shfl_xor_sync(0xffffffffu, v, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, i, o);
    argmax_merge(v, i, v2, i2);
  }
}

// ---- TF32 rounding (round to nearest, ties away: cvt.rna), kept in a float's bits ---------------
__device__ __forceinline__ float round_tf32(float x) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}
template <bool TF32, class T>
__device__ __forceinline__ T to_operand(T x) {
  if constexpr (TF32) return round_tf32(x);
  return x;
}

// ---- launch sizing -----------------------------------------------------------------------------------
constexpr int kElemThreads = 256;
// Blocks for a grid-stride element-wise kernel over n items (at least 1, at most 65535 * 8).
inline unsigned elem_blocks(std::int64_t n) {
  const std::int64_t b = (n + kElemThreads - 1) / kElemThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 524280 ? 524280 : b));
}

}  // namespace memcap::nn::cuda::dev
