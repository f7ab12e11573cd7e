// Fused value-logit softmax cross-entropy kernels (see nn_softmax_ce_fused.cuh). Block = 256 threads
// (2 x 4 warps); row tiles of BM rows, value tiles of BP values (float 64, double 32); whole
// d-dimensional rows (padded to DK) in shared memory. In the stats kernel each warp owns BM/8 rows
// and keeps their running (max, argmax, others) in registers, merging value tiles in increasing order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "smem_limit.cuh"
#include "nn_device.cuh"
#include "nn_gated_mlp_fused.cuh"  // fused_tile, kFusedMaxDim
#include "nn_softmax_ce_fused.cuh"
#include "nn_tile.cuh"
#include "nn_train_state_dev.cuh"

namespace memcap::nn::cuda {

namespace {

constexpr int kNT = tile::kThreads;
constexpr int kPad = 4;

template <bool TF32, int ROWS, int COLS, int LDS, class T>
__device__ __forceinline__ void stage_rows(T* s, const T* __restrict__ g, long long r0, long long nrows, int ncols,
                                           long long ld) {
  for (int e = threadIdx.x; e < ROWS * COLS; e += kNT) {
    const int r = e / COLS, c = e % COLS;
    const long long gr = r0 + r;
    const T v = (gr < nrows && c < ncols) ? g[gr * ld + c] : T(0);
    s[r * LDS + c] = dev::to_operand<TF32>(v);
  }
}

// exp(a − b) ≤ 1 as a rescaling factor: in T (a factor's relative error only scales a sum of positive terms,
// so float's 1e-7 is as good as double's here, at a fraction of the cost).
template <class T>
__device__ __forceinline__ double exp_diff(T a, T b) {
  if constexpr (sizeof(T) == 4) return static_cast<double>(expf(a - b));
  return exp(static_cast<double>(a) - static_cast<double>(b));
}

// Merge a partial (tm, to, ti) into the running (m, o, i): larger max wins (the loser's max term
// joins `others`); equal max keeps the earlier (smaller) index. ti < 0 = empty partial.
template <class T>
__device__ __forceinline__ void ce_merge(T& m, double& o, int& i, T tm, double to, int ti) {
  if (ti < 0) return;
  if (i < 0) {
    m = tm;
    o = to;
    i = ti;
  } else if (tm > m) {
    o = to + (o + 1.0) * exp_diff(m, tm);
    m = tm;
    i = ti;
  } else {
    o = o + (to + 1.0) * exp_diff(tm, m);
  }
}

template <class T>
struct StatsArgs {
  CeStats<T> st;
  const T *y, *V;
  const std::int32_t* targets;
  long long N, P;
  int d;
  int cols;  // values per split (multiple of the tile)
  const TrainState* gate;
  bool at_record_epochs;
};

template <class T, int DK>
constexpr std::size_t ce_smem_bytes() {
  constexpr int B = fused_tile<T>(), LDK = DK + kPad, LDP = B + kPad;
  return sizeof(T) * (std::size_t(B) * LDK * 2 + std::size_t(B) * LDP);
}

template <class T, bool TF32, int DK>
__global__ void __launch_bounds__(kNT) ce_stats_kernel(StatsArgs<T> a) {
  if (a.at_record_epochs ? !dev::record_epoch(a.gate) : !dev::step_active(a.gate)) return;
  constexpr int BM = fused_tile<T>(), BP = fused_tile<T>(), LDK = DK + kPad, LDP = BP + kPad;
  constexpr int RPW = BM / (kNT / 32);  // rows per warp
  using TZ = tile::Tile<T, TF32, BM, BP>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Ys = reinterpret_cast<T*>(smem_raw);
  T* Vs = Ys + BM * LDK;
  T* Zs = Vs + BP * LDK;  // [BM][LDP]

  const long long i0 = static_cast<long long>(blockIdx.x) * BM;
  const int s = blockIdx.y;
  const long long p_begin = static_cast<long long>(s) * a.cols;
  const long long p_end = min(a.P, p_begin + a.cols);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  stage_rows<TF32, BM, DK, LDK>(Ys, a.y, i0, a.N, a.d, a.d);

  T rm[RPW];
  double ro[RPW];
  int ri[RPW];
  bool rnan[RPW];
#pragma unroll
  for (int q = 0; q < RPW; ++q) {
    rm[q] = -INFINITY;
    ro[q] = 0;
    ri[q] = -1;
    rnan[q] = false;
  }
  for (long long p0 = p_begin; p0 < p_end; p0 += BP) {
    __syncthreads();  // previous tile's readers of Vs / Zs are done
    stage_rows<TF32, BP, DK, LDK>(Vs, a.V, p0, a.P, a.d, a.d);
    __syncthreads();
    typename TZ::Acc z;
    TZ::zero(z);
    TZ::template mma<DK>(z, tile::Op<T>{Ys, LDK, 1}, tile::Op<T>{Vs, LDK, 1});
#pragma unroll
    for (int e = 0; e < TZ::kAcc; ++e) {
      int r, c;
      TZ::coord(e, r, c);
      const long long p = p0 + c, i = i0 + r;
      const bool valid = p < p_end;
      Zs[r * LDP + c] = valid ? z[e] : static_cast<T>(-INFINITY);
      if (valid && i < a.N && p == a.targets[i]) a.st.zt[i] = z[e];
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < RPW; ++q) {
      const T* zr = Zs + (warp * RPW + q) * LDP;
      T tv = static_cast<T>(-INFINITY);
      int ti = -1;
      bool nan = false;
      for (int c = lane; c < BP; c += 32) {
        const T v = zr[c];
        nan |= isnan(v);
        dev::argmax_merge(tv, ti, v, static_cast<int>(p0 + c));
      }
      dev::warp_argmax(tv, ti);
      nan = __any_sync(0xffffffffu, nan);
      double so = 0;
      if (ti >= 0)
        for (int c = lane; c < BP; c += 32)
          if (p0 + c != ti) so += static_cast<double>(dev::exp_(static_cast<T>(zr[c] - tv)));
      so = dev::warp_sum(so);
      ce_merge(rm[q], ro[q], ri[q], tv, so, ti);
      rnan[q] = rnan[q] || nan;
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int q = 0; q < RPW; ++q) {
      const long long i = i0 + warp * RPW + q;
      if (i < a.N) {
        const long long o = static_cast<long long>(s) * a.N + i;
        a.st.max[o] = rm[q];
        a.st.others[o] = rnan[q] ? static_cast<double>(NAN) : ro[q];
        a.st.arg[o] = ri[q];
      }
    }
  }
}

// Row i of the combine: merges the splits' (max, others, argmax) in order; returns 1 when the argmax is the
// target; unless accuracy_only writes lse_i and loss_i = (max − z_t) + log1p(others) and adds loss_i to `sum`.
template <class T>
__device__ __forceinline__ int combine_row(const CeStats<T>& st, int splits, const std::int32_t* __restrict__ targets,
                                           long long N, long long i, T* row_lse, T* row_loss, bool accuracy_only,
                                           double& sum) {
  T m = static_cast<T>(-INFINITY);
  double o = 0;
  int idx = -1;
  bool nan = false;
#pragma unroll 8
  for (int s = 0; s < splits; ++s) {  // unrolled: the loads of 8 splits go out before the first merge
    const long long k = static_cast<long long>(s) * N + i;
    const double so = st.others[k];
    nan = nan || isnan(so);
    ce_merge(m, o, idx, st.max[k], so, st.arg[k]);
  }
  if (!accuracy_only) {
    const double loss = (nan || idx < 0) ? static_cast<double>(NAN)
                                         : (static_cast<double>(m) - static_cast<double>(st.zt[i])) + log1p(o);
    row_lse[i] = static_cast<T>(static_cast<double>(m) + log1p(o));
    row_loss[i] = static_cast<T>(loss);
    sum += loss;
  }
  return idx >= 0 && idx == targets[i] ? 1 : 0;
}

// The combine on ce_combine_blocks(N) blocks of kCombineThreads, one row a thread (the merges' exp and log1p
// spread over many SMs); per-block loss sums and correct counts into st.block_part, summed by the last block
// (dev::record_block_totals: a fixed tree, deterministic).
constexpr int kCombineThreads = 64;
template <class T>
__global__ void __launch_bounds__(kCombineThreads)
    ce_combine_multi_kernel(CeStats<T> st, int splits, const std::int32_t* __restrict__ targets, long long N,
                            T* row_lse, T* row_loss, TrainState* state, double* hist_loss, long long* hist_correct,
                            bool accuracy_only) {
  if (accuracy_only ? !dev::record_epoch(state) : !dev::step_active(state)) return;
  __shared__ double s_sum[32];
  double sum = 0, cnt = 0;
  for (long long i = blockIdx.x * static_cast<long long>(kCombineThreads) + threadIdx.x; i < N;
       i += static_cast<long long>(gridDim.x) * kCombineThreads) {
    cnt += combine_row(st, splits, targets, N, i, row_lse, row_loss, accuracy_only, sum);
  }
  dev::record_block_totals(sum, cnt, st.block_part, N, state, hist_loss, hist_correct, accuracy_only, s_sum);
}

template <class T>
struct GradArgs {
  T* dy_part;
  const T *y, *V;
  const std::int32_t* targets;
  const T *row_lse, *row_loss;
  long long N, P;
  int d;
  int cols;
  double scale;
  const TrainState* gate;
};

template <class T, bool TF32, int DK>
__global__ void __launch_bounds__(kNT) ce_grad_kernel(GradArgs<T> a) {
  if (!dev::step_active(a.gate)) return;
  constexpr int BM = fused_tile<T>(), BP = fused_tile<T>(), LDK = DK + kPad, LDP = BP + kPad;
  using TZ = tile::Tile<T, TF32, BM, BP>;
  using TY = tile::Tile<T, TF32, BM, DK>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Ys = reinterpret_cast<T*>(smem_raw);
  T* Vs = Ys + BM * LDK;
  T* Ps = Vs + BP * LDK;  // [BM][LDP]: dlogits of the tile

  const long long i0 = static_cast<long long>(blockIdx.x) * BM;
  const int s = blockIdx.y;
  const long long p_begin = static_cast<long long>(s) * a.cols;
  const long long p_end = min(a.P, p_begin + a.cols);
  stage_rows<TF32, BM, DK, LDK>(Ys, a.y, i0, a.N, a.d, a.d);
  const T scale = static_cast<T>(a.scale);

  typename TY::Acc dy;
  TY::zero(dy);
  for (long long p0 = p_begin; p0 < p_end; p0 += BP) {
    __syncthreads();
    stage_rows<TF32, BP, DK, LDK>(Vs, a.V, p0, a.P, a.d, a.d);
    __syncthreads();
    typename TZ::Acc z;
    TZ::zero(z);
    TZ::template mma<DK>(z, tile::Op<T>{Ys, LDK, 1}, tile::Op<T>{Vs, LDK, 1});
#pragma unroll
    for (int e = 0; e < TZ::kAcc; ++e) {
      int r, c;
      TZ::coord(e, r, c);
      const long long p = p0 + c, i = i0 + r;
      T g = T(0);
      if (p < p_end && i < a.N) {
        if (p == a.targets[i])
          g = scale * dev::expm1_(-a.row_loss[i]);
        else
          g = scale * dev::exp_(z[e] - a.row_lse[i]);
      }
      Ps[r * LDP + c] = dev::to_operand<TF32>(g);
    }
    __syncthreads();
    // dy(r, c) += Σ_p Ps[r][p] V[p][c]
    TY::template mma<BP>(dy, tile::Op<T>{Ps, LDP, 1}, tile::Op<T>{Vs, 1, LDK});
  }
  T* out = a.dy_part + static_cast<long long>(s) * a.N * a.d;
#pragma unroll
  for (int e = 0; e < TY::kAcc; ++e) {
    int r, c;
    TY::coord(e, r, c);
    if (i0 + r < a.N && c < a.d) out[(i0 + r) * a.d + c] = dy[e];
  }
}

__global__ void record_parts_kernel(const double* parts, int nparts, double denom, const std::int64_t* n_correct,
                                    TrainState* state, double* hist_loss, long long* hist_correct) {
  if (!dev::step_active(state)) return;
  double s = 0;
  for (int b = 0; b < nparts; ++b) s += parts[b];
  if (n_correct) hist_correct[static_cast<const volatile TrainState*>(state)->step] = *n_correct;
  dev::record_loss(state, s / denom, hist_loss);
}

int dk_for(std::int64_t d) { return tile::dk_class(d); }

struct Grid {
  unsigned gx, gy;
  int cols;
};

template <class T>
Grid ce_grid(std::int64_t N, std::int64_t P, std::int64_t d, int splits, bool tf32, const char* what) {
  if (N < 1 || P < 1 || d < 1 || d > kFusedMaxDim || P > 2147483647LL)
    cuda_detail::throw_user_error(std::string(what) + ": shape outside the fused kernels' range (N = " +
                                  std::to_string(N) + ", P = " + std::to_string(P) + ", d = " + std::to_string(d) +
                                  "; need N, P >= 1 and 1 <= d <= 128)");
  if (tf32 && sizeof(T) != 4) cuda_detail::throw_user_error(std::string(what) + ": the tf32 variant needs float data");
  constexpr int B = fused_tile<T>();
  const std::int64_t p_tiles = (P + B - 1) / B, row_tiles = (N + B - 1) / B;
  if (splits < 1 || splits > p_tiles)
    cuda_detail::throw_user_error(std::string(what) + ": splits must be in [1, ceil(P / tile)]");
  if (row_tiles > 2147483647LL) cuda_detail::throw_user_error(std::string(what) + ": too many rows");
  const std::int64_t per = (p_tiles + splits - 1) / splits;
  return Grid{static_cast<unsigned>(row_tiles), static_cast<unsigned>(splits), static_cast<int>(per * B)};
}

template <class T, bool TF32, int DK>
struct StatsLauncher {
  static void run(const StatsArgs<T>& a, unsigned gx, unsigned gy, cudaStream_t s) {
    tile::launch_dyn_smem(ce_stats_kernel<T, TF32, DK>, ce_smem_bytes<T, DK>(), gx, gy, a, s, "launch of ce_stats_kernel");
  }
};
template <class T, bool TF32, int DK>
struct GradLauncher {
  static void run(const GradArgs<T>& a, unsigned gx, unsigned gy, cudaStream_t s) {
    tile::launch_dyn_smem(ce_grad_kernel<T, TF32, DK>, ce_smem_bytes<T, DK>(), gx, gy, a, s, "launch of ce_grad_kernel");
  }
};

template <class K>
int blocks_per_sm(K kern, std::size_t smem) {
  ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
  int n = 0;
  MEMCAP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, kNT, smem));
  return std::max(n, 1);
}

template <class T, bool TF32, int DK>
int occupancy(bool grad) {
  return grad ? blocks_per_sm(ce_grad_kernel<T, TF32, DK>, ce_smem_bytes<T, DK>())
              : blocks_per_sm(ce_stats_kernel<T, TF32, DK>, ce_smem_bytes<T, DK>());
}

template <class T, bool TF32>
int occupancy_dk(bool grad, int dk) {
  return dk == 32 ? occupancy<T, TF32, 32>(grad) : dk == 64 ? occupancy<T, TF32, 64>(grad) : occupancy<T, TF32, 128>(grad);
}

}  // namespace

int softmax_ce_fused_blocks_per_sm(bool grad, bool f64, bool tf32, std::int64_t d) {
  const int dk = dk_for(d);
  if (f64) return occupancy_dk<double, false>(grad, dk);
  return tf32 ? occupancy_dk<float, true>(grad, dk) : occupancy_dk<float, false>(grad, dk);
}

template <class T>
void softmax_ce_stats_fused(const CeStats<T>& st, int splits, const T* y, const T* V, const std::int32_t* targets,
                            std::int64_t N, std::int64_t P, std::int64_t d, bool tf32, const TrainState* gate,
                            bool at_record_epochs, cudaStream_t stream) {
  const Grid g = ce_grid<T>(N, P, d, splits, tf32, "softmax_ce_stats_fused");
  StatsArgs<T> a{st, y, V, targets, N, P, static_cast<int>(d), g.cols, gate, at_record_epochs};
  tile::dispatch_tf32_dk<T, StatsLauncher>(a, tf32, dk_for(d), g.gx, g.gy, stream);
}

template <class T>
void softmax_ce_combine(const CeStats<T>& st, int splits, const std::int32_t* targets, std::int64_t N, T* row_lse,
                        T* row_loss, TrainState* state, double* hist_loss, long long* hist_correct, bool accuracy_only,
                        cudaStream_t stream) {
  if (!state || !st.block_part || N < 1 || splits < 1)
    cuda_detail::throw_user_error("softmax_ce_combine: needs a TrainState, block partials, N >= 1 and splits >= 1");
  ce_combine_multi_kernel<T><<<static_cast<unsigned>(ce_combine_blocks(N)), kCombineThreads, 0, stream>>>(
      st, splits, targets, N, row_lse, row_loss, state, hist_loss, hist_correct, accuracy_only);
  MEMCAP_CUDA_CHECK_LAUNCH("ce_combine_multi_kernel");
}

template <class T>
void softmax_ce_grad_fused(T* dy_part, int splits, const T* y, const T* V, const std::int32_t* targets, const T* row_lse,
                           const T* row_loss, std::int64_t N, std::int64_t P, std::int64_t d, double scale, bool tf32,
                           const TrainState* gate, cudaStream_t stream) {
  const Grid g = ce_grid<T>(N, P, d, splits, tf32, "softmax_ce_grad_fused");
  GradArgs<T> a{dy_part, y, V, targets, row_lse, row_loss, N, P, static_cast<int>(d), g.cols, scale, gate};
  tile::dispatch_tf32_dk<T, GradLauncher>(a, tf32, dk_for(d), g.gx, g.gy, stream);
}

std::int64_t ce_combine_blocks(std::int64_t N) {
  return std::clamp<std::int64_t>((N + kCombineThreads - 1) / kCombineThreads, 1, 1024);
}

void record_loss_parts(const double* parts, int nparts, double denom, const std::int64_t* n_correct, TrainState* state,
                       double* hist_loss, long long* hist_correct, cudaStream_t stream) {
  if (!state || nparts < 1) cuda_detail::throw_user_error("record_loss_parts: needs a TrainState and >= 1 partial");
  record_parts_kernel<<<1, 1, 0, stream>>>(parts, nparts, denom, n_correct, state, hist_loss, hist_correct);
  MEMCAP_CUDA_CHECK_LAUNCH("record_parts_kernel");
}

#define MEMCAP_NN_CEF(T)                                                                                             \
  template void softmax_ce_stats_fused<T>(const CeStats<T>&, int, const T*, const T*, const std::int32_t*,          \
                                          std::int64_t, std::int64_t, std::int64_t, bool, const TrainState*, bool,  \
                                          cudaStream_t);                                                            \
  template void softmax_ce_combine<T>(const CeStats<T>&, int, const std::int32_t*, std::int64_t, T*, T*,            \
                                      TrainState*, double*, long long*, bool, cudaStream_t);                        \
  template void softmax_ce_grad_fused<T>(T*, int, const T*, const T*, const std::int32_t*, const T*, const T*,      \
                                         std::int64_t, std::int64_t, std::int64_t, double, bool, const TrainState*, \
                                         cudaStream_t);
MEMCAP_NN_CEF(float)
MEMCAP_NN_CEF(double)
#undef MEMCAP_NN_CEF

}  // namespace memcap::nn::cuda
