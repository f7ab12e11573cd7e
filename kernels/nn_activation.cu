// Element-wise activation and gated-product layers on the GPU (kernels/nn_layers.cuh; CPU reference
// nn::cpu::activation_* / gated_* in src/nn/layers.cpp). Grid-stride kernels; every element is read
// before its output is written, so outputs may alias inputs of the same index.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "nn_device.cuh"
#include "nn_layers.cuh"

namespace memcap::nn::cuda {

namespace {

#define MEMCAP_NN_GRID_STRIDE(i, n)                                                             \
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < (n);          \
       i += std::int64_t(gridDim.x) * blockDim.x)

template <class T>
__global__ void act_fwd_kernel(T* y, const T* x, std::int64_t n, int act) {
  MEMCAP_NN_GRID_STRIDE(i, n) y[i] = dev::act_value(x[i], act);
}

template <class T>
__global__ void act_bwd_kernel(T* dx, const T* dy, const T* x, std::int64_t n, int act) {
  MEMCAP_NN_GRID_STRIDE(i, n) {
    const T d = dy[i], xi = x[i];
    dx[i] = d * dev::act_deriv(xi, act);
  }
}

template <class T>
__global__ void gated_fwd_kernel(T* h, const T* a, const T* g, std::int64_t n, int act) {
  MEMCAP_NN_GRID_STRIDE(i, n) {
    const T ai = a[i], gi = g[i];
    h[i] = ai * dev::act_value(gi, act);
  }
}

template <class T>
__global__ void gated_bwd_kernel(T* da, T* dg, const T* dh, const T* a, const T* g, std::int64_t n, int act) {
  MEMCAP_NN_GRID_STRIDE(i, n) {
    const T d = dh[i], ai = a[i], gi = g[i];
    T val, der;
    dev::act_value_deriv(gi, act, val, der);
    da[i] = d * val;
    dg[i] = d * ai * der;
  }
}

// float4 forms of the gated pair (the GD trainer's F x m passes are bandwidth-bound): n4 = n / 4
// vectors; used when n % 4 == 0 and every pointer is 16-byte aligned.
__global__ void gated_fwd_kernel4(float4* h, const float4* a, const float4* g, std::int64_t n4, int act) {
  MEMCAP_NN_GRID_STRIDE(i, n4) {
    const float4 av = a[i], gv = g[i];
    h[i] = make_float4(av.x * dev::act_value(gv.x, act), av.y * dev::act_value(gv.y, act),
                       av.z * dev::act_value(gv.z, act), av.w * dev::act_value(gv.w, act));
  }
}

__device__ __forceinline__ void gated_bwd1(float d, float a, float g, int act, float& da, float& dg) {
  float val, der;
  dev::act_value_deriv(g, act, val, der);
  da = d * val;
  dg = d * a * der;
}

__global__ void gated_bwd_kernel4(float4* da, float4* dg, const float4* dh, const float4* a, const float4* g,
                                  std::int64_t n4, int act) {
  MEMCAP_NN_GRID_STRIDE(i, n4) {
    const float4 d = dh[i], av = a[i], gv = g[i];
    float4 ra, rg;
    gated_bwd1(d.x, av.x, gv.x, act, ra.x, rg.x);
    gated_bwd1(d.y, av.y, gv.y, act, ra.y, rg.y);
    gated_bwd1(d.z, av.z, gv.z, act, ra.z, rg.z);
    gated_bwd1(d.w, av.w, gv.w, act, ra.w, rg.w);
    da[i] = ra;
    dg[i] = rg;
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

#undef MEMCAP_NN_GRID_STRIDE

}  // namespace

template <class T>
void activation_forward(T* y, const T* x, std::int64_t n, Activation act, cudaStream_t stream) {
  if (n <= 0) return;
  act_fwd_kernel<T><<<dev::elem_blocks(n), dev::kElemThreads, 0, stream>>>(y, x, n, static_cast<int>(act));
  MEMCAP_CUDA_CHECK_LAUNCH("act_fwd_kernel");
}

template <class T>
void activation_backward(T* dx, const T* dy, const T* x, std::int64_t n, Activation act, cudaStream_t stream) {
  if (n <= 0) return;
  act_bwd_kernel<T><<<dev::elem_blocks(n), dev::kElemThreads, 0, stream>>>(dx, dy, x, n, static_cast<int>(act));
  MEMCAP_CUDA_CHECK_LAUNCH("act_bwd_kernel");
}

template <class T>
void gated_forward(T* h, const T* a, const T* g, std::int64_t n, Activation act, cudaStream_t stream) {
  if (n <= 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (n % 4 == 0 && aligned16(h) && aligned16(a) && aligned16(g)) {
      gated_fwd_kernel4<<<dev::elem_blocks(n / 4), dev::kElemThreads, 0, stream>>>(
          reinterpret_cast<float4*>(h), reinterpret_cast<const float4*>(a), reinterpret_cast<const float4*>(g), n / 4,
          static_cast<int>(act));
      MEMCAP_CUDA_CHECK_LAUNCH("gated_fwd_kernel4");
      return;
    }
  }
  gated_fwd_kernel<T><<<dev::elem_blocks(n), dev::kElemThreads, 0, stream>>>(h, a, g, n, static_cast<int>(act));
  MEMCAP_CUDA_CHECK_LAUNCH("gated_fwd_kernel");
}

template <class T>
void gated_backward(T* da, T* dg, const T* dh, const T* a, const T* g, std::int64_t n, Activation act,
                    cudaStream_t stream) {
  if (n <= 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (n % 4 == 0 && aligned16(da) && aligned16(dg) && aligned16(dh) && aligned16(a) && aligned16(g)) {
      gated_bwd_kernel4<<<dev::elem_blocks(n / 4), dev::kElemThreads, 0, stream>>>(
          reinterpret_cast<float4*>(da), reinterpret_cast<float4*>(dg), reinterpret_cast<const float4*>(dh),
          reinterpret_cast<const float4*>(a), reinterpret_cast<const float4*>(g), n / 4, static_cast<int>(act));
      MEMCAP_CUDA_CHECK_LAUNCH("gated_bwd_kernel4");
      return;
    }
  }
  gated_bwd_kernel<T><<<dev::elem_blocks(n), dev::kElemThreads, 0, stream>>>(da, dg, dh, a, g, n,
                                                                             static_cast<int>(act));
  MEMCAP_CUDA_CHECK_LAUNCH("gated_bwd_kernel");
}

#define MEMCAP_NN_ACT(T)                                                                                   \
  template void activation_forward<T>(T*, const T*, std::int64_t, Activation, cudaStream_t);              \
  template void activation_backward<T>(T*, const T*, const T*, std::int64_t, Activation, cudaStream_t);   \
  template void gated_forward<T>(T*, const T*, const T*, std::int64_t, Activation, cudaStream_t);         \
  template void gated_backward<T>(T*, T*, const T*, const T*, const T*, std::int64_t, Activation, cudaStream_t);
MEMCAP_NN_ACT(float)
MEMCAP_NN_ACT(double)
#undef MEMCAP_NN_ACT

}  // namespace memcap::nn::cuda
