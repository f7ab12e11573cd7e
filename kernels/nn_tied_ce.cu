// Tied-embedding logits + cross-entropy on the GPU without the N×V logit matrix (kernels/nn_edit_layers.cuh;
// CPU reference src/nn/tied_ce.cpp). Rows run in blocks of tile_rows, the vocabulary in tiles of
// tile_cols: a cuBLAS GEMM writes one tile of logits into the caller's scratch, then
//   forward : one block per row merges the tile into the row's running (max, argmax, Σ exp) and picks
//             up the target logit; tiles run in order on the stream, so the merge order is fixed;
//             a finishing kernel forms lse and the loss, one block reduces the mean in a fixed order;
//   backward: an element-wise kernel turns the tile into (softmax − onehot)·scale, then two GEMMs add
//             its contribution to dX (row block) and dE (vocabulary tile).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>

#include "core/gpu.hpp"
#include "nn_device.cuh"
#include "nn_edit_layers.cuh"
#include "nn_layers.cuh"  // check_handle_stream

namespace memcap::nn::cuda {

namespace {

constexpr std::int32_t kIgnore = -100;  // nn::kIgnoreLabel (src/nn/tied_ce.hpp)
constexpr int kRowThreads = 256;

// Block-wide (max, argmax): larger wins, ties -> smaller index. Every thread gets the result.
template <class T>
__device__ void block_argmax(T& v, int& i, T* sv, int* si) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  dev::warp_argmax(v, i);
  __syncthreads();
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = i;
  }
  __syncthreads();
  if (warp == 0) {
    T w = lane < nw ? sv[lane] : sv[0];
    int wi = lane < nw ? si[lane] : si[0];
    dev::warp_argmax(w, wi);
    if (lane == 0) {
      sv[0] = w;
      si[0] = wi;
    }
  }
  __syncthreads();
  v = sv[0];
  i = si[0];
}

// Block r handles row r0 + r of the tile z[rows, cols] (vocabulary columns v0 .. v0 + cols).
// Running state per row: run_max (= lse until finish), row_sum, run_arg (may be null -> local only).
template <class T>
__global__ void ce_tile_stats_kernel(const T* __restrict__ z, std::int64_t cols, std::int64_t r0, std::int64_t v0,
                                     const std::int32_t* __restrict__ targets, T* run_max, double* row_sum,
                                     std::int32_t* run_arg, T* zt_out) {
  __shared__ T sv[32];
  __shared__ int si[32];
  __shared__ double ss[32];
  const std::int64_t n = r0 + blockIdx.x;
  const T* row = z + blockIdx.x * cols;
  T m = row[0];
  int a = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) dev::argmax_merge(m, a, row[j], static_cast<int>(j));
  block_argmax(m, a, sv, si);
  double s = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += static_cast<double>(dev::exp_(row[j] - m));
  s = dev::block_sum(s, ss);
  if (threadIdx.x == 0) {
    const std::int32_t t = targets[n];
    if (t != kIgnore && t >= v0 && t < v0 + cols) zt_out[n] = row[t - v0];
    if (v0 == 0) {
      run_max[n] = m;
      row_sum[n] = s;
      if (run_arg) run_arg[n] = static_cast<std::int32_t>(a);
    } else {
      const T pm = run_max[n];
      if (m > pm) {
        row_sum[n] = row_sum[n] * static_cast<double>(dev::exp_(pm - m)) + s;
        run_max[n] = m;
        if (run_arg) run_arg[n] = static_cast<std::int32_t>(v0 + a);
      } else {
        row_sum[n] += s * static_cast<double>(dev::exp_(m - pm));
      }
    }
  }
}

// lse[n] = max + log Σ; losses[n] = lse − z_t (0 for ignored rows; losses held z_t until now).
template <class T>
__global__ void ce_finish_kernel(T* losses, T* lse, const double* row_sum, const std::int32_t* targets,
                                 std::int64_t N) {
  for (std::int64_t n = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; n < N;
       n += std::int64_t(gridDim.x) * blockDim.x) {
    const double l = static_cast<double>(lse[n]) + log(row_sum[n]);
    lse[n] = static_cast<T>(l);
    losses[n] = targets[n] == kIgnore ? T(0) : static_cast<T>(l - static_cast<double>(losses[n]));
  }
}

// One block: mean loss over non-ignored rows and their count, thread i summing rows i, i + 256, ...
template <class T>
__global__ void ce_mean_kernel(double* loss_mean, std::int64_t* n_valid, const T* losses, const std::int32_t* targets,
                               std::int64_t N) {
  __shared__ double ss[32];
  double s = 0, c = 0;
  for (std::int64_t n = threadIdx.x; n < N; n += blockDim.x)
    if (targets[n] != kIgnore) {
      s += static_cast<double>(losses[n]);
      c += 1;
    }
  s = dev::block_sum(s, ss);
  c = dev::block_sum(c, ss);
  if (threadIdx.x == 0) {
    if (loss_mean) *loss_mean = c > 0 ? s / c : 0.0;
    if (n_valid) *n_valid = static_cast<std::int64_t>(c);
  }
}

// z[r, j] <- (exp(z − lse[r0 + r]) − [v0 + j = target])·scale, 0 for ignored rows.
// With n_valid non-null the scale is dloss / *n_valid (0 when none), read on the device.
template <class T>
__global__ void ce_tile_grad_kernel(T* z, std::int64_t rows, cuda_detail::FastDivmod cols, std::int64_t r0,
                                    std::int64_t v0,
                                    const std::int32_t* targets, const T* lse, double scale_or_dloss,
                                    const std::int64_t* n_valid) {
  double sc = scale_or_dloss;
  if (n_valid) sc = *n_valid > 0 ? scale_or_dloss / static_cast<double>(*n_valid) : 0.0;
  const T scale = static_cast<T>(sc);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < rows * cols.divisor();
       i += std::int64_t(gridDim.x) * blockDim.x) {
    std::int64_t r, j;
    cols.divmod(i, r, j);
    const std::int64_t n = r0 + r;
    const std::int32_t t = targets[n];
    if (t == kIgnore) {
      z[i] = T(0);
    } else {
      const T p = dev::exp_(z[i] - lse[n]);
      z[i] = (v0 + j == t ? p - T(1) : p) * scale;
    }
  }
}

int to_int(std::int64_t v, const char* what) { return cublas_int(v, "tied_logits_ce", what); }

template <class T>
void check_args(std::int64_t N, std::int64_t V, std::int64_t C, const TiedCeWorkspace<T>& ws) {
  if (N < 0 || V < 1 || C < 1)
    cuda_detail::throw_user_error("tied_logits_ce: bad shape N = " + std::to_string(N) + ", V = " + std::to_string(V) +
                                  ", C = " + std::to_string(C));
  if (!ws.tile || ws.tile_rows < 1 || ws.tile_cols < 1 || !ws.row_sum)
    cuda_detail::throw_user_error("tied_logits_ce: the workspace needs a tile of at least 1 x 1 and row_sum[N]");
  to_int(C, "C");
  to_int(std::min(ws.tile_rows, N), "tile rows");
  to_int(std::min(ws.tile_cols, V), "tile cols");
}

// Z tile (row-major [rc, vc]) = X[r0 .. r0+rc] · E[v0 .. v0+vc]ᵀ
template <class T>
void logits_tile(T* z, const T* X, const T* E, std::int64_t r0, std::int64_t rc, std::int64_t v0, std::int64_t vc,
                 std::int64_t C, cublasHandle_t h) {
  const int c = static_cast<int>(C), m = static_cast<int>(vc), n = static_cast<int>(rc);
  gemm_cm<T>(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, c, T(1), E + v0 * C, c, X + r0 * C, c, T(0), z, m);
}

}  // namespace

void tied_ce_tile_shape(std::int64_t N, std::int64_t V, std::int64_t* tile_rows, std::int64_t* tile_cols) {
  *tile_rows = std::max<std::int64_t>(1, std::min<std::int64_t>(N, 1024));
  *tile_cols = std::max<std::int64_t>(1, std::min<std::int64_t>(V, 8192));
}

template <class T>
void tied_logits_ce_forward(T* losses, T* lse, std::int32_t* argmax, const T* X, const T* E,
                            const std::int32_t* targets, std::int64_t N, std::int64_t V, std::int64_t C,
                            double* loss_mean, std::int64_t* n_valid, const TiedCeWorkspace<T>& ws, cublasHandle_t h,
                            cudaStream_t stream) {
  check_args(N, V, C, ws);
  if (N > 0) {
    check_handle_stream(h, stream);
    for (std::int64_t r0 = 0; r0 < N; r0 += ws.tile_rows) {
      const std::int64_t rc = std::min(ws.tile_rows, N - r0);
      for (std::int64_t v0 = 0; v0 < V; v0 += ws.tile_cols) {
        const std::int64_t vc = std::min(ws.tile_cols, V - v0);
        logits_tile(ws.tile, X, E, r0, rc, v0, vc, C, h);
        ce_tile_stats_kernel<T><<<static_cast<unsigned>(rc), kRowThreads, 0, stream>>>(ws.tile, vc, r0, v0, targets, lse,
                                                                                      ws.row_sum, argmax, losses);
        MEMCAP_CUDA_CHECK_LAUNCH("ce_tile_stats_kernel");
      }
    }
    ce_finish_kernel<T><<<dev::elem_blocks(N), dev::kElemThreads, 0, stream>>>(losses, lse, ws.row_sum, targets, N);
    MEMCAP_CUDA_CHECK_LAUNCH("ce_finish_kernel");
  }
  if (loss_mean || n_valid) {
    ce_mean_kernel<T><<<1, kRowThreads, 0, stream>>>(loss_mean, n_valid, losses, targets, N);
    MEMCAP_CUDA_CHECK_LAUNCH("ce_mean_kernel");
  }
}

namespace {
template <class T>
void backward_impl(T* dX, T* dE, const T* X, const T* E, const std::int32_t* targets, const T* lse, std::int64_t N,
                   std::int64_t V, std::int64_t C, double scale, const std::int64_t* n_valid,
                   const TiedCeWorkspace<T>& ws, cublasHandle_t h, cudaStream_t stream) {
  check_args(N, V, C, ws);
  if (N == 0 || (!dX && !dE)) return;
  check_handle_stream(h, stream);
  const int c = static_cast<int>(C);
  for (std::int64_t r0 = 0; r0 < N; r0 += ws.tile_rows) {
    const std::int64_t rc = std::min(ws.tile_rows, N - r0);
    for (std::int64_t v0 = 0; v0 < V; v0 += ws.tile_cols) {
      const std::int64_t vc = std::min(ws.tile_cols, V - v0);
      logits_tile(ws.tile, X, E, r0, rc, v0, vc, C, h);
      ce_tile_grad_kernel<T><<<dev::elem_blocks(rc * vc), dev::kElemThreads, 0, stream>>>(
          ws.tile, rc, cuda_detail::FastDivmod(vc), r0, v0, targets, lse, scale, n_valid);
      MEMCAP_CUDA_CHECK_LAUNCH("ce_tile_grad_kernel");
      const int m = static_cast<int>(vc), n = static_cast<int>(rc);
      // dX_cm (C x rc) (+)= E_tile_cm (C x vc) · G_cm (vc x rc)
      if (dX) gemm_cm<T>(h, CUBLAS_OP_N, CUBLAS_OP_N, c, n, m, T(1), E + v0 * C, c, ws.tile, m, v0 == 0 ? T(0) : T(1),
                      dX + r0 * C, c);
      // dE_tile_cm (C x vc) += X_cm (C x rc) · G_cmᵀ (rc x vc)
      if (dE) gemm_cm<T>(h, CUBLAS_OP_N, CUBLAS_OP_T, c, m, n, T(1), X + r0 * C, c, ws.tile, m, T(1), dE + v0 * C, c);
    }
  }
}
}  // namespace

template <class T>
void tied_logits_ce_backward(T* dX, T* dE, const T* X, const T* E, const std::int32_t* targets, const T* lse,
                             std::int64_t N, std::int64_t V, std::int64_t C, double scale,
                             const TiedCeWorkspace<T>& ws, cublasHandle_t h, cudaStream_t stream) {
  backward_impl(dX, dE, X, E, targets, lse, N, V, C, scale, nullptr, ws, h, stream);
}

template <class T>
void tied_logits_ce_backward_mean(T* dX, T* dE, const T* X, const T* E, const std::int32_t* targets, const T* lse,
                                  std::int64_t N, std::int64_t V, std::int64_t C, double dloss,
                                  const std::int64_t* n_valid, const TiedCeWorkspace<T>& ws, cublasHandle_t h,
                                  cudaStream_t stream) {
  if (!n_valid) cuda_detail::throw_user_error("tied_logits_ce_backward_mean: n_valid (device) must not be null");
  backward_impl(dX, dE, X, E, targets, lse, N, V, C, dloss, n_valid, ws, h, stream);
}

#define MEMCAP_NN_TIED_CE_INSTANTIATE(T)                                                                          \
  template void tied_logits_ce_forward<T>(T*, T*, std::int32_t*, const T*, const T*, const std::int32_t*,        \
                                          std::int64_t, std::int64_t, std::int64_t, double*, std::int64_t*,       \
                                          const TiedCeWorkspace<T>&, cublasHandle_t, cudaStream_t);               \
  template void tied_logits_ce_backward<T>(T*, T*, const T*, const T*, const std::int32_t*, const T*,            \
                                           std::int64_t, std::int64_t, std::int64_t, double,                     \
                                           const TiedCeWorkspace<T>&, cublasHandle_t, cudaStream_t);             \
  template void tied_logits_ce_backward_mean<T>(T*, T*, const T*, const T*, const std::int32_t*, const T*,       \
                                                std::int64_t, std::int64_t, std::int64_t, double,                \
                                                const std::int64_t*, const TiedCeWorkspace<T>&, cublasHandle_t,  \
                                                cudaStream_t);
MEMCAP_NN_TIED_CE_INSTANTIATE(float)
MEMCAP_NN_TIED_CE_INSTANTIATE(double)
#undef MEMCAP_NN_TIED_CE_INSTANTIATE

}  // namespace memcap::nn::cuda
