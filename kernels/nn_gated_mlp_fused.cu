// Fused gated-MLP forward / backward kernels (see nn_gated_mlp_fused.cuh for the math and layout).
// Block = 256 threads (tile::kThreads, 2 x 4 warps); tiles of BM rows x BN hidden units (float 64,
// double 32); whole rows of the d-dimensional operands (padded to DK ∈ {32, 64, 128}) stay in shared
// memory. Out-of-range rows / units / features are staged as zeros, so no tile needs a bounds check
// inside its products; every output write is bounds-checked.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "smem_limit.cuh"
#include "nn_device.cuh"
#include "nn_gated_mlp_fused.cuh"
#include "nn_tile.cuh"
#include "nn_train_state_dev.cuh"
#include "pdl.cuh"

namespace memcap::nn::cuda {

namespace {

constexpr int kNT = tile::kThreads;
constexpr int kPad = 4;  // shared-memory row padding (elements): fewer bank conflicts in the fragments

template <class T>
struct FwdArgs {
  T* y_part;
  const T *x, *U, *G, *D, *b_u, *b_g;
  long long N;
  int d_in, m, d_out, act;
  int chunk;  // hidden units per split (multiple of the tile)
  const TrainState* gate;
};

template <class T, int DK>
constexpr std::size_t fwd_smem_bytes() {
  constexpr int B = fused_tile<T>(), LDK = DK + kPad, LDN = B + kPad;
  return sizeof(T) * (std::size_t(B) * LDK * 3 + std::size_t(DK) * LDN + std::size_t(B) * LDN);
}

// Stage rows [r0, r0 + ROWS) x cols [0, COLS) of a row-major [nrows][ncols] matrix (leading dim ld)
// into s[r][c] (stride LDS), zero outside; TF32-rounded when TF32.
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

template <class T, bool TF32, int DK>
__global__ void __launch_bounds__(kNT) gmlp_fwd_kernel(FwdArgs<T> a) {
  if (!dev::step_active(a.gate)) return;
  constexpr int BM = fused_tile<T>(), BN = fused_tile<T>(), LDK = DK + kPad, LDN = BN + kPad;
  using TH = tile::Tile<T, TF32, BM, BN>;
  using TY = tile::Tile<T, TF32, BM, DK>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Xs = reinterpret_cast<T*>(smem_raw);
  T* Us = Xs + BM * LDK;
  T* Gs = Us + BN * LDK;
  T* Ds = Gs + BN * LDK;  // [DK][LDN]: Ds[c][n] = D[c][j0 + n]
  T* Hs = Ds + DK * LDN;  // [BM][LDN]

  const long long i0 = static_cast<long long>(blockIdx.x) * BM;
  const int s = blockIdx.y;
  const int j_begin = s * a.chunk, j_end = min(a.m, j_begin + a.chunk);
  stage_rows<TF32, BM, DK, LDK>(Xs, a.x, i0, a.N, a.d_in, a.d_in);

  typename TY::Acc yacc;
  TY::zero(yacc);
  for (int j0 = j_begin; j0 < j_end; j0 += BN) {
    __syncthreads();  // the previous step's readers of Us/Gs/Ds/Hs are done
    stage_rows<TF32, BN, DK, LDK>(Us, a.U, j0, a.m, a.d_in, a.d_in);
    stage_rows<TF32, BN, DK, LDK>(Gs, a.G, j0, a.m, a.d_in, a.d_in);
    for (int e = threadIdx.x; e < DK * BN; e += kNT) {
      const int c = e / BN, n = e % BN;
      const T v = (c < a.d_out && j0 + n < a.m) ? a.D[static_cast<long long>(c) * a.m + j0 + n] : T(0);
      Ds[c * LDN + n] = dev::to_operand<TF32>(v);
    }
    __syncthreads();
    typename TH::Acc aa, gg;
    TH::zero(aa);
    TH::zero(gg);
    TH::template mma<DK>(aa, tile::Op<T>{Xs, LDK, 1}, tile::Op<T>{Us, LDK, 1});
    TH::template mma<DK>(gg, tile::Op<T>{Xs, LDK, 1}, tile::Op<T>{Gs, LDK, 1});
#pragma unroll
    for (int e = 0; e < TH::kAcc; ++e) {
      int r, c;
      TH::coord(e, r, c);
      const int j = j0 + c;
      T h = T(0);
      if (j < a.m && i0 + r < a.N) {
        T av = aa[e], gv = gg[e];
        if (a.b_u) av += a.b_u[j];
        if (a.b_g) gv += a.b_g[j];
        h = av * dev::act_value(gv, a.act);
      }
      Hs[r * LDN + c] = dev::to_operand<TF32>(h);
    }
    __syncthreads();
    TY::template mma<BN>(yacc, tile::Op<T>{Hs, LDN, 1}, tile::Op<T>{Ds, LDN, 1});
  }
  T* out = a.y_part + static_cast<long long>(s) * a.N * a.d_out;
#pragma unroll
  for (int e = 0; e < TY::kAcc; ++e) {
    int r, c;
    TY::coord(e, r, c);
    if (i0 + r < a.N && c < a.d_out) out[(i0 + r) * a.d_out + c] = yacc[e];
  }
}

template <class T>
struct BwdArgs {
  T* gpart;
  long long part_stride;
  GatedMlpGradOffsets off;
  const T *x, *dy_part;
  int n_dy;
  const T *U, *G, *D, *b_u, *b_g;
  long long N;
  int d_in, m, d_out, act;
  long long rows_per_split;  // multiple of the tile
  const TrainState* gate;
};

template <class T, int DK>
constexpr std::size_t bwd_smem_bytes() {
  constexpr int B = fused_tile<T>(), LDK = DK + kPad, LDN = B + kPad;
  return sizeof(T) * (std::size_t(B) * LDK * 5 + std::size_t(B) * LDN * 3);
}

template <class T, bool TF32, int DK>
__global__ void __launch_bounds__(kNT) gmlp_bwd_kernel(BwdArgs<T> a) {
  if (!dev::step_active(a.gate)) return;
  constexpr int BM = fused_tile<T>(), BN = fused_tile<T>(), LDK = DK + kPad, LDN = BN + kPad;
  static_assert(kNT % DK == 0, "db_d column ownership needs DK | threads");
  using TH = tile::Tile<T, TF32, BM, BN>;  // rows i x units n
  using TU = tile::Tile<T, TF32, BN, DK>;  // units n x features k (dU, dG)
  using TD = tile::Tile<T, TF32, DK, BN>;  // outputs c x units n (dD)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Us = reinterpret_cast<T*>(smem_raw);
  T* Gs = Us + BN * LDK;
  T* Dt = Gs + BN * LDK;   // [BN][LDK]: Dt[n][c] = D[c][j0 + n]
  T* Xs = Dt + BN * LDK;   // [BM][LDK]
  T* dYs = Xs + BM * LDK;  // [BM][LDK]
  T* Hs = dYs + BM * LDK;  // [BM][LDN]
  T* dAs = Hs + BM * LDN;
  T* dGs = dAs + BM * LDN;

  const int j0 = blockIdx.x * BN;
  const int r_split = blockIdx.y;
  const long long i_begin = r_split * a.rows_per_split;
  const long long i_end = min(a.N, i_begin + a.rows_per_split);
  const bool bias_u = a.off.b_u >= 0, bias_g = a.off.b_g >= 0;
  const bool bias_d = a.off.b_d >= 0 && blockIdx.x == 0;

  stage_rows<TF32, BN, DK, LDK>(Us, a.U, j0, a.m, a.d_in, a.d_in);
  stage_rows<TF32, BN, DK, LDK>(Gs, a.G, j0, a.m, a.d_in, a.d_in);
  for (int e = threadIdx.x; e < DK * BN; e += kNT) {
    const int c = e / BN, n = e % BN;
    const T v = (c < a.d_out && j0 + n < a.m) ? a.D[static_cast<long long>(c) * a.m + j0 + n] : T(0);
    Dt[n * LDK + c] = dev::to_operand<TF32>(v);
  }

  typename TU::Acc du, dg;
  typename TD::Acc dd;
  TU::zero(du);
  TU::zero(dg);
  TD::zero(dd);
  typename TH::Acc bu, bg;  // per-slot sums of da / dg over row tiles (bias gradients)
  TH::zero(bu);
  TH::zero(bg);
  T bd = T(0);  // this thread's column (threadIdx.x % DK) sum of dy (bias gradient of D)

  for (long long i0 = i_begin; i0 < i_end; i0 += BM) {
    __syncthreads();  // previous tile's readers are done (and the resident tiles are visible)
    stage_rows<TF32, BM, DK, LDK>(Xs, a.x, i0, a.N, a.d_in, a.d_in);
    for (int e = threadIdx.x; e < BM * DK; e += kNT) {
      const int r = e / DK, c = e % DK;
      const long long gi = i0 + r;
      T v = T(0);
      if (gi < a.N && c < a.d_out) {
        const T* p = a.dy_part + gi * a.d_out + c;
        v = p[0];
        for (int q = 1; q < a.n_dy; ++q) v += p[static_cast<long long>(q) * a.N * a.d_out];
      }
      bd += v;
      dYs[r * LDK + c] = dev::to_operand<TF32>(v);
    }
    __syncthreads();
    typename TH::Acc aa, gg, hh;
    TH::zero(aa);
    TH::zero(gg);
    TH::zero(hh);
    TH::template mma<DK>(hh, tile::Op<T>{dYs, LDK, 1}, tile::Op<T>{Dt, LDK, 1});
    TH::template mma<DK>(aa, tile::Op<T>{Xs, LDK, 1}, tile::Op<T>{Us, LDK, 1});
    TH::template mma<DK>(gg, tile::Op<T>{Xs, LDK, 1}, tile::Op<T>{Gs, LDK, 1});
#pragma unroll
    for (int e = 0; e < TH::kAcc; ++e) {
      int r, c;
      TH::coord(e, r, c);
      const int j = j0 + c;
      T h = T(0), da = T(0), dgv = T(0);
      if (j < a.m && i0 + r < a.N) {
        T av = aa[e], gv = gg[e];
        if (a.b_u) av += a.b_u[j];
        if (a.b_g) gv += a.b_g[j];
        T sv, ds;
        dev::act_value_deriv(gv, a.act, sv, ds);
        const T dh = hh[e];
        h = av * sv;
        da = dh * sv;
        dgv = dh * av * ds;
      }
      bu[e] += da;
      bg[e] += dgv;
      Hs[r * LDN + c] = dev::to_operand<TF32>(h);
      dAs[r * LDN + c] = dev::to_operand<TF32>(da);
      dGs[r * LDN + c] = dev::to_operand<TF32>(dgv);
    }
    __syncthreads();
    TU::template mma<BM>(du, tile::Op<T>{dAs, 1, LDN}, tile::Op<T>{Xs, 1, LDK});
    TU::template mma<BM>(dg, tile::Op<T>{dGs, 1, LDN}, tile::Op<T>{Xs, 1, LDK});
    TD::template mma<BM>(dd, tile::Op<T>{dYs, 1, LDK}, tile::Op<T>{Hs, 1, LDN});
  }

  T* part = a.gpart + static_cast<long long>(r_split) * a.part_stride;
#pragma unroll
  for (int e = 0; e < TU::kAcc; ++e) {
    int n, k;
    TU::coord(e, n, k);
    const int j = j0 + n;
    if (j < a.m && k < a.d_in) {
      part[a.off.U + static_cast<long long>(j) * a.d_in + k] = du[e];
      part[a.off.G + static_cast<long long>(j) * a.d_in + k] = dg[e];
    }
  }
#pragma unroll
  for (int e = 0; e < TD::kAcc; ++e) {
    int c, n;
    TD::coord(e, c, n);
    const int j = j0 + n;
    if (c < a.d_out && j < a.m) part[a.off.D + static_cast<long long>(c) * a.m + j] = dd[e];
  }
  // Bias gradients: slot sums -> shared memory -> one thread per column adds its rows in order.
  if (bias_u || bias_g) {
    T* S = Hs;  // [BM][LDN], free now
    for (int which = 0; which < 2; ++which) {
      if ((which == 0 && !bias_u) || (which == 1 && !bias_g)) continue;
      __syncthreads();
#pragma unroll
      for (int e = 0; e < TH::kAcc; ++e) {
        int r, c;
        TH::coord(e, r, c);
        S[r * LDN + c] = which == 0 ? bu[e] : bg[e];
      }
      __syncthreads();
      for (int c = threadIdx.x; c < BN; c += kNT) {
        T sum = T(0);
        for (int r = 0; r < BM; ++r) sum += S[r * LDN + c];
        if (j0 + c < a.m) part[(which == 0 ? a.off.b_u : a.off.b_g) + j0 + c] = sum;
      }
    }
  }
  if (bias_d) {
    T* S = dAs;  // ≥ kNT entries, free now
    __syncthreads();
    S[threadIdx.x] = bd;
    __syncthreads();
    if (threadIdx.x < a.d_out) {
      T sum = T(0);
      for (int q = 0; q < kNT / DK; ++q) sum += S[threadIdx.x + q * DK];
      part[a.off.b_d + threadIdx.x] = sum;
    }
  }
}

template <class T>
__global__ void gmlp_output_kernel(T* __restrict__ y, const T* __restrict__ y_part, int splits, const T* __restrict__ b_d,
                                   long long N, int d_out, const T* __restrict__ target, T* __restrict__ dy,
                                   double* __restrict__ loss_part, T scale, const TrainState* gate) {
  pdl::pdl_launch_dependents();
  pdl::pdl_wait();  // launched with PDL (pdl.cuh): y_part comes from the forward
  if (!dev::step_active(gate)) return;
  __shared__ double s_sum[32];
  const long long n = N * d_out;
  double acc = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    T v = b_d ? b_d[i % d_out] : T(0);
#pragma unroll 4
    for (int s = 0; s < splits; ++s) v += y_part[s * n + i];
    y[i] = v;
    if (target) {
      const T e = v - target[i];
      if (dy) dy[i] = e * scale;
      acc += static_cast<double>(e) * static_cast<double>(e);
    }
  }
  if (target && loss_part) {
    acc = dev::block_sum(acc, s_sum);
    if (threadIdx.x == 0) loss_part[blockIdx.x] = acc;
  }
}

void check_shape(const GatedMlpShape& s, bool tf32, bool is_float, const char* what) {
  if (s.N < 1 || s.m < 1 || !fused_mlp_supported(s.d_in, s.d_out) || s.m > 2147483647LL / 2 ||
      s.N > (1LL << 40))
    cuda_detail::throw_user_error(std::string(what) + ": shape outside the fused kernels' range (N = " +
                                  std::to_string(s.N) + ", m = " + std::to_string(s.m) + ", d_in = " +
                                  std::to_string(s.d_in) + ", d_out = " + std::to_string(s.d_out) +
                                  "; need N, m >= 1 and 1 <= d <= 128)");
  if (tf32 && !is_float) cuda_detail::throw_user_error(std::string(what) + ": the tf32 variant needs float data");
}

int dk_for(std::int64_t d_in, std::int64_t d_out) { return tile::dk_class(std::max(d_in, d_out)); }

template <class T, bool TF32, int DK>
struct FwdLauncher {
  static void run(const FwdArgs<T>& a, unsigned gx, unsigned gy, cudaStream_t s) {
    tile::launch_dyn_smem(gmlp_fwd_kernel<T, TF32, DK>, fwd_smem_bytes<T, DK>(), gx, gy, a, s, "launch of gmlp_fwd_kernel");
  }
};
template <class T, bool TF32, int DK>
struct BwdLauncher {
  static void run(const BwdArgs<T>& a, unsigned gx, unsigned gy, cudaStream_t s) {
    tile::launch_dyn_smem(gmlp_bwd_kernel<T, TF32, DK>, bwd_smem_bytes<T, DK>(), gx, gy, a, s, "launch of gmlp_bwd_kernel");
  }
};

constexpr int kOutThreads = 256;

}  // namespace

int fused_splits(std::int64_t tiles, std::int64_t chunks_max, std::int64_t slots) {
  tiles = std::max<std::int64_t>(tiles, 1);
  slots = std::max<std::int64_t>(slots, 1);
  chunks_max = std::max<std::int64_t>(chunks_max, 1);
  // Time ∝ waves x chunks per block. Every split adds a partial result to store and sum, so take the
  // fewest splits within 5% of the best time.
  const std::int64_t smax = std::min<std::int64_t>(chunks_max, 64);
  auto time = [&](std::int64_t s) {
    const std::int64_t per = (chunks_max + s - 1) / s, used = (chunks_max + per - 1) / per;
    return (tiles * used + slots - 1) / slots * per;
  };
  std::int64_t best = time(1);
  for (std::int64_t s = 2; s <= smax; ++s) best = std::min(best, time(s));
  for (std::int64_t s = 1; s <= smax; ++s)
    if (time(s) * 100 <= best * 105) return static_cast<int>(s);
  return 1;
}

namespace {

template <class K>
int blocks_per_sm(K kern, std::size_t smem) {
  ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
  int n = 0;
  MEMCAP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, kNT, smem));
  return std::max(n, 1);
}

template <class T, bool TF32, int DK>
int occupancy(bool backward) {
  return backward ? blocks_per_sm(gmlp_bwd_kernel<T, TF32, DK>, bwd_smem_bytes<T, DK>())
                  : blocks_per_sm(gmlp_fwd_kernel<T, TF32, DK>, fwd_smem_bytes<T, DK>());
}

template <class T, bool TF32>
int occupancy_dk(bool backward, int dk) {
  return dk == 32 ? occupancy<T, TF32, 32>(backward) : dk == 64 ? occupancy<T, TF32, 64>(backward)
                                                                : occupancy<T, TF32, 128>(backward);
}

}  // namespace

int gated_mlp_fused_blocks_per_sm(bool backward, bool f64, bool tf32, std::int64_t d) {
  const int dk = dk_for(d, d);
  if (f64) return occupancy_dk<double, false>(backward, dk);
  return tf32 ? occupancy_dk<float, true>(backward, dk) : occupancy_dk<float, false>(backward, dk);
}

template <class T>
void gated_mlp_forward_fused(T* y_part, int splits, const T* x, const T* U, const T* G, const T* D, const T* b_u,
                             const T* b_g, const GatedMlpShape& s, bool tf32, const TrainState* gate,
                             cudaStream_t stream) {
  check_shape(s, tf32, sizeof(T) == 4, "gated_mlp_forward_fused");
  constexpr int B = fused_tile<T>();
  const std::int64_t unit_tiles = (s.m + B - 1) / B;
  if (splits < 1 || splits > unit_tiles)
    cuda_detail::throw_user_error("gated_mlp_forward_fused: splits must be in [1, ceil(m / tile)]");
  const std::int64_t tiles_per_split = (unit_tiles + splits - 1) / splits;
  FwdArgs<T> a{y_part, x, U, G, D, b_u, b_g, s.N, static_cast<int>(s.d_in), static_cast<int>(s.m),
               static_cast<int>(s.d_out), static_cast<int>(s.act), static_cast<int>(tiles_per_split * B), gate};
  const std::int64_t row_tiles = (s.N + B - 1) / B;
  if (row_tiles > 2147483647LL) cuda_detail::throw_user_error("gated_mlp_forward_fused: too many rows");
  tile::dispatch_tf32_dk<T, FwdLauncher>(a, tf32, dk_for(s.d_in, s.d_out), static_cast<unsigned>(row_tiles),
                           static_cast<unsigned>(splits), stream);
}

std::int64_t gated_mlp_output_blocks(std::int64_t n) {
  const std::int64_t b = (n + kOutThreads * 4 - 1) / (kOutThreads * 4);
  return std::clamp<std::int64_t>(b, 1, 1024);
}

template <class T>
void gated_mlp_output(T* y, const T* y_part, int splits, const T* b_d, std::int64_t N, std::int64_t d_out,
                      const T* target, T* dy, double* loss_part, const TrainState* gate, cudaStream_t stream) {
  if (N < 1 || d_out < 1 || splits < 1) cuda_detail::throw_user_error("gated_mlp_output: empty shape");
  const std::int64_t n = N * d_out;
  const T scale = static_cast<T>(2.0 / static_cast<double>(n));
  pdl::launch_pdl(gmlp_output_kernel<T>, dim3(static_cast<unsigned>(gated_mlp_output_blocks(n))), dim3(kOutThreads),
                  0, stream, "launch of gmlp_output_kernel", y, y_part, splits, b_d, static_cast<long long>(N),
                  static_cast<int>(d_out), target, dy, loss_part, scale, gate);
}

template <class T>
void gated_mlp_backward_fused(T* grad_part, std::int64_t part_stride, int row_splits, const GatedMlpGradOffsets& off,
                              const T* x, const T* dy_part, int n_dy_parts, const T* U, const T* G, const T* D,
                              const T* b_u, const T* b_g, const GatedMlpShape& s, bool tf32, const TrainState* gate,
                              cudaStream_t stream) {
  check_shape(s, tf32, sizeof(T) == 4, "gated_mlp_backward_fused");
  constexpr int B = fused_tile<T>();
  const std::int64_t row_tiles = (s.N + B - 1) / B, unit_tiles = (s.m + B - 1) / B;
  if (row_splits < 1 || row_splits > row_tiles || n_dy_parts < 1)
    cuda_detail::throw_user_error("gated_mlp_backward_fused: row_splits must be in [1, ceil(N / tile)]");
  const std::int64_t tiles_per_split = (row_tiles + row_splits - 1) / row_splits;
  BwdArgs<T> a{grad_part, part_stride, off, x, dy_part, n_dy_parts, U, G, D, b_u, b_g, s.N,
               static_cast<int>(s.d_in), static_cast<int>(s.m), static_cast<int>(s.d_out), static_cast<int>(s.act),
               tiles_per_split * B, gate};
  tile::dispatch_tf32_dk<T, BwdLauncher>(a, tf32, dk_for(s.d_in, s.d_out), static_cast<unsigned>(unit_tiles),
                           static_cast<unsigned>(row_splits), stream);
}

#define MEMCAP_NN_GMLP(T)                                                                                         \
  template void gated_mlp_forward_fused<T>(T*, int, const T*, const T*, const T*, const T*, const T*, const T*,    \
                                           const GatedMlpShape&, bool, const TrainState*, cudaStream_t);           \
  template void gated_mlp_output<T>(T*, const T*, int, const T*, std::int64_t, std::int64_t, const T*, T*,         \
                                    double*, const TrainState*, cudaStream_t);                                   \
  template void gated_mlp_backward_fused<T>(T*, std::int64_t, int, const GatedMlpGradOffsets&, const T*, const T*, \
                                            int, const T*, const T*, const T*, const T*, const T*,                \
                                            const GatedMlpShape&, bool, const TrainState*, cudaStream_t);
MEMCAP_NN_GMLP(float)
MEMCAP_NN_GMLP(double)
#undef MEMCAP_NN_GMLP

}  // namespace memcap::nn::cuda
