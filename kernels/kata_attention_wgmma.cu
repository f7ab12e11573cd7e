// Hopper (sm_90a) quadratic causal KATA attention forward for M_1 / M_2, bf16, d = dv = 64 (spec kata.md
// §5.1): FlashAttention-3-style warp specialisation. One producer warpgroup streams K/V tiles with TMA into
// an mbarrier-guarded ring; each consumer warpgroup owns 64 query rows and overlaps, within itself, the
// squaring of score tile j with the P.V wgmma of tile j-1 (and, across warpgroups, everything else).
#include "core/gpu.hpp"
#include "cuda_check.cuh"
#include "kata_attention_wgmma.cuh"

#include <cuda.h>  // CUtensorMap and its enums only; the encode function comes through the runtime
#include <cudaTypedefs.h>

#include <cstring>
#include <string>
#include <type_traits>

namespace memcap::kata::cuda {
namespace {

constexpr int kKeys = 64;             // keys per K/V tile, = query rows per consumer warpgroup
constexpr int kTileBytes = 64 * 128;  // 64 rows x 64 bf16 in the 128-byte-swizzled layout TMA writes

template <int NWG, int STAGES>
struct WsLayout {  // byte offsets from the 1024-aligned start of dynamic shared memory
  static constexpr int q = 0;                               // NWG query tiles
  static constexpr int k = q + NWG * kTileBytes;            // STAGES key tiles
  static constexpr int v = k + STAGES * kTileBytes;         // STAGES value tiles
  static constexpr int kn = v + STAGES * kTileBytes;        // per warpgroup 2 x 64 key norms (eps only)
  static constexpr int bar = kn + NWG * 2 * kKeys * 4;      // full[STAGES], empty[STAGES], q
  static constexpr int smem = 1024 + bar + (2 * STAGES + 1) * 8;
};

#define MEMCAP_WS_D32                                                                                          \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),  \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),    \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),   \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define MEMCAP_WS_DLIST                                                                                  \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27," \
  "%28,%29,%30,%31}"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Shared-memory matrix descriptor for a 128B-swizzled tile: both byte offsets 1024 (8 rows of 128 B), so
// either reading of LBO/SBO gives the stride between 8-row groups.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(1024 >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ float sw128_elem(const unsigned char* tile, int r, int c) {
  return __bfloat162float(
      *reinterpret_cast<const __nv_bfloat16*>(tile + r * 128 + (((c >> 3) ^ (r & 7)) << 4) + (c & 7) * 2));
}
// Register fences: keep the compiler from moving reads/writes of wgmma operands across async regions.
__device__ __forceinline__ void fence_f(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void fence_u(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// D(64x64 fp32) (+)= A(64x16, smem descriptor, K-major) * B(16x64, smem descriptor, K-major)
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " MEMCAP_WS_DLIST ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : MEMCAP_WS_D32
      : "l"(da), "l"(db), "r"(accumulate));
}
// D(64x64 fp32) += A(64x16, registers) * B(16x64, smem descriptor, MN-major)
__device__ __forceinline__ void wgmma_rs_mn(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " MEMCAP_WS_DLIST
      ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : MEMCAP_WS_D32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_LOOP:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_LOOP;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Box {64 features, 64 rows, 1 head} at (0, row, head) of a [BH][T][64] bf16 tensor -> smem, completing
// on `bar`; rows >= T arrive as zeros.
__device__ __forceinline__ void tma_load_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar, int row, int head) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(0), "r"(row), "r"(head)
      : "memory");
}

// P = sum_a S_a^2 (+ eps terms), causal mask on the diagonal tile, row sums; packed to bf16 A fragments
// of P.V (k-step kk = keys 16kk..16kk+15). Accumulator layout of m64n64: element 4j+e of this thread is
// row lrow0 + 8*(e>>1), key 8j + 2tq + (e&1).
template <bool DIAG, bool EPS, int G>
__device__ __forceinline__ void square_scores(const float (&s)[G][32], uint32_t (&pa)[4][4], float (&rs)[2],
                                              int lrow0, int tq, const float (&qn)[2], const float* kn, float eps_lin,
                                              float eps_const) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = 0.f;
#pragma unroll
      for (int a = 0; a < G; ++a) x = fmaf(s[a][4 * j + e], s[a][4 * j + e], x);
      const int key = 8 * j + 2 * tq + (e & 1), row = lrow0 + 8 * (e >> 1);
      if (EPS) x += eps_lin * (qn[e >> 1] + kn[key]) + eps_const;
      if (DIAG && key > row) x = 0.f;
      p[e] = x;
    }
    rs[0] += p[0] + p[1];
    rs[1] += p[2] + p[3];
    pa[j >> 1][(j & 1) * 2 + 0] = pack_bf16(p[0], p[1]);
    pa[j >> 1][(j & 1) * 2 + 1] = pack_bf16(p[2], p[3]);
  }
}
#endif

// Grid (query tiles of 64*NWG rows, longest first; B*H). Threads: NWG consumer warpgroups + 1 producer.
template <int G, int NWG, int STAGES>
__global__ void __launch_bounds__(128 * (NWG + 1), 1)
    quadratic_ws_kernel(const __grid_constant__ CUtensorMap tmq, const __grid_constant__ CUtensorMap tmk,
                        const __grid_constant__ CUtensorMap tmv, MapParams mp, __nv_bfloat16* __restrict__ out,
                        int T) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = WsLayout<NWG, STAGES>;
  static_assert(STAGES >= NWG - 1, "a warpgroup past its diagonal releases no stages: the ring must cover that");
  constexpr int M = 64 / G, KS = M / 16;
  constexpr int kProducerRegs = 24, kConsumerRegs = NWG == 3 ? 160 : 240;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* sbase = smem_raw + (base - raw);
  const uint32_t bar_full = base + L::bar, bar_empty = bar_full + 8 * STAGES, bar_q = bar_empty + 8 * STAGES;

  const int tid = threadIdx.x, wg = tid >> 7;
  const int qt = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int head = static_cast<int>(blockIdx.y);
  const int q0 = qt * 64 * NWG;
  const int nkt = min(NWG * qt + NWG, (T + kKeys - 1) / kKeys);  // key tiles this CTA streams

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bar_full + 8 * s, 1);
      mbar_init(bar_empty + 8 * s, NWG * 4);  // lane 0 of every consumer warp
    }
    mbar_init(bar_q, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == NWG) {  // ---- producer warpgroup: one thread drives the TMA engine
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (tid == NWG * 128) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmk)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmv)) : "memory");
      mbar_expect_tx(bar_q, NWG * kTileBytes);
#pragma unroll
      for (int w = 0; w < NWG; ++w) tma_load_tile(base + L::q + w * kTileBytes, &tmq, bar_q, q0 + 64 * w, head);
      for (int j = 0; j < nkt; ++j) {
        const int s = j % STAGES;
        if (j >= STAGES) mbar_wait(bar_empty + 8 * s, ((j / STAGES) - 1) & 1);
        mbar_expect_tx(bar_full + 8 * s, 2 * kTileBytes);
        tma_load_tile(base + L::k + s * kTileBytes, &tmk, bar_full + 8 * s, j * kKeys, head);
        tma_load_tile(base + L::v + s * kTileBytes, &tmv, bar_full + 8 * s, j * kKeys, head);
      }
    }
    return;
  }

  // ---- consumer warpgroup wg: query rows q0 + 64*wg ..
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int wwarp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tq = lane & 3;
  const int lrow0 = wwarp * 16 + g;
  const int diag = NWG * qt + wg;          // this warpgroup's diagonal key tile
  const int last = min(nkt - 1, diag);     // tiles 0..last; >= the CTA's first diagonal, see static_assert
  const bool use_eps = mp.eps != 0.f;
  const float eps_lin = mp.eps, eps_const = mp.eps * mp.eps * mp.m * mp.groups;
  const unsigned char* myq = sbase + L::q + wg * kTileBytes;
  float* kn_buf = reinterpret_cast<float*>(sbase + L::kn) + wg * 2 * kKeys;
  const uint64_t dq = sw128_desc(base + L::q + wg * kTileBytes);
  const uint64_t dk = sw128_desc(base + L::k), dv = sw128_desc(base + L::v);

  mbar_wait(bar_q, 0);
  float qn[2] = {0.f, 0.f};
  if (use_eps) {
    for (int c = tq * 16; c < tq * 16 + 16; ++c) {
      const float x0 = sw128_elem(myq, lrow0, c), x1 = sw128_elem(myq, lrow0 + 8, c);
      qn[0] += x0 * x0;
      qn[1] += x1 * x1;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      qn[h] += __shfl_xor_sync(0xffffffffu, qn[h], 1);
      qn[h] += __shfl_xor_sync(0xffffffffu, qn[h], 2);
    }
  }

  float o[32], s[G][32], rs[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] = 0.f;
#pragma unroll
  for (int a = 0; a < G; ++a)
#pragma unroll
    for (int i = 0; i < 32; ++i) s[a][i] = 0.f;

  // One pipeline step: with SCORES, wait for tile j (and its key norms, eps only) and issue
  // S_a = Q_a K_a^T for it; with PV, issue O += P V_pv with P in pa; one commit group each (both flags are
  // compile-time: a wgmma under a run-time branch makes ptxas serialise them, C7520). Every
  // register operand is fenced before wgmma.fence, so no ordinary instruction touches a wgmma input while
  // the stage is open. Returns tile j's key norms.
  auto issue_step = [&](auto scores_tag, auto pv_tag, int j, int pv, uint32_t(&pa)[4][4]) -> const float* {
    constexpr bool SCORES = decltype(scores_tag)::value, PV = decltype(pv_tag)::value;
    const float* kn = kn_buf + (j & 1) * kKeys;
    const int st = j % STAGES;
    if constexpr (SCORES) {
      mbar_wait(bar_full + 8 * st, (j / STAGES) & 1);
      if (use_eps) {  // 2 threads per key; double-buffered, one named barrier per tile for this warpgroup
        const int key = (tid & 127) >> 1, half = tid & 1;
        const unsigned char* tile = sbase + L::k + st * kTileBytes;
        float acc = 0.f;
        for (int c = half * 32; c < half * 32 + 32; ++c) {
          const float x = sw128_elem(tile, key, c);
          acc += x * x;
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        if (half == 0) const_cast<float*>(kn)[key] = acc;
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
      }
    }
#pragma unroll
    for (int a = 0; a < G; ++a)
#pragma unroll
      for (int i = 0; i < 32; ++i) fence_f(s[a][i]);
#pragma unroll
    for (int i = 0; i < 32; ++i) fence_f(o[i]);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int h = 0; h < 4; ++h) fence_u(pa[kk][h]);
    wg_fence();
    if constexpr (SCORES) {
#pragma unroll
      for (int a = 0; a < G; ++a)
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          const uint32_t off = static_cast<uint32_t>((a * M + ks * 16) * 2) >> 4;
          wgmma_ss(s[a], dq + off, dk + ((st * kTileBytes) >> 4) + off, ks > 0);
        }
      wg_commit();
    }
    if constexpr (PV) {
      const int sv = pv % STAGES;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_rs_mn(o, pa[kk], dv + ((sv * kTileBytes + kk * 16 * 128) >> 4));
      wg_commit();
    }
    return kn;
  };
  auto square = [&](int j, const float* kn, uint32_t (&dst)[4][4]) {
    if (use_eps) {
      if (j == diag) square_scores<true, true, G>(s, dst, rs, lrow0, tq, qn, kn, eps_lin, eps_const);
      else square_scores<false, true, G>(s, dst, rs, lrow0, tq, qn, kn, eps_lin, eps_const);
    } else {
      if (j == diag) square_scores<true, false, G>(s, dst, rs, lrow0, tq, qn, kn, eps_lin, eps_const);
      else square_scores<false, false, G>(s, dst, rs, lrow0, tq, qn, kn, eps_lin, eps_const);
    }
  };
  auto release = [&](int j) {  // every wgmma that read stage j % STAGES has retired in this warp
    if (lane == 0) mbar_arrive(bar_empty + 8 * (j % STAGES));
  };

  // P fragments alternate between two register sets (no copies: a wgmma may still read the other one).
  uint32_t pa0[4][4], pa1[4][4];
  {
    const float* kn = issue_step(std::true_type{}, std::false_type{}, 0, -1, pa0);
    wg_wait<0>();
#pragma unroll
    for (int a = 0; a < G; ++a)
#pragma unroll
      for (int i = 0; i < 32; ++i) fence_f(s[a][i]);
    square(0, kn, pa0);
  }
  // Step j: tensor core runs S_j, then P_{j-1} V_{j-1} (P in cur); meanwhile S_j is squared into nxt.
  auto step = [&](int j, uint32_t(&cur)[4][4], uint32_t(&nxt)[4][4]) {
    const float* kn = issue_step(std::true_type{}, std::true_type{}, j, j - 1, cur);
    wg_wait<1>();  // S_j has landed; P V may still run while we square
#pragma unroll
    for (int a = 0; a < G; ++a)
#pragma unroll
      for (int i = 0; i < 32; ++i) fence_f(s[a][i]);
    square(j, kn, nxt);
    wg_wait<0>();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int h = 0; h < 4; ++h) fence_u(cur[kk][h]);  // cur stays unclobbered until P V retired
    release(j - 1);
  };
  int j = 1;
  for (; j + 1 <= last; j += 2) {
    step(j, pa0, pa1);
    step(j + 1, pa1, pa0);
  }
  if (j <= last) {
    step(j, pa0, pa1);
    issue_step(std::false_type{}, std::true_type{}, 0, last, pa1);
  } else {
    issue_step(std::false_type{}, std::true_type{}, 0, last, pa0);
  }
  wg_wait<0>();
#pragma unroll
  for (int i = 0; i < 32; ++i) fence_f(o[i]);
  release(last);

  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float r = rs[h];
    r += __shfl_xor_sync(0xffffffffu, r, 1);
    r += __shfl_xor_sync(0xffffffffu, r, 2);
    inv[h] = mp.normalized ? (r != 0.f ? 1.f / r : 0.f) : 1.f;
  }
  out += static_cast<std::int64_t>(head) * T * 64;
  const int r0 = q0 + wg * 64 + lrow0, r1 = r0 + 8;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int col = j * 8 + 2 * tq;
    if (r0 < T)
      *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(r0) * 64 + col) =
          __floats2bfloat162_rn(o[4 * j] * inv[0], o[4 * j + 1] * inv[0]);
    if (r1 < T)
      *reinterpret_cast<__nv_bfloat162*>(out + static_cast<std::int64_t>(r1) * 64 + col) =
          __floats2bfloat162_rn(o[4 * j + 2] * inv[1], o[4 * j + 3] * inv[1]);
  }
#endif
}

__global__ void wgmma_probe_kernel(int* flag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *flag = 1;
#else
  *flag = 0;
#endif
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda, so the
// binaries still start on machines without a driver).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    MEMCAP_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                                       &status));
    if (status != cudaDriverEntryPointSuccess || p == nullptr)
      cuda_detail::throw_device_error("the CUDA driver has no cuTensorMapEncodeTiled (TMA needs driver >= 12.0)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// [BH][T][64] bf16 as a 3-D tensor, boxes of 64 x 64 x 1, 128-byte swizzle, zero fill past T.
CUtensorMap tile_map(const void* ptr, std::int64_t T, std::int64_t BH) {
  CUtensorMap map;
  std::memset(&map, 0, sizeof map);
  const cuuint64_t dims[3] = {64, static_cast<cuuint64_t>(T), static_cast<cuuint64_t>(BH)};
  const cuuint64_t strides[2] = {128, static_cast<cuuint64_t>(T) * 128};
  const cuuint32_t box[3] = {64, 64, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(ptr), dims,
                                          strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    cuda_detail::throw_device_error("cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(r)));
  return map;
}

template <int G, int NWG, int STAGES>
void launch_ws(const MapParams& mp, const AttentionLaunch& p, const void* q, const void* k, const void* v, void* out,
               cudaStream_t stream) {
  auto kern = quadratic_ws_kernel<G, NWG, STAGES>;
  constexpr int smem = WsLayout<NWG, STAGES>::smem;
  MEMCAP_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const std::int64_t BH = p.B * p.H;
  const CUtensorMap mq = tile_map(q, p.T, BH), mk = tile_map(k, p.T, BH), mv = tile_map(v, p.T, BH);
  const dim3 grid(static_cast<unsigned>((p.T + 64 * NWG - 1) / (64 * NWG)), static_cast<unsigned>(BH));
  kern<<<grid, 128 * (NWG + 1), smem, stream>>>(mq, mk, mv, mp, static_cast<__nv_bfloat16*>(out),
                                                static_cast<int>(p.T));
  MEMCAP_CUDA_CHECK_LAUNCH("quadratic_ws_kernel");
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// True when this binary holds the sm_90a build of the kernel and the device runs it (probed once).
bool wgmma_available() {
  static const bool ok = [] {
    gpu::Buffer d(sizeof(int));
    int h = 0;
    wgmma_probe_kernel<<<1, 1>>>(static_cast<int*>(d.get()));
    MEMCAP_CUDA_CHECK_LAUNCH("wgmma_probe_kernel");
    MEMCAP_CUDA_CHECK(cudaMemcpy(&h, d.get(), sizeof(int), cudaMemcpyDeviceToHost));
    return h == 1;
  }();
  return ok;
}

}  // namespace

const char* launch_quadratic_wgmma(const MapParams& mp, const AttentionLaunch& p, const void* q, const void* k,
                                   const void* v, void* out, cudaStream_t stream, const char* variant) {
  const bool applies = p.dtype == DType::bf16 && p.d == 64 && p.dv == 64 && p.map_kind == kPsdBlock &&
                       (p.groups == 1 || p.groups == 2) && aligned16(q) && aligned16(k) && aligned16(v) &&
                       aligned16(out) && wgmma_available();
  if (!applies) return nullptr;
  const bool two = variant != nullptr && std::string(variant) == "ws2";
  if (two) {
    if (p.groups == 1) launch_ws<1, 2, 4>(mp, p, q, k, v, out, stream);
    else launch_ws<2, 2, 4>(mp, p, q, k, v, out, stream);
    return "quadratic/mma-bf16/ws2";
  }
  if (p.groups == 1) launch_ws<1, 3, 4>(mp, p, q, k, v, out, stream);
  else launch_ws<2, 3, 4>(mp, p, q, k, v, out, stream);
  return "quadratic/mma-bf16/ws3";
}

}  // namespace memcap::kata::cuda
