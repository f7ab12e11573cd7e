// Adam / AdamW on the GPU: the layer (kernels/nn_layers.cuh, CPU reference nn::cpu::adam_update) and
// the gated training-loop step (kernels/nn_train_state.cuh). One fused kernel over the whole arena;
// element math in double whatever the storage type, in the CPU reference's operation order
// (PyTorch single-tensor Adam, torch.lerp for the first moment).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "nn_device.cuh"
#include "nn_layers.cuh"
#include "nn_train_state.cuh"
#include "pdl.cuh"

namespace memcap::nn::cuda {

namespace {

struct AdamConst {
  double beta1, beta2, eps, wd;
  bool adamw;
};

template <class T>
__device__ __forceinline__ void adam_element(T& p, double g, T& m, T& v, const AdamConst& c, double step_size,
                                             double bc2_sqrt, double decay) {
  double pi = static_cast<double>(p);
  if (c.adamw) {
    if (c.wd != 0) pi *= decay;
  } else if (c.wd != 0) {
    g += c.wd * pi;
  }
  const double w1 = 1.0 - c.beta1, w2 = 1.0 - c.beta2;
  const double mo = static_cast<double>(m);
  const double mi = w1 < 0.5 ? mo + w1 * (g - mo) : g - (g - mo) * (1.0 - w1);
  const double vi = static_cast<double>(v) * c.beta2 + w2 * g * g;
  m = static_cast<T>(mi);
  v = static_cast<T>(vi);
  p = static_cast<T>(pi - step_size * (mi / (sqrt(vi) / bc2_sqrt + c.eps)));
}

template <class T>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
                            std::int64_t n, const double* __restrict__ lr_dev, const std::int64_t* __restrict__ t_dev,
                            AdamConst c) {
  const double lr = *lr_dev;
  const double t = static_cast<double>(*t_dev);
  const double step_size = lr / (1.0 - pow(c.beta1, t));
  const double bc2_sqrt = sqrt(1.0 - pow(c.beta2, t));
  const double decay = 1.0 - lr * c.wd;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    adam_element(p[i], static_cast<double>(g[i]), m[i], v[i], c, step_size, bc2_sqrt, decay);
}

// Element i of the arena into its bf16 copy, if it is one of U, G, D (32-bit index math: sizes checked by the
// caller).
__device__ __forceinline__ void mirror_store(const Bf16Mirror& mr, std::int64_t i, float x) {
  const __nv_bfloat16 b = __float2bfloat16_rn(x);
  const std::int64_t nu = static_cast<std::int64_t>(mr.m) * mr.d_in;
  if (i >= mr.U_off && i < mr.U_off + nu) {
    const int r = static_cast<int>(i - mr.U_off), j = r / mr.d_in;
    mr.Ub[static_cast<std::int64_t>(j) * mr.dk + (r - j * mr.d_in)] = b;
  } else if (i >= mr.G_off && i < mr.G_off + nu) {
    const int r = static_cast<int>(i - mr.G_off), j = r / mr.d_in;
    mr.Gb[static_cast<std::int64_t>(j) * mr.dk + (r - j * mr.d_in)] = b;
  } else if (i >= mr.D_off && i < mr.D_off + static_cast<std::int64_t>(mr.d_out) * mr.m) {
    const int r = static_cast<int>(i - mr.D_off), c = r / mr.m, u = r - c * mr.m;
    mr.Db[(static_cast<std::int64_t>(u >> 6) * mr.dk + c) * 64 + (u & 63)] = b;
  }
}

template <class T>
__global__ void adam_gated_kernel(T* __restrict__ p, const T* __restrict__ grads, int nparts, std::int64_t part_stride,
                                  T* __restrict__ m, T* __restrict__ v, std::int64_t n,
                                  const AdamScalars* __restrict__ sched, TrainState* st, AdamConst c,
                                  Bf16Mirror mirror) {
  pdl::pdl_launch_dependents();
  pdl::pdl_wait();  // launched with PDL (pdl.cuh): the gradients and the step state come from earlier kernels
  volatile TrainState* vs = st;
  const long long t = vs->step;
  if (vs->stop || t >= vs->end) return;  // the same answer in every block: nobody writes st before all read it
  const AdamScalars s = sched[t];
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    T g = grads[i];
    for (int r = 1; r < nparts; ++r) g += grads[r * part_stride + i];
    adam_element(p[i], static_cast<double>(g), m[i], v[i], c, s.step_size, s.bc2_sqrt, s.decay);
    if constexpr (sizeof(T) == 4) {
      if (mirror.Ub) mirror_store(mirror, i, p[i]);
    }
  }
  // Last block to finish advances the step (threadFenceReduction pattern; integer atomic only).
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned prev = atomicAdd(&st->blocks_done, 1u);
    last = prev == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    vs->blocks_done = 0;
    vs->step = t + 1;
    if (vs->stop_after) vs->stop = 1;
    __threadfence();
  }
}

// At most 512 blocks (grid-stride beyond): the gated kernel's last-block detection is one atomic per
// block on one counter, and 3072 of them cost ~30 us a step at 786k parameters (ncu, H200).
unsigned adam_blocks(std::int64_t n) {
  const std::int64_t b = (n + dev::kElemThreads - 1) / dev::kElemThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 512 ? 512 : b));
}

}  // namespace

template <class T>
void adam_update(T* p, const T* g, T* m, T* v, std::int64_t n, const double* lr, double beta1, double beta2, double eps,
                 double weight_decay, const std::int64_t* t, bool adamw, cudaStream_t stream) {
  if (n <= 0) return;
  adam_kernel<T><<<adam_blocks(n), dev::kElemThreads, 0, stream>>>(p, g, m, v, n, lr, t,
                                                                   AdamConst{beta1, beta2, eps, weight_decay, adamw});
  MEMCAP_CUDA_CHECK_LAUNCH("adam_kernel");
}

template <class T>
void adam_step_gated(T* p, const T* grads, int nparts, std::int64_t part_stride, T* m, T* v, std::int64_t n,
                     const AdamScalars* sched, TrainState* st, double beta1, double beta2, double eps,
                     double weight_decay, bool adamw, cudaStream_t stream, const Bf16Mirror& mirror) {
  if (nparts < 1) cuda_detail::throw_user_error("adam_step_gated: need at least one gradient arena");
  if (mirror.Ub && (sizeof(T) != 4 || !mirror.Gb || !mirror.Db || mirror.m < 1 || mirror.dk < 1 ||
                    static_cast<std::int64_t>(mirror.m) * std::max(mirror.d_in, mirror.d_out) >= (1LL << 31)))
    cuda_detail::throw_user_error("adam_step_gated: bf16 copies need float parameters, all three copies and m·d < 2^31");
  pdl::launch_pdl(adam_gated_kernel<T>, dim3(adam_blocks(n)), dim3(dev::kElemThreads), 0, stream,
                  "launch of adam_gated_kernel", p, grads, nparts, part_stride, m, v, n, sched, st,
                  AdamConst{beta1, beta2, eps, weight_decay, adamw}, mirror);
}

std::vector<AdamScalars> adam_schedule(double lr_max, double lr_min, std::int64_t epochs, double beta1, double beta2,
                                       double weight_decay) {
  std::vector<AdamScalars> s(static_cast<std::size_t>(epochs > 0 ? epochs : 0));
  for (std::int64_t t = 0; t < epochs; ++t) {
    const double lr = cosine_lr(lr_max, lr_min, t, epochs);
    const double step = static_cast<double>(t + 1);
    AdamScalars& a = s[static_cast<std::size_t>(t)];
    a.step_size = lr / (1.0 - std::pow(beta1, step));
    a.bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, step));
    a.decay = 1.0 - lr * weight_decay;
  }
  return s;
}

#define MEMCAP_NN_ADAM(T)                                                                                        \
  template void adam_update<T>(T*, const T*, T*, T*, std::int64_t, const double*, double, double, double, double, \
                               const std::int64_t*, bool, cudaStream_t);                                       \
  template void adam_step_gated<T>(T*, const T*, int, std::int64_t, T*, T*, std::int64_t, const AdamScalars*,    \
                                   TrainState*, double, double, double, double, bool, cudaStream_t,             \
                                   const Bf16Mirror&);
MEMCAP_NN_ADAM(float)
MEMCAP_NN_ADAM(double)
#undef MEMCAP_NN_ADAM

}  // namespace memcap::nn::cuda
