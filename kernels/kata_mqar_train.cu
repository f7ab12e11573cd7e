// Device-side bookkeeping of the MQAR GPU trainer (kernels/kata_mqar_train.cuh).
#include <cuda_runtime.h>

#include <cmath>

#include "cuda_check.cuh"
#include "kata_mqar_train.cuh"
#include "nn_device.cuh"
#include "nn_train_state_dev.cuh"

namespace memcap::kata::mqar::cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void sumsq_kernel(double* partial, const T* g, std::int64_t n) {
  __shared__ double scratch[32];
  const std::int64_t c0 = blockIdx.x * kGradNormChunk, c1 = min(n, c0 + kGradNormChunk);
  double s = 0;
  for (std::int64_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
    const double x = static_cast<double>(g[i]);
    s += x * x;
  }
  s = nn::cuda::dev::block_sum(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void record_kernel(const double* partial, std::int64_t chunks, const double* loss_mean,
                              const std::int64_t* n_correct, double clip, nn::cuda::TrainState* st, double* hist_loss,
                              long long* hist_correct, double* hist_gn, double* coef) {
  if (!nn::cuda::dev::step_active(st)) {
    *coef = 1.0;
    return;
  }
  volatile nn::cuda::TrainState* v = st;
  const long long t = v->step;
  double s = 0;
  for (std::int64_t c = 0; c < chunks; ++c) s += partial[c];
  const double gn = sqrt(s), loss = *loss_mean;
  hist_loss[t] = loss;
  hist_correct[t] = static_cast<long long>(*n_correct);
  hist_gn[t] = gn;
  if (!isfinite(loss)) {
    v->nonfinite = 1;
    v->stop = 1;
  } else if (!isfinite(gn)) {
    v->nonfinite = 2;
    v->stop = 1;
  }
  *coef = clip > 0 && gn > clip ? clip / (gn + 1e-6) : 1.0;
}

template <class T>
__global__ void scale_kernel(T* g, std::int64_t n, const double* coef) {
  const double c = *coef;
  if (c == 1.0) return;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    g[i] = static_cast<T>(static_cast<double>(g[i]) * c);
}

__global__ void eval_acc_kernel(double* acc_loss, long long* acc_correct, const double* loss_mean,
                                const std::int64_t* n_correct, std::int64_t labelled) {
  *acc_loss += *loss_mean * static_cast<double>(labelled);
  *acc_correct += static_cast<long long>(*n_correct);
}

}  // namespace

std::int64_t grad_norm_chunks(std::int64_t n) { return n <= 0 ? 1 : (n + kGradNormChunk - 1) / kGradNormChunk; }

template <class T>
void grad_sumsq(double* partial, const T* g, std::int64_t n, cudaStream_t stream) {
  sumsq_kernel<T><<<static_cast<unsigned>(grad_norm_chunks(n)), kThreads, 0, stream>>>(partial, g, n);
  MEMCAP_CUDA_CHECK_LAUNCH("mqar sumsq_kernel");
}

void record_step(const double* partial, std::int64_t chunks, const double* loss_mean, const std::int64_t* n_correct,
                 double clip, nn::cuda::TrainState* st, double* hist_loss, long long* hist_correct, double* hist_gn,
                 double* coef, cudaStream_t stream) {
  record_kernel<<<1, 1, 0, stream>>>(partial, chunks, loss_mean, n_correct, clip, st, hist_loss, hist_correct, hist_gn,
                                     coef);
  MEMCAP_CUDA_CHECK_LAUNCH("mqar record_kernel");
}

template <class T>
void scale_grads(T* g, std::int64_t n, const double* coef, cudaStream_t stream) {
  scale_kernel<T><<<nn::cuda::dev::elem_blocks(n), nn::cuda::dev::kElemThreads, 0, stream>>>(g, n, coef);
  MEMCAP_CUDA_CHECK_LAUNCH("mqar scale_kernel");
}

void eval_accumulate(double* acc_loss, long long* acc_correct, const double* loss_mean, const std::int64_t* n_correct,
                     std::int64_t labelled, cudaStream_t stream) {
  eval_acc_kernel<<<1, 1, 0, stream>>>(acc_loss, acc_correct, loss_mean, n_correct, labelled);
  MEMCAP_CUDA_CHECK_LAUNCH("mqar eval_acc_kernel");
}

template void grad_sumsq<float>(double*, const float*, std::int64_t, cudaStream_t);
template void grad_sumsq<double>(double*, const double*, std::int64_t, cudaStream_t);
template void scale_grads<float>(float*, std::int64_t, const double*, cudaStream_t);
template void scale_grads<double>(double*, std::int64_t, const double*, cudaStream_t);

}  // namespace memcap::kata::mqar::cuda
