// Chunked-state and tree-scan forms of causal KATA attention through memory (spec kata.md §5.2, §5.3), bf16
// tensor cores (mma.sync), head width D in {32, 64, 128} (d_v = d): a state pass (every chunk's entering state
// to the workspace, or chunk-local states for the tree), the scans (kata_attention_scan.cu) and an output pass.
// ψ comes from kata_feature_map.cuh. Internal to kernels/kata_attention_chunk2_d*.cu.
#pragma once
#include <type_traits>

#include "cuda_check.cuh"
#include "kata_attention_common.cuh"
#include "kata_attention_impl.cuh"
#include "kata_attention_wgmma.cuh"

namespace memcap::kata::cuda {
namespace chunk2 {

using bf16 = __nv_bfloat16;
constexpr int kPS = kFeatureBlock + 8;  // smem stride of a 64-feature ψ tile

// The PSD maps' pair factor √2 (features i ≠ j) is folded into the stored states: the state pass forms ψ(K) with
// the factor 2 and the output pass forms ψ(Q) with none, so ψ(q)·ψ(k) is unchanged (the ε terms sit on i = j,
// whose factor is 1) and an off-diagonal ψ(Q) value is a plain product, one bf16x2 multiply per token pair (the
// product of two bf16 values is exact in fp32: the same bits as the fp32 product rounded once). Both roundings
// stay one per operand, as before.
template <MapKind KIND>
__device__ __forceinline__ void fold_pair_factor(FeatureSlot& s, const DeviceMap& mp, bool key_side) {
  if constexpr (KIND == MapKind::BlockPsd || KIND == MapKind::SumPsd)
    s.mult = (key_side && s.i != s.j ? 2.f : 1.f) * (KIND == MapKind::SumPsd ? mp.scale : 1.f);
}

// KIND: MapKind::BlockPsd / SumPsd, or MapKind::Linear standing for the n_ψ = d family (linear, orthant,
// Lorentz), whose kind is read at run time (ψ is cheap there; one instantiation instead of three).
template <MapKind KIND>
__device__ __forceinline__ FeatureSlot slot_of(const DeviceMap& mp, int f) {
  if constexpr (KIND == MapKind::BlockPsd || KIND == MapKind::SumPsd) {
    return make_slot<KIND>(mp, f);
  } else {
    return with_map_kind(mp.kind, [&](auto k) { return make_slot<decltype(k)::value>(mp, f); });
  }
}
template <MapKind KIND, class E>
__device__ __forceinline__ float slot_value(const DeviceMap& mp, const FeatureSlot& s, const E* x, float aux) {
  if constexpr (KIND == MapKind::BlockPsd || KIND == MapKind::SumPsd) {
    return eval_slot<KIND>(mp, s, x, aux);
  } else {
    switch (mp.kind) {
      case MapKind::Orthant: return eval_slot<MapKind::Orthant>(mp, s, x, aux);
      case MapKind::Lorentz: return eval_slot<MapKind::Lorentz>(mp, s, x, aux);
      default: return eval_slot<MapKind::Linear>(mp, s, x, aux);
    }
  }
}
template <class E>
__device__ __forceinline__ float row_aux(const DeviceMap& mp, const E* x) {
  return mp.kind == MapKind::Lorentz ? psi_aux<MapKind::Lorentz>(mp, x) : 0.f;
}

// ---- state pass: S (64 features x D) per feature block, 4 warps x 16 feature rows; FB blocks per program ---------
// MODE 0: sequential over all chunks; writes the state entering each chunk (S bf16, Z fp32) at [bh][c][np][D], or
//         with stride > 1 only the state entering chunks c = 0, stride, 2 stride, ... at [bh][c / stride].
// MODE 1: chunks [y * cpp, min(nc, y * cpp + cpp)) of program y; writes their summed local state (S, Z fp32)
//         at [bh][y][np][D] (cpp = 1: the tree's chunk-local states; more: a segment's local state).
// MODE 2: the chunks of segment y as MODE 1, starting from the state entering the segment (s_init, z_init fp32
//         [bh][y][np][D] / [np], from the scan over segments); writes the state entering each chunk as MODE 0.
// FB feature blocks per program (FB groups of 4 warps) share one K / V tile (the launcher's choice, below).
// The next K tile is fetched once ψ(K_c) is built (one K stage: more programs per SM).
// FOLD: the states carry the PSD pair factor for the output pass below (fold_pair_factor); false for the fused
// kernel's segment states, whose walk forms ψ(K) and ψ(Q) with the map's own factors.
template <int C, int MODE, MapKind KIND, int D, int FB, bool FOLD = true>
__global__ void __launch_bounds__(128 * FB) chunk_state_kernel(AttnMap mp, const bf16* __restrict__ k,
                                                               const bf16* __restrict__ v, void* __restrict__ s_out,
                                                               float* __restrict__ z_out, int T, int nc, int cpp,
                                                               const float* __restrict__ s_init,
                                                               const float* __restrict__ z_init, int stride) {
  constexpr int SD = D + 8, NT = 128 * FB;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = (tid >> 5) & 3, grp = tid >> 7, lt = tid & 127, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3;
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);
  bf16* sV = sK + C * SD;
  bf16* sPsi = sV + 2 * C * SD + grp * C * kPS;
  float* sNorm = reinterpret_cast<float*>(sV + 2 * C * SD + FB * C * kPS);
  float* sZ = sNorm + C + grp * 128;  // [128] per group: per-thread partial column sums
  const int fb = blockIdx.x * FB + grp;
  const int np = mp.n_padded;
  const bool active = fb * 64 < np;  // the last program's spare group only takes part in the barriers
  const std::int64_t bh = blockIdx.z;
  k += bh * T * D;
  v += bh * T * D;
  FeatureSlot slot = slot_of<KIND>(mp, (active ? fb : 0) * 64 + (lt & 63));
  if constexpr (FOLD) fold_pair_factor<KIND>(slot, mp, true);
  const int c_begin = MODE != 0 ? static_cast<int>(blockIdx.y) * cpp : 0;
  const int c_end = MODE != 0 ? min(nc, c_begin + cpp) : nc;
  load_tile<C, D>(sK, k, c_begin * C, T, tid, NT);
  load_tile<C, D>(sV, v, c_begin * C, T, tid, NT);
  cp_async_commit();
  float acc[D / 8][4] = {};
  float zrun = 0.f;  // this thread's share of Z (column lt & 63, rows of parity lt >> 6)
  if (MODE == 2 && active) {  // the state entering the segment
    const std::int64_t base = (bh * static_cast<std::int64_t>(gridDim.y) + blockIdx.y) * np + fb * 64;
    const float* S = s_init + base * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int col = j * 8 + 2 * tq;
      const float2 a = *reinterpret_cast<const float2*>(S + (warp * 16 + g) * D + col);
      const float2 b = *reinterpret_cast<const float2*>(S + (warp * 16 + g + 8) * D + col);
      acc[j][0] = a.x;
      acc[j][1] = a.y;
      acc[j][2] = b.x;
      acc[j][3] = b.y;
    }
    if (lt < 64) zrun = z_init[base + lt];
  }
  for (int c = c_begin; c < c_end; ++c) {
    cp_async_wait_all();
    __syncthreads();
    const int st = (c - c_begin) & 1;
    if (c + 1 < c_end) load_tile<C, D>(sV + (st ^ 1) * C * SD, v, (c + 1) * C, T, tid, NT);
    const bf16* cV = sV + st * C * SD;
    const int t0 = c * C;
    if (KIND == MapKind::Linear && mp.kind == MapKind::Lorentz) {
      if (tid < C) sNorm[tid] = row_aux(mp, sK + tid * SD);
      __syncthreads();
    }
    float zl = 0.f;
    if (active)
      for (int t = lt >> 6; t < C; t += 2) {
        const bf16 x = __float2bfloat16(t0 + t < T ? slot_value<KIND>(mp, slot, sK + t * SD, sNorm[t]) : 0.f);
        sPsi[t * kPS + (lt & 63)] = x;
        zl += __bfloat162float(x);
      }
    if (MODE != 1) sZ[lt] = zrun;  // this thread's share of the Z entering chunk c
    zrun += zl;
    __syncthreads();
    if (c + 1 < c_end) load_tile<C, D>(sK, k, (c + 1) * C, T, tid, NT);  // ψ(K_c) is built: K stage free
    cp_async_commit();
    if (!active) continue;
    if (MODE != 1 && c % stride == 0) {  // state entering chunk c
      const std::int64_t slots = (nc + stride - 1) / stride;
      const std::int64_t base = (bh * slots + c / stride) * static_cast<std::int64_t>(np) + fb * 64;
      if (lt < 64) z_out[base + lt] = sZ[lt] + sZ[lt + 64];
      bf16* S = static_cast<bf16*>(s_out) + base * D;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        const int col = j * 8 + 2 * tq;
        *reinterpret_cast<__nv_bfloat162*>(S + (warp * 16 + g) * D + col) = __floats2bfloat162_rn(acc[j][0], acc[j][1]);
        *reinterpret_cast<__nv_bfloat162*>(S + (warp * 16 + g + 8) * D + col) =
            __floats2bfloat162_rn(acc[j][2], acc[j][3]);
      }
    }
#pragma unroll
    for (int ks = 0; ks < C / 16; ++ks) {
      uint32_t a[4];
      load_a_trans(a, sPsi, kPS, warp * 16, ks * 16, lane);
      mma_rows_x_tile<D>(acc, a, cV, SD, ks * 16, lane);
    }
  }
  if (MODE == 1) {
    sZ[lt] = zrun;
    __syncthreads();
    if (!active) return;
    const std::int64_t base = (bh * (static_cast<std::int64_t>(gridDim.y)) + blockIdx.y) * np + fb * 64;
    if (lt < 64) z_out[base + lt] = sZ[lt] + sZ[lt + 64];
    float* S = static_cast<float*>(s_out) + base * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int col = j * 8 + 2 * tq;
      *reinterpret_cast<float2*>(S + (warp * 16 + g) * D + col) = make_float2(acc[j][0], acc[j][1]);
      *reinterpret_cast<float2*>(S + (warp * 16 + g + 8) * D + col) = make_float2(acc[j][2], acc[j][3]);
    }
  }
}

// ---- state pass, PSD maps at C = D = 64: ψ(K)ᵀ fragments formed in registers ------------------------------------
// The same passes (MODE, FB, FOLD, stride, workspace layout) as chunk_state_kernel, which spent most of its
// instructions forming ψ(K) in shared memory (a thread per feature walking 32 tokens, two scalar loads, a store
// and a conversion each: ~840 instructions per warp and chunk, ncu, M_2 at B = 8, H = 16, T = 16K). Here K_c is
// transposed in place once per chunk (ldmatrix.trans, each warp a set of 8 x 8 blocks closed under transposition),
// and each thread forms its own A fragments of ψ(K_c)ᵀ (feature rows warp·16 + g, + 8; token pairs) from bf16x2
// loads of Kᵀ, with no ψ tile in shared memory; Z = ψ(K)ᵀ 1 comes from one extra mma per k-step against a column
// of ones. K and V have two stages each (the next chunk's copies are issued a whole step ahead).
// WG (sm_90a): S += ψ(K_c)ᵀ V_c on wgmma (A from those registers, V as swizzled atoms) instead of mma.sync.
// The 8 x 8 blocks (row r, column c of the 64 x 64 tile) of the transposition: groups of four, closed under
// transposition (14 groups of two off-diagonal pairs, 2 of four diagonal blocks); warp w moves groups 4w .. 4w + 3.
__constant__ unsigned char kTransposeBlocks[64] = {
    1,  8,  2,  16, 3,  24, 4,  32, 5,  40, 6,  48, 7,  56, 10, 17, 11, 25, 12, 33, 13, 41, 14,
    49, 15, 57, 19, 26, 20, 34, 21, 42, 22, 50, 23, 58, 28, 35, 29, 43, 30, 51, 31, 59, 37, 44,
    38, 52, 39, 60, 46, 53, 47, 61, 55, 62, 0,  9,  18, 27, 36, 45, 54, 63};
// Transposes the 64 x 64 bf16 tile X (stride SD) in place; warps 0-3 only, then a block barrier is needed.
template <int SD>
__device__ __forceinline__ void transpose64_in_place(bf16* X, int warp, int lane) {
  uint32_t r[4][4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // lane group m = lane >> 3 addresses the rows of block m of group 4 warp + q
    const int b = kTransposeBlocks[(warp * 4 + q) * 4 + (lane >> 3)];
    ldmatrix_x4_trans(r[q], X + ((b >> 3) * 8 + (lane & 7)) * SD + (b & 7) * 8);
  }
  __syncwarp();
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int m = 0; m < 4; ++m) {  // r[q][m]: row lane >> 2 of block m transposed -> block (c, r)
      const int b = kTransposeBlocks[(warp * 4 + q) * 4 + m];
      *reinterpret_cast<uint32_t*>(X + ((b & 7) * 8 + (lane >> 2)) * SD + (b >> 3) * 8 + 2 * (lane & 3)) = r[q][m];
    }
}

// One feature row of a thread's fragments: rows of Kᵀ (times SD) of its factors, multiplier, ε term. PAIRED: the
// features in the paired order of M_g (make_paired_slot; `scan-g4p`), else the packed order.
struct FragSlot {
  int xo = 0, yo = 0;
  float mult = 0.f, add = 0.f;
  bool active = false;
};
template <MapKind KIND, int SD, int M, bool PAIRED = false>
__device__ __forceinline__ FragSlot frag_slot(const DeviceMap& mp, int f, bool fold) {
  static_assert(!PAIRED || KIND == MapKind::BlockPsd, "the paired order is M_g's");
  FeatureSlot s;
  if constexpr (PAIRED) s = make_paired_slot(mp, f);
  else s = make_slot<KIND>(mp, f);
  if (fold) fold_pair_factor<KIND>(s, mp, true);
  FragSlot r;
  r.xo = ((KIND == MapKind::BlockPsd ? s.a0 * M : 0) + s.i) * SD;
  r.yo = ((KIND == MapKind::BlockPsd ? s.a0 * M : 0) + s.j) * SD;
  r.mult = s.mult;
  r.add = s.add;
  r.active = s.active;
  return r;
}
// ψ of feature s at tokens t, t + 1 (columns of Kᵀ), bf16x2; `fast`: BlockPsd, folded, no ε (a plain product,
// doubled off the diagonal: the bits of the fp32 value rounded once, as the scalar path).
template <MapKind KIND, int SD, int G, int M>
__device__ __forceinline__ uint32_t psi_pair(const bf16* kt, const FragSlot& s, int t, bool fast) {
  if (!s.active) return 0u;
  if (KIND == MapKind::BlockPsd && fast) {
    const __nv_bfloat162 x = *reinterpret_cast<const __nv_bfloat162*>(kt + s.xo + t);
    const __nv_bfloat162 y = *reinterpret_cast<const __nv_bfloat162*>(kt + s.yo + t);
    __nv_bfloat162 p = __hmul2(x, y);
    if (s.mult != 1.f) p = __hadd2(p, p);
    return *reinterpret_cast<uint32_t*>(&p);
  }
  float v0 = 0.f, v1 = 0.f;
#pragma unroll
  for (int a = 0; a < (KIND == MapKind::SumPsd ? G : 1); ++a) {
    const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(kt + s.xo + a * M * SD + t));
    const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(kt + s.yo + a * M * SD + t));
    v0 += x.x * y.x;
    v1 += x.y * y.y;
  }
  return pack_bf16(s.mult * v0 + s.add, s.mult * v1 + s.add);
}

// A fragment of ψ(K)ᵀ (m16n8k16 layout): feature rows s0, s1 (g, g + 8), tokens t, t + 1 and t + 8, t + 9 of the
// transposed chunk kt; tokens at or past t_end (padding of the last chunk) give 0, ε terms included.
template <MapKind KIND, int SD, int G, int M>
__device__ __forceinline__ void psi_fragment(uint32_t (&a)[4], const bf16* kt, const FragSlot& s0, const FragSlot& s1,
                                             int t, int t_end, bool fast) {
  a[0] = psi_pair<KIND, SD, G, M>(kt, s0, t, fast);
  a[1] = psi_pair<KIND, SD, G, M>(kt, s1, t, fast);
  a[2] = psi_pair<KIND, SD, G, M>(kt, s0, t + 8, fast);
  a[3] = psi_pair<KIND, SD, G, M>(kt, s1, t + 8, fast);
  if (t_end < 64) {
    const uint32_t m0 = (t < t_end ? 0xFFFFu : 0u) | (t + 1 < t_end ? 0xFFFF0000u : 0u);
    const uint32_t m1 = (t + 8 < t_end ? 0xFFFFu : 0u) | (t + 9 < t_end ? 0xFFFF0000u : 0u);
    a[0] &= m0;
    a[1] &= m0;
    a[2] &= m1;
    a[3] &= m1;
  }
}

// One feature block's state from this thread's accumulators (rows row0, row0 + 8 of the block; every column of
// zacc holds Z) to S [64][64] (bf16 or fp32) and Z [64] at `base` feature rows in.
template <class OutT>
__device__ __forceinline__ void store_state_rows(OutT* s_out, float* z_out, std::int64_t base, const float (&acc)[8][4],
                                                 const float (&zacc)[4], int row0, int tq) {
  if (tq == 0) {
    z_out[base + row0] = zacc[0];
    z_out[base + row0 + 8] = zacc[2];
  }
  OutT* S = s_out + base * 64;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int col = j * 8 + 2 * tq;
    if constexpr (std::is_same_v<OutT, float>) {
      *reinterpret_cast<float2*>(S + row0 * 64 + col) = make_float2(acc[j][0], acc[j][1]);
      *reinterpret_cast<float2*>(S + (row0 + 8) * 64 + col) = make_float2(acc[j][2], acc[j][3]);
    } else {
      *reinterpret_cast<__nv_bfloat162*>(S + row0 * 64 + col) = __floats2bfloat162_rn(acc[j][0], acc[j][1]);
      *reinterpret_cast<__nv_bfloat162*>(S + (row0 + 8) * 64 + col) = __floats2bfloat162_rn(acc[j][2], acc[j][3]);
    }
  }
}

template <int MODE, MapKind KIND, int G, int FB, bool FOLD = true, bool WG = false>
__global__ void __launch_bounds__(128 * FB)
    chunk_state_frag_kernel(AttnMap mp, const bf16* __restrict__ k, const bf16* __restrict__ v,
                            void* __restrict__ s_out, float* __restrict__ z_out, int T, int nc, int cpp,
                            const float* __restrict__ s_init, const float* __restrict__ z_init, int stride) {
  constexpr int C = 64, D = 64, SD = D + 8, NT = 128 * FB, M = D / G;
  static_assert(KIND == MapKind::BlockPsd || KIND == MapKind::SumPsd, "PSD maps only");
  constexpr int kAtom = ws::kAtom;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = (tid >> 5) & 3, grp = tid >> 7, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3;
  // WG: [V atom x 2][K x 2] from the first 1024-aligned byte; else [K x 2][V x 2]
  unsigned char* sw = smem_raw + (WG ? (1024u - (smem_u32(smem_raw) & 1023u)) & 1023u : 0u);
  bf16* sK = reinterpret_cast<bf16*>(sw + (WG ? 2 * kAtom : 0));
  bf16* sV = WG ? reinterpret_cast<bf16*>(sw) : sK + 2 * C * SD;
  auto v_stage = [&](int st) {
    return WG ? reinterpret_cast<bf16*>(reinterpret_cast<unsigned char*>(sV) + st * kAtom) : sV + st * C * SD;
  };
  auto load_chunk = [&](int st, int t0) {
    load_tile<C, D>(sK + st * C * SD, k, t0, T, tid, NT);
    if constexpr (WG) load_tile_sw64(reinterpret_cast<unsigned char*>(v_stage(st)), v, t0, T, tid, NT);
    else load_tile<C, D>(v_stage(st), v, t0, T, tid, NT);
    cp_async_commit();
  };
  const int fb = blockIdx.x * FB + grp;
  const int np = mp.n_padded;
  const bool active = fb * 64 < np;  // the last program's spare group only takes part in the barriers
  const std::int64_t bh = blockIdx.z;
  k += bh * T * D;
  v += bh * T * D;
  const int f0 = (active ? fb : 0) * 64 + warp * 16 + g;
  const FragSlot s0 = frag_slot<KIND, SD, M>(mp, f0, FOLD), s1 = frag_slot<KIND, SD, M>(mp, f0 + 8, FOLD);
  const bool fast = KIND == MapKind::BlockPsd && FOLD && mp.eps == 0.f;
  const int c_begin = MODE != 0 ? static_cast<int>(blockIdx.y) * cpp : 0;
  const int c_end = MODE != 0 ? min(nc, c_begin + cpp) : nc;
  load_chunk(0, c_begin * C);
  float acc[D / 8][4] = {};
  float zacc[4] = {0.f, 0.f, 0.f, 0.f};  // Z of rows g (0, 1) and g + 8 (2, 3), every column the same
  const int row0 = warp * 16 + g;  // this thread's first feature row within the block
  if (MODE == 2 && active) {  // the state entering the segment
    const std::int64_t base = (bh * static_cast<std::int64_t>(gridDim.y) + blockIdx.y) * np + fb * 64;
    const float* S = s_init + base * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int col = j * 8 + 2 * tq;
      const float2 a = *reinterpret_cast<const float2*>(S + row0 * D + col);
      const float2 b = *reinterpret_cast<const float2*>(S + (row0 + 8) * D + col);
      acc[j][0] = a.x;
      acc[j][1] = a.y;
      acc[j][2] = b.x;
      acc[j][3] = b.y;
    }
    zacc[0] = zacc[1] = z_init[base + row0];
    zacc[2] = zacc[3] = z_init[base + row0 + 8];
  }
  const uint32_t ones = pack_bf16(1.f, 1.f);
  for (int c = c_begin; c < c_end; ++c) {
    const int st = (c - c_begin) & 1;
    cp_async_wait_all();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (WG) ws::fence_proxy_async();  // V_c (cp.async) -> the wgmma's reads
#endif
    __syncthreads();  // chunk c landed; every warp is done with chunk c - 1 (its stages are free)
    if (c + 1 < c_end) load_chunk(st ^ 1, (c + 1) * C);
    bf16* kt = sK + st * C * SD;
    if (tid < 128) transpose64_in_place<SD>(kt, warp, lane);
    __syncthreads();
    if (!active) continue;
    if (MODE != 1 && c % stride == 0) {  // state entering chunk c
      const std::int64_t slots = (nc + stride - 1) / stride;
      const std::int64_t base = (bh * slots + c / stride) * static_cast<std::int64_t>(np) + fb * 64;
      store_state_rows(static_cast<bf16*>(s_out), z_out, base, acc, zacc, row0, tq);
    }
    const int t_end = T - c * C;  // tokens of this chunk at or past it are padding
    auto fragment = [&](uint32_t(&a)[4], int ks) {
      psi_fragment<KIND, SD, G, M>(a, kt, s0, s1, ks * 16 + 2 * tq, t_end, fast);
    };
    const bf16* cV = v_stage(st);
    if constexpr (WG) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
      uint32_t a[C / 16][4];
#pragma unroll
      for (int ks = 0; ks < C / 16; ++ks) {
        fragment(a[ks], ks);
        mma_bf16(zacc, a[ks], ones, ones);  // before the wgmma: its A registers are not read until waited on
      }
      ws::wgmma_rs_mn_k64(acc, a, ws::sw128_desc(smem_u32(cV)));
#else
      __trap();  // not launched: the variants with WG apply only where the sm_90a kernels run
#endif
    } else {
#pragma unroll
      for (int ks = 0; ks < C / 16; ++ks) {
        uint32_t a[4];
        fragment(a, ks);
        mma_rows_x_tile<D>(acc, a, cV, SD, ks * 16, lane);
        mma_bf16(zacc, a, ones, ones);
      }
    }
  }
  if (MODE == 1 && active) {
    const std::int64_t base = (bh * (static_cast<std::int64_t>(gridDim.y)) + blockIdx.y) * np + fb * 64;
    store_state_rows(static_cast<float*>(s_out), z_out, base, acc, zacc, row0, tq);
  }
}

// ---- block-local states with every feature block of a CTA from one K / V load (PSD maps, C = D = 64) ----------
// MODE 1 of chunk_state_frag_kernel for blocks of cpp <= 4 chunks (`scan-g4`, `scan-g4c`): there each of the n_ψ / 64
// feature-block programs of a block loads the block's K and V again (73 GB through L2 at M_2, B = 8, H = 16,
// T = 128K, about the whole 25 ms of the stage). Here a CTA loads the block's chunks once (K transposed in place),
// then its two warpgroups take feature blocks fb0, fb0 + 1, ... < fb0 + fb_per in turn, each forming ψ(K)ᵀ fragments
// as chunk_state_frag_kernel does and writing its fp32 local state and Z (same layout as MODE 1). PAIRED: the
// feature rows in the paired order of M_g (for chunk_output_kernel's PAIRED). SOut: the local states' type (fp32, or
// bf16 for kChunk2HalfBlocks; Z stays fp32). (Its products on wgmma, `scan-g4pww`, were slower in both versions
// tried, waiting on each chunk's wgmma and overlapping the next chunk's fragments with it: removed in the thirtieth
// session; docs/perf.md.)
template <MapKind KIND, int G, bool FOLD = true, bool PAIRED = false, class SOut = float>
__global__ void __launch_bounds__(256) chunk_local_multi_kernel(AttnMap mp, const bf16* __restrict__ k,
                                                                const bf16* __restrict__ v, SOut* __restrict__ s_out,
                                                                float* __restrict__ z_out, int T, int nc, int cpp,
                                                                int fb_per) {
  constexpr int C = 64, D = 64, SD = D + 8, NT = 256, M = D / G;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);  // [4][C][SD], then V [4][C][SD]
  bf16* sV = sK + 4 * C * SD;
  const int tid = threadIdx.x, warp = (tid >> 5) & 3, grp = tid >> 7, lane = tid & 31;
  const int g = lane >> 2, tq = lane & 3;
  const std::int64_t bh = blockIdx.z;
  k += bh * T * D;
  v += bh * T * D;
  const int c_begin = static_cast<int>(blockIdx.y) * cpp, n = min(nc, c_begin + cpp) - c_begin;
  for (int ch = 0; ch < n; ++ch) {
    load_tile<C, D>(sK + ch * C * SD, k, (c_begin + ch) * C, T, tid, NT);
    load_tile<C, D>(sV + ch * C * SD, v, (c_begin + ch) * C, T, tid, NT);
  }
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  for (int ch = grp; ch < n; ch += 2) transpose64_in_place<SD>(sK + ch * C * SD, warp, lane);
  __syncthreads();
  const int np = mp.n_padded, nfb = np / 64;
  const bool fast = KIND == MapKind::BlockPsd && FOLD && mp.eps == 0.f;
  const uint32_t ones = pack_bf16(1.f, 1.f);
  const int row0 = warp * 16 + g;
  const int fb_end = min(nfb, static_cast<int>(blockIdx.x) * fb_per + fb_per);
  for (int fb = static_cast<int>(blockIdx.x) * fb_per + grp; fb < fb_end; fb += 2) {
    const FragSlot s0 = frag_slot<KIND, SD, M, PAIRED>(mp, fb * 64 + row0, FOLD);
    const FragSlot s1 = frag_slot<KIND, SD, M, PAIRED>(mp, fb * 64 + row0 + 8, FOLD);
    float acc[D / 8][4] = {};
    float zacc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int ch = 0; ch < n; ++ch) {
      const bf16* kt = sK + ch * C * SD;
      const int t_end = T - (c_begin + ch) * C;
#pragma unroll
      for (int ks = 0; ks < C / 16; ++ks) {
        uint32_t a[4];
        psi_fragment<KIND, SD, G, M>(a, kt, s0, s1, ks * 16 + 2 * tq, t_end, fast);
        mma_rows_x_tile<D>(acc, a, sV + ch * C * SD, SD, ks * 16, lane);
        mma_bf16(zacc, a, ones, ones);
      }
    }
    const std::int64_t base = (bh * static_cast<std::int64_t>(gridDim.y) + blockIdx.y) * np + fb * 64;
    store_state_rows(s_out, z_out, base, acc, zacc, row0, tq);
  }
}

// A fragment as load_a_trans, from a 64 x 64 bf16 tile stored as one 128-byte-swizzled atom (row k: 128 bytes,
// 16-byte chunk c at c ^ (k & 7)), the layout wgmma reads.
__device__ __forceinline__ void load_a_trans_sw(uint32_t (&r)[4], const bf16* atom, int row0, int k0, int lane) {
  const int i = lane >> 3;
  ldmatrix_x4_trans(r, reinterpret_cast<const unsigned char*>(atom) +
                           sw128_offset(k0 + (i >> 1) * 8 + (lane & 7), row0 + (i & 1) * 8));
}

// ---- output pass: C/16 warps x 16 query rows ----------------------------------------------------------------
// Inter-chunk ψ(Q_c) S_pre (+ ψ(Q_c)·Z_pre), then the intra-chunk causal P V with P from the closed form (PSD
// maps: Σ_a (q_a·k_a)² or c² Σ_{a,b} (q_a·k_b)², ε terms) or ψ(q)·ψ(k) (the n_ψ = d family).
// STRIDE (compile time, 1 or 4): the stored entering states are every STRIDE-th chunk's. A run-time stride cost
// registers in the stride-1 kernel too (M_2: 124 -> 138, three CTAs per SM instead of four; the output stage went
// from 31.1 to 37.3 ms at B = 8, H = 16, T = 128K and from 0.071 to 0.112 ms at B = H = 1, T = 32K). At C = D = 64
// the shared memory admits four CTAs per SM, and a minimum of four keeps the registers at <= 128 (no spills at
// stride 1; a few words at stride 4); elsewhere shared memory is the limit (d = 128: two CTAs) and a cap spilled.
// WG (sm_90a, C = D = 64, PSD maps): the readout ψ(Q_c) S_pre on wgmma (m64n64k16, ψ(Q) fragments from registers,
// S from shared memory) instead of mma.sync: with mma.sync every warp reads the whole 64 x 64 S tile of a feature
// block for its 16 rows (by our count the largest share of the pass's shared-memory traffic), wgmma reads it once
// per warpgroup. ψ(Q) and the two S buffers are then 128-byte-swizzled atoms at a 1024-aligned start.
// PAIRED (M_g at C = D = 64, the states in the paired order of make_paired_slot: `scan-g4p`, `scan-g4pw`): no ψ(Q)
// tile at all. A thread's A-fragment register holds two features (i, j0), (i, j0 + 1) of one query row, so it is
// q_i · (q_j0, q_j0+1): one bf16x2 load from the untransposed Q row, one broadcast load and one bf16x2 multiply,
// the 64 features' row offsets in sIJ (32 pairs per feature block, the next block's written during this one). The
// transposed Q tile, its ψ(Q) stores and the ldmatrix reads of them go away; the inactive repeats (2r + 1, 2r) meet
// zero state rows. Written in the twenty-seventh session, run since the twenty-eighth.
// Per feature block, Z_pre is split into den_mma's bf16 hi / lo pairs once (store_z) instead of in every warp's
// den_mma, the S tile's copies are unrolled, and (WG, PAIRED) the readout's A fragments are formed before the wait
// on the S tile: the same arithmetic; output stage 17.45 -> 13.95 ms at M_2, B = 8, H = 16, T = 128K (thirtieth
// session, H100).
constexpr int output_min_ctas(int C, int D) { return C == 64 && D == 64 ? 4 : 1; }
template <int C, MapKind KIND, int G, int D, int STRIDE, bool WG = false, bool PAIRED = false>
__global__ void __launch_bounds__(C * 2, output_min_ctas(C, D))
    chunk_output_kernel(AttnMap mp, const bf16* __restrict__ q, const bf16* __restrict__ k,
                        const bf16* __restrict__ v, const bf16* __restrict__ s_pre, const float* __restrict__ z_pre,
                        bf16* __restrict__ out, int T, int nc) {
  constexpr int stride = STRIDE;
  constexpr int NT = C * 2, SD = D + 8;
  constexpr bool PSD = KIND == MapKind::BlockPsd || KIND == MapKind::SumPsd;
  constexpr int PW = PSD || D < 64 ? 64 : D;  // width of the ψ(Q) tile held at once (>= one 64-feature block)
  constexpr int M = PSD ? D / G : D;
  // TQ (PSD maps, d <= 64): ψ(Q) of each feature block from a transposed Q tile, a lane per token pair and a warp
  // per feature (conflict-free bf16x2 loads and stores), kept as [feature][token]; else one thread per feature
  // walking the tokens (scalar loads).
  constexpr bool TQ = PSD && D <= 64 && !PAIRED;
  constexpr int CS = C + 8;  // stride of the transposed tiles (Q [D][CS] in sQ's place, ψ(Q) [64][CS] in sPQ's)
  static_assert(!TQ || (D * CS <= C * SD && 64 * CS <= C * (PW + 8)), "transposed tiles must fit in place");
  static_assert(!WG || ((TQ || PAIRED) && C == 64 && D == 64), "the wgmma readout is for PSD maps at C = D = 64");
  static_assert(!PAIRED || (KIND == MapKind::BlockPsd && C == 64 && D == 64), "the paired order: M_g, C = D = 64");
  constexpr int kAtom = ws::kAtom;  // bytes of one 64 x 64 bf16 swizzled atom
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // WG: [ψ(Q) atom][S atom x 2] from the first 1024-aligned byte, then Q, K, V; else Q, K, V, ψ(Q), ψ(K), S
  unsigned char* sw = smem_raw + (WG ? (1024u - (smem_u32(smem_raw) & 1023u)) & 1023u : 0u);
  bf16* sQ = reinterpret_cast<bf16*>(sw + (WG ? 3 * kAtom : 0));
  bf16* sK = sQ + C * SD;
  bf16* sV = sK + C * SD;
  bf16* sPQ = WG ? reinterpret_cast<bf16*>(sw) : sV + C * SD;
  bf16* sPK = sPQ + C * (PW + 8);  // family: ψ(K), stride PW + 8
  bf16* sS = WG ? reinterpret_cast<bf16*>(sw + kAtom) : sPK + (PSD ? 0 : C * (PW + 8));  // 2 buffers of 64 x SD
  float* sZt = reinterpret_cast<float*>(WG ? sV + C * SD : sS + 2 * 64 * SD);             // 2 buffers of 64
  float* sNormQ = sZt + 2 * 64;
  float* sNormK = sNormQ + C;
  uint32_t* sIJ = reinterpret_cast<uint32_t*>(sNormK + C);  // TQ: 2 x 64 packed slots (i, j, block, active)
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int c = blockIdx.x;
  const std::int64_t bh = blockIdx.y;
  const int np = mp.n_padded, nfb = np / 64, t0 = c * C;
  q += bh * T * D;
  k += bh * T * D;
  v += bh * T * D;
  out += bh * T * D;
  load_tile<C, D>(sQ, q, t0, T, tid, NT);
  load_tile<C, D>(sK, k, t0, T, tid, NT);
  load_tile<C, D>(sV, v, t0, T, tid, NT);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  const bool use_eps = PSD && mp.eps != 0.f;
  // PAIRED: pair P (features 2P, 2P + 1) -> row offsets of q_i and q_j0 in a Q row, and which half is diagonal (ε)
  auto pack_pair = [&](int P) -> uint32_t {
    constexpr int per = M * (M + 2) / 2;  // paired_block_slots(M)
    const int f = 2 * P, a0 = f / per;
    if (a0 >= G) return 0u;  // past the blocks (none at d = 64): zero state rows
    int i = 0, j = 0;
    paired_pair(M, f - a0 * per, i, j);
    return static_cast<uint32_t>(a0 * M + i) | (static_cast<uint32_t>(a0 * M + j) << 8) |
           (j == i ? 1u << 16 : 0u) | (j + 1 == i ? 1u << 17 : 0u);
  };
  if constexpr (PAIRED) {
    if (tid < 32) sIJ[tid] = pack_pair(tid);
  }
  if (tid < C) {
    if (!PSD) {
      sNormQ[tid] = row_aux(mp, sQ + tid * SD);
      sNormK[tid] = row_aux(mp, sK + tid * SD);
    } else if (use_eps) {
      sNormQ[tid] = row_sq_norm(sQ + tid * SD, D);
      sNormK[tid] = row_sq_norm(sK + tid * SD, D);
    }
  }
  __syncthreads();
  if constexpr (!PSD) {  // full ψ(Q) and ψ(K) (n_ψ = D features; zero columns up to the 64-feature block), once
    for (int e = tid; e < C * PW; e += NT) {
      const int t = e / PW, f = e % PW;
      const FeatureSlot s = slot_of<KIND>(mp, f);  // inactive (0) for f >= n_ψ
      sPQ[t * (PW + 8) + f] = __float2bfloat16(slot_value<KIND>(mp, s, sQ + t * SD, sNormQ[t]));
      sPK[t * (PW + 8) + f] = __float2bfloat16(t0 + t < T ? slot_value<KIND>(mp, s, sK + t * SD, sNormK[t]) : 0.f);
    }
  }
  // TQ: the intra-chunk Q fragments now, then Q transposed in place (sQ is not read again)
  uint32_t qf[D / 16][4];
  auto pack_slot = [&](int f) {
    const FeatureSlot sl = make_slot<KIND>(mp, f);
    return static_cast<uint32_t>(sl.i) | (static_cast<uint32_t>(sl.j) << 8) | (static_cast<uint32_t>(sl.a0) << 16) |
           (sl.active ? (1u << 24) : 0u);
  };
  if constexpr (TQ) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) load_a(qf[kk], sQ, SD, warp * 16, kk * 16, lane);
    constexpr int PER = C * D / NT;
    bf16 tq_tmp[PER];
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      const int e = tid + u * NT;
      tq_tmp[u] = sQ[(e / D) * SD + e % D];
    }
    if (tid < 64) sIJ[tid] = pack_slot(tid);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      const int e = tid + u * NT;
      sQ[(e % D) * CS + e / D] = tq_tmp[u];
    }
    __syncthreads();
  }
  float acc[D / 8][4] = {};
  // the stored state entering chunk c0 = stride * floor(c / stride): chunks c0 .. c - 1 are added below
  const std::int64_t cbase = (bh * ((nc + stride - 1) / stride) + c / stride) * static_cast<std::int64_t>(np);
  auto issue_state = [&](int fb, int buf) {  // S_pre tile of feature block fb -> smem buffer (unrolled: fixed trips)
    const bf16* S = s_pre + (cbase + fb * 64) * D;
    constexpr int CPR = D / 8, TILE = 64 * CPR;
#pragma unroll
    for (int u = 0; u < (TILE + NT - 1) / NT; ++u) {
      const int e = tid + u * NT;
      if (TILE % NT != 0 && e >= TILE) break;
      const int r = e / CPR, c8 = e % CPR;
      if constexpr (WG)
        cp_async16(reinterpret_cast<unsigned char*>(sS) + buf * kAtom + sw128_offset(r, c8 * 8), S + r * D + c8 * 8,
                   true);
      else
        cp_async16(sS + buf * 64 * SD + r * SD + c8 * 8, S + r * D + c8 * 8, true);
    }
    cp_async_commit();
  };
  // Z_pre of a feature block as den_mma's B fragments, split once per block instead of in every warp's den_mma:
  // sZb[buf][0: hi = bf16(Z), 1: lo = bf16(Z - hi)][pair p: features 2p, 2p + 1] (the sZt words). Thread tid < 32
  // loads its pair one block ahead (load_z, beside issue_state) and stores the split before the block's barrier.
  uint32_t* sZb = reinterpret_cast<uint32_t*>(sZt);
  float2 zreg = make_float2(0.f, 0.f);
  auto load_z = [&](int fb) {
    if (tid < 32 && mp.normalized) zreg = *reinterpret_cast<const float2*>(z_pre + cbase + fb * 64 + 2 * tid);
  };
  auto store_z = [&](int buf) {
    if (tid < 32) {
      const float h0 = __bfloat162float(__float2bfloat16(zreg.x)), h1 = __bfloat162float(__float2bfloat16(zreg.y));
      sZb[buf * 64 + tid] = pack_bf16(h0, h1);
      sZb[buf * 64 + 32 + tid] = pack_bf16(zreg.x - h0, zreg.y - h1);
    }
  };
  issue_state(0, 0);
  load_z(0);
  store_z(0);  // read after the first block's barrier
  auto pq_at = [&](int ff, int t) -> bf16* {  // ψ(Q) tile element (feature ff, token t), t even
    if constexpr (WG)
      return reinterpret_cast<bf16*>(reinterpret_cast<unsigned char*>(sPQ) + sw128_offset(ff, t));
    else
      return sPQ + ff * CS + t;
  };
  // ψ(Q)·Z_pre on the tensor cores beside the readout: Z as two bf16 columns (hi, lo: fp32 to about 2^-16) of
  // an 8-column B tile, so den = C[row][0] + C[row][1]. A per-thread loop over ψ(Q) rows read shared memory with
  // 4-way bank conflicts (by our count the largest share of the pass's shared-memory wavefronts; ncu had the pass
  // at 77 % of its L1 throughput). With the transposed ψ(Q) below: output stage 34.5 -> 31.1 ms at M_2, B = 8,
  // H = 16, T = 128K (docs/perf.md, twenty-third session).
  float dacc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int fb = 0; fb < nfb; ++fb) {  // inter-chunk: ψ(Q) S_pre, next tiles prefetched
    const int buf = fb & 1;
    if (fb + 1 < nfb) {
      issue_state(fb + 1, buf ^ 1);
      load_z(fb + 1);
    }
    auto den_mma = [&](const uint32_t(&a)[4], int ks) {  // dacc += ψ(Q) rows · Z_pre (k-slice ks)
      uint32_t zb0 = 0u, zb1 = 0u;
      if (g < 2) {  // B[k][n]: column 0 = bf16(Z), column 1 = bf16(Z - bf16(Z)), the others 0 (store_z's split)
        const uint32_t* Zb = sZb + buf * 64 + g * 32 + ks * 8 + tq;  // features ks * 16 + 2 tq, + 1; + 8, + 9
        zb0 = Zb[0];
        zb1 = Zb[4];
      }
      mma_bf16(dacc, a, zb0, zb1);
    };
    // PAIRED: the A fragment of k-slice ks (features ks * 16 + 2 tq, + 1 and + 8, + 9 of rows g, g + 8) from Q rows
    auto paired_a = [&](uint32_t(&a)[4], int ks) {
      const bf16* r0 = sQ + (warp * 16 + g) * SD;
      const bf16* r1 = r0 + 8 * SD;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t e = sIJ[buf * 64 + ks * 8 + tq + 4 * h];
        const int xi = e & 255, xj = (e >> 8) & 255;
        if (!use_eps) {  // the bits of the fp32 products rounded once, as the transposed path's bf16x2 multiply
          __nv_bfloat162 p0 = __hmul2(__bfloat162bfloat162(r0[xi]), *reinterpret_cast<const __nv_bfloat162*>(r0 + xj));
          __nv_bfloat162 p1 = __hmul2(__bfloat162bfloat162(r1[xi]), *reinterpret_cast<const __nv_bfloat162*>(r1 + xj));
          a[2 * h] = *reinterpret_cast<uint32_t*>(&p0);
          a[2 * h + 1] = *reinterpret_cast<uint32_t*>(&p1);
        } else {
          const float e0 = (e >> 16) & 1u ? mp.eps : 0.f, e1 = (e >> 17) & 1u ? mp.eps : 0.f;
          const float x0 = __bfloat162float(r0[xi]), x1 = __bfloat162float(r1[xi]);
          const float2 y0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(r0 + xj));
          const float2 y1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(r1 + xj));
          a[2 * h] = pack_bf16(x0 * y0.x + e0, x0 * y0.y + e1);
          a[2 * h + 1] = pack_bf16(x1 * y1.x + e0, x1 * y1.y + e1);
        }
      }
    };
    // WG and PAIRED: the readout's A fragments are formed before waiting on the S tile (they read Q and sIJ only)
    [[maybe_unused]] uint32_t a_wg[4][4];
    if constexpr (WG && PAIRED) {
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) paired_a(a_wg[ks], ks);
    }
    if constexpr (TQ) {  // warp w: features w * FPW ..; lane: tokens 2 (lane + 32 r), + 1
      constexpr int FPW = 64 / (NT / 32);
      const float scale = KIND == MapKind::SumPsd ? mp.scale : 1.f;
#pragma unroll 4
      for (int u = 0; u < FPW; ++u) {
        const int ff = warp * FPW + u;
        const uint32_t sl = sIJ[buf * 64 + ff];
        const int i = sl & 255, j = (sl >> 8) & 255, a0 = (sl >> 16) & 255;
        const float add = i == j ? mp.eps : 0.f;  // the pair factor is in the stored state (fold_pair_factor)
        if (KIND == MapKind::BlockPsd && add == 0.f) {  // a plain product: bf16x2 (uniform over the warp)
#pragma unroll
          for (int r = 0; r < C / 64; ++r) {
            const int t = 2 * (lane + 32 * r);
            const __nv_bfloat162 x = *reinterpret_cast<const __nv_bfloat162*>(sQ + (a0 * M + i) * CS + t);
            const __nv_bfloat162 y = *reinterpret_cast<const __nv_bfloat162*>(sQ + (a0 * M + j) * CS + t);
            *reinterpret_cast<__nv_bfloat162*>(pq_at(ff, t)) =
                (sl >> 24) ? __hmul2(x, y) : __floats2bfloat162_rn(0.f, 0.f);
          }
          continue;
        }
        const float mult = scale;
#pragma unroll
        for (int r = 0; r < C / 64; ++r) {
          const int t = 2 * (lane + 32 * r);
          float v0 = 0.f, v1 = 0.f;
          if (sl >> 24) {
            float s0 = 0.f, s1 = 0.f;
#pragma unroll
            for (int a = 0; a < (KIND == MapKind::BlockPsd ? 1 : G); ++a) {
              const int aa = KIND == MapKind::BlockPsd ? a0 : a;
              const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(sQ + (aa * M + i) * CS + t));
              const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(sQ + (aa * M + j) * CS + t));
              s0 += x.x * y.x;
              s1 += x.y * y.y;
            }
            v0 = mult * s0 + add;
            v1 = mult * s1 + add;
          }
          *reinterpret_cast<__nv_bfloat162*>(pq_at(ff, t)) = __floats2bfloat162_rn(v0, v1);
        }
      }
      if (tid < 64 && fb + 1 < nfb) sIJ[(buf ^ 1) * 64 + tid] = pack_slot((fb + 1) * 64 + tid);
    } else if constexpr (PAIRED) {
      if (tid < 32 && fb + 1 < nfb) sIJ[(buf ^ 1) * 64 + tid] = pack_pair((fb + 1) * 32 + tid);
    } else if constexpr (PSD) {
      FeatureSlot slot = make_slot<KIND>(mp, fb * 64 + (tid & 63));
      fold_pair_factor<KIND>(slot, mp, false);
      for (int t = tid >> 6; t < C; t += NT / 64)
        sPQ[t * kPS + (tid & 63)] = __float2bfloat16(eval_slot<KIND>(mp, slot, sQ + t * SD, 0.f));
    }
    if (fb + 1 < nfb)
      cp_async_wait_one_pending();
    else
      cp_async_wait_all();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (WG) ws::fence_proxy_async();  // the S tile's cp.async -> the wgmma's reads
#endif
    __syncthreads();
    if constexpr (WG) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
      uint32_t(&a)[4][4] = a_wg;
      if constexpr (!PAIRED) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) load_a_trans_sw(a[ks], sPQ, warp * 16, ks * 16, lane);
      }
      if (mp.normalized)  // before the wgmma: its A registers may not be read until it is waited on (PTX ISA)
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) den_mma(a[ks], ks);
      ws::wgmma_rs_mn_k64(acc, a, ws::sw128_desc(smem_u32(sS) + buf * kAtom));
#else
      __trap();  // not launched: the variants with WG apply only where the sm_90a kernels run
#endif
    } else {
      const bf16* cS = sS + buf * 64 * SD;
      const int f0 = PSD ? 0 : fb * 64;  // column of this block in sPQ
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        uint32_t a[4];
        if constexpr (PAIRED) paired_a(a, ks);
        else if constexpr (TQ) load_a_trans(a, sPQ, CS, warp * 16, ks * 16, lane);
        else load_a(a, sPQ, PW + 8, warp * 16, f0 + ks * 16, lane);
        mma_rows_x_tile<D>(acc, a, cS, SD, ks * 16, lane);
        if (mp.normalized) den_mma(a, ks);
      }
    }
    if (fb + 1 < nfb) store_z(buf ^ 1);  // buf ^ 1 was last read before the previous block's barrier
    __syncthreads();
  }
  // intra-chunk: causal P V
  if constexpr (!TQ) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) load_a(qf[kk], PSD ? sQ : sPQ, PSD ? SD : PW + 8, warp * 16, kk * 16, lane);
  }
  const float eps_lin = KIND == MapKind::SumPsd ? mp.eps * mp.scale : mp.eps;
  const float eps_const = KIND == MapKind::SumPsd ? mp.eps * mp.eps * mp.m : mp.eps * mp.eps * mp.m * mp.g;
  const float c2 = mp.scale * mp.scale;
  const float qn0 = use_eps ? sNormQ[warp * 16 + g] : 0.f, qn1 = use_eps ? sNormQ[warp * 16 + g + 8] : 0.f;
  float rs0 = 0.f, rs1 = 0.f;
  // one 16-key block kb of a key tile (kt, vt; kn: the keys' ‖k‖²): scores, the causal mask on the query chunk's
  // own block (diag), row sums, P·V
  auto key_block = [&](const bf16* kt, const bf16* vt, const float* kn, int kb, bool diag) {
    float p[2][4] = {};
    if constexpr (PSD) {
      psd_pair_squares<KIND, G, M>(p, qf, kt, SD, kb * 16, lane);
    } else {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t bf[4];
        load_b_nk(bf, sPK, PW + 8, kb * 16, ks * 16, lane);
        mma_bf16(p[0], qf[ks], bf[0], bf[1]);
        mma_bf16(p[1], qf[ks], bf[2], bf[3]);
      }
    }
    psd_score_terms<KIND>(p, c2, use_eps, eps_lin, eps_const, qn0, qn1, kn + kb * 16, tq);
    if (diag) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        const int key = nb * 8 + 2 * tq;  // relative to the warp's first row
        if (key > g) p[nb][0] = 0.f;
        if (key + 1 > g) p[nb][1] = 0.f;
        if (key > g + 8) p[nb][2] = 0.f;
        if (key + 1 > g + 8) p[nb][3] = 0.f;
      }
    }
    uint32_t pa[4];
    pack_scores(pa, p);
    rs0 += p[0][0] + p[0][1] + p[1][0] + p[1][1];
    rs1 += p[0][2] + p[0][3] + p[1][2] + p[1][3];
    mma_rows_x_tile<D>(acc, pa, vt, SD, kb * 16, lane);
  };
  // stride > 1 (PSD maps, C = 64): the chunks between the stored state and this one, all keys earlier than every
  // query row (no mask), by the closed form; K_j, V_j in the state buffers (free after the readout; WG: the ψ(Q)
  // and S atoms, 24 KB), ‖k‖² in sZt
  if constexpr (PSD && C == 64 && STRIDE > 1) {
    for (int j = (c / stride) * stride; j < c; ++j) {
      bf16* sKj = WG ? sPQ : sS;
      bf16* sVj = sKj + 64 * SD;
      load_tile<C, D>(sKj, k, j * C, T, tid, NT);
      load_tile<C, D>(sVj, v, j * C, T, tid, NT);
      cp_async_commit();
      cp_async_wait_all();
      __syncthreads();
      if (use_eps && tid < C) sZt[tid] = row_sq_norm(sKj + tid * SD, D);
      __syncthreads();
#pragma unroll
      for (int kb = 0; kb < 4; ++kb) key_block(sKj, sVj, sZt, kb, false);
      __syncthreads();  // every warp is done with K_j, V_j, the norms
    }
  }
  for (int kb = 0; kb <= warp; ++kb) key_block(sK, sV, sNormK, kb, kb == warp);
  rs0 += __shfl_xor_sync(0xffffffffu, rs0, 1);
  rs0 += __shfl_xor_sync(0xffffffffu, rs0, 2);
  rs1 += __shfl_xor_sync(0xffffffffu, rs1, 1);
  rs1 += __shfl_xor_sync(0xffffffffu, rs1, 2);
  const int l0 = warp * 16 + g, l1 = l0 + 8;
  // the inter-chunk denominators sit in columns 0 and 1 of the quad's first lane (tq = 0)
  const float zd0 = __shfl_sync(0xffffffffu, dacc[0] + dacc[1], lane & ~3);
  const float zd1 = __shfl_sync(0xffffffffu, dacc[2] + dacc[3], lane & ~3);
  const float d0 = rs0 + zd0, d1 = rs1 + zd1;
  const float inv0 = mp.normalized ? (d0 != 0.f ? 1.f / d0 : 0.f) : 1.f;
  const float inv1 = mp.normalized ? (d1 != 0.f ? 1.f / d1 : 0.f) : 1.f;
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    const int col = j * 8 + 2 * tq;
    if (t0 + l0 < T)
      *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(t0 + l0) * D + col) =
          __floats2bfloat162_rn(acc[j][0] * inv0, acc[j][1] * inv0);
    if (t0 + l1 < T)
      *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(t0 + l1) * D + col) =
          __floats2bfloat162_rn(acc[j][2] * inv1, acc[j][3] * inv1);
  }
}

}  // namespace chunk2
}  // namespace memcap::kata::cuda
