// Tiled score scan (see mlp_margin.cuh): one block per key scans its column of scores for the
// argmax over all values and the best competitor, with the CPU's tie rule (smallest index; strict
// '>' so NaN never wins), then a one-block reduction to accuracy and min margin.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "cuda_check.cuh"
#include "mlp_margin.cuh"

namespace memcap::mlp::cuda {
namespace {

constexpr int kThreads = 256;

// (value, index) candidates; index -1 = none. b beats a: larger value, or equal value and smaller index.
__device__ inline void take_better(double& av, long long& ai, double bv, long long bi) {
  if (bi >= 0 && (ai < 0 || bv > av || (bv == av && bi < ai))) {
    av = bv;
    ai = bi;
  }
}

__global__ void score_margins_kernel(std::int64_t P, const double* S, const int* map, std::int64_t r0,
                                     double* per_key, int* argmax, int* worst) {
  __shared__ double sv[2][kThreads];
  __shared__ long long si[2][kThreads];
  const std::int64_t col = blockIdx.x;
  const double* s = S + col * P;
  const long long fi = map[r0 + col];
  double best = -INFINITY, other = -INFINITY;
  long long ja = -1, jo = -1;
  for (long long j = threadIdx.x; j < P; j += kThreads) {  // increasing j: '>' keeps the smallest index
    const double v = s[j];
    if (v > best) best = v, ja = j;
    if (j != fi && v > other) other = v, jo = j;
  }
  sv[0][threadIdx.x] = best;
  si[0][threadIdx.x] = ja;
  sv[1][threadIdx.x] = other;
  si[1][threadIdx.x] = jo;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      take_better(sv[0][threadIdx.x], si[0][threadIdx.x], sv[0][threadIdx.x + w], si[0][threadIdx.x + w]);
      take_better(sv[1][threadIdx.x], si[1][threadIdx.x], sv[1][threadIdx.x + w], si[1][threadIdx.x + w]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    long long a = si[0][0], o = si[1][0];
    const double bo = o >= 0 ? sv[1][0] : -INFINITY;
    if (a < 0) a = 0;               // all NaN: no argmax
    if (o < 0) o = fi == 0 ? 1 : 0;  // no finite competitor
    per_key[r0 + col] = s[fi] - bo;
    argmax[r0 + col] = static_cast<int>(a);
    worst[r0 + col] = static_cast<int>(o);
  }
}

__global__ void normalize_rows_kernel(std::int64_t rows, std::int64_t d, double* Y) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    double acc = 0;
    for (std::int64_t j = 0; j < d; ++j) acc += Y[i + j * rows] * Y[i + j * rows];
    const double div = fmax(sqrt(acc), 1e-8);
    for (std::int64_t j = 0; j < d; ++j) Y[i + j * rows] = Y[i + j * rows] / div;
  }
}

__global__ void summarize_kernel(std::int64_t F, const double* per_key, const int* argmax, const int* map,
                                 EvalSummary* out) {
  __shared__ double smin[kThreads];
  __shared__ long long scount[kThreads];
  __shared__ int sbad[kThreads];
  double mn = INFINITY;
  long long count = 0;
  int bad = 0;
  for (std::int64_t i = threadIdx.x; i < F; i += kThreads) {
    const double g = per_key[i];
    if (!isfinite(g)) bad = 1;
    else mn = fmin(mn, g);
    count += argmax[i] == map[i];
  }
  smin[threadIdx.x] = mn;
  scount[threadIdx.x] = count;
  sbad[threadIdx.x] = bad;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      smin[threadIdx.x] = fmin(smin[threadIdx.x], smin[threadIdx.x + w]);
      scount[threadIdx.x] += scount[threadIdx.x + w];
      sbad[threadIdx.x] |= sbad[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out->correct = static_cast<double>(scount[0]);
    out->min_margin = sbad[0] ? NAN : (F > 0 ? smin[0] : 0.0);
  }
}

}  // namespace

void normalize_rows(cudaStream_t s, std::int64_t rows, std::int64_t d, double* Y) {
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>((rows + kThreads - 1) / kThreads, 1 << 20));
  normalize_rows_kernel<<<blocks, kThreads, 0, s>>>(rows, d, Y);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp normalize_rows");
}

void score_margins(cudaStream_t s, std::int64_t P, std::int64_t n, const double* S, const int* map, std::int64_t r0,
                   double* per_key, int* argmax, int* worst) {
  if (n == 0) return;
  score_margins_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(P, S, map, r0, per_key, argmax, worst);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp score_margins");
}

void summarize(cudaStream_t s, std::int64_t F, const double* per_key, const int* argmax, const int* map,
               EvalSummary* out) {
  summarize_kernel<<<1, kThreads, 0, s>>>(F, per_key, argmax, map, out);
  MEMCAP_CUDA_CHECK_LAUNCH("mlp summarize");
}

}  // namespace memcap::mlp::cuda
