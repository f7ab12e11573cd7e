// Host side of the two-pass chunked / tree kernels (kata_attention_chunk2.cuh) for one head width D: workspace
// layout, kernel selection by map kind, stage events. Included by kernels/kata_attention_chunk2_d*.cu.
#pragma once
#include <algorithm>
#include <type_traits>
#include "smem_limit.cuh"
#include "kata_attention_chunk2.cuh"
#include "kata_attention_variants.cuh"

namespace memcap::kata::cuda {
namespace chunk2 {

struct Sizes {
  std::int64_t bh, nc, np;
};
inline Sizes sizes_of(const AttentionLaunch& p) {
  return {p.B * p.H, (p.T + p.chunk - 1) / p.chunk, device_map(p.map).n_padded};
}
// Workspace (chunk2_workspace): s_pre bf16 [bh][ceil(nc / stride)][np][D], z_pre fp32 [bh][ceil(nc / stride)][np];
// tree adds s_loc, z_loc fp32;
// the split (segments > 1) adds s_loc, z_loc, s_seg, z_seg fp32 [bh][segments][np][D] / [np].
template <int C, int D, int FB>
constexpr int state_smem() {
  return 3 * C * (D + 8) * 2 + FB * C * kPS * 2 + (C + FB * 128) * 4;
}
// chunk_state_frag_kernel: K and V in two stages each (WG: V as swizzled atoms, up to 1 KB of alignment)
template <bool WG>
constexpr int state_frag_smem() {
  return WG ? 1024 + 2 * ws::kAtom + 2 * 64 * 72 * 2 : 4 * 64 * 72 * 2;
}
// Feature blocks per state program. Two, sharing their K / V tiles, for the segment passes (MODE 1 and 2) on
// grids of at least eight one-block programs per SM, as in the runs that measured the split variant (B = H = 1,
// M_1 at T = 32K ... 128K, M_2 at 128K; docs/perf.md, twenty-third session); one otherwise. The per-head walk
// (MODE 0) keeps one: with two it ran slower (state stage 11.48 ms against 10.30 ms at M_2, B = 8, H = 16,
// T = 32K), though ncu had put that pass at 80 % of the L2 throughput; also when it stores every 4th state
// (2pass-g4 at 128K: 35.83 ms against 26.92 ms, twenty-fifth session).
inline int state_fb(int mode, std::int64_t programs_fb1) {
  return mode != 0 && programs_fb1 >= 8 * static_cast<std::int64_t>(current_arch().sms) ? 2 : 1;
}
// One launch of the state pass: MODE as chunk_state_kernel, `progs` programs along y (cpp chunks each). PSD maps
// at C = D = 64 run chunk_state_frag_kernel (ψ(K) fragments in registers; wg: its products on wgmma), the rest
// chunk_state_kernel.
template <int C, int MODE, MapKind KIND, int D, bool FOLD = true>
void launch_state(const AttentionLaunch& p, const AttnMap& mp, const bf16* k, const bf16* v, void* s_out, float* z_out,
                  int progs, int cpp, const float* s_init, const float* z_init, int stride, cudaStream_t stream,
                  bool wg = false) {
  const Sizes z = sizes_of(p);
  const std::int64_t nfb = z.np / 64;
  auto go = [&](auto kern, int smem, int FB) {
    ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
    kern<<<dim3(static_cast<unsigned>((nfb + FB - 1) / FB), static_cast<unsigned>(progs), static_cast<unsigned>(z.bh)),
           128 * FB, smem, stream>>>(mp, k, v, s_out, z_out, static_cast<int>(p.T), static_cast<int>(z.nc), cpp, s_init,
                                     z_init, stride);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_state_kernel");
  };
  const bool two = nfb >= 2 && state_fb(MODE, nfb * progs * z.bh) == 2;
  if constexpr (C == 64 && D == 64 && (KIND == MapKind::BlockPsd || KIND == MapKind::SumPsd)) {
    auto frag = [&](auto gc, auto wgc) {
      constexpr int G = decltype(gc)::value;
      constexpr bool W = decltype(wgc)::value;
      if (two) go(chunk_state_frag_kernel<MODE, KIND, G, 2, FOLD, W>, state_frag_smem<W>(), 2);
      else go(chunk_state_frag_kernel<MODE, KIND, G, 1, FOLD, W>, state_frag_smem<W>(), 1);
    };
    auto by_g = [&](auto wgc) {
      if (p.map.g == 1) frag(std::integral_constant<int, 1>{}, wgc);
      else if (p.map.g == 2) frag(std::integral_constant<int, 2>{}, wgc);
      else frag(std::integral_constant<int, 4>{}, wgc);
    };
    if (wg) by_g(std::true_type{});
    else by_g(std::false_type{});
  } else {
    if (two) go(chunk_state_kernel<C, MODE, KIND, D, 2, FOLD>, state_smem<C, D, 2>(), 2);
    else go(chunk_state_kernel<C, MODE, KIND, D, 1, FOLD>, state_smem<C, D, 1>(), 1);
  }
}
template <int C, MapKind KIND, int D>
constexpr int output_smem() {
  constexpr bool PSD = KIND == MapKind::BlockPsd || KIND == MapKind::SumPsd;
  constexpr int PW = PSD || D < 64 ? 64 : D;
  return (3 * C * (D + 8) + C * (PW + 8) + (PSD ? 0 : C * (PW + 8)) + 2 * 64 * (D + 8)) * 2 + (2 * 64 + 2 * C) * 4 +
         2 * 64 * 4;
}
// The wgmma readout's layout (chunk_output_kernel, WG): up to 1 KB of alignment, three swizzled atoms, Q, K, V.
template <int C, int D>
constexpr int output_smem_wg() {
  return 1024 + 3 * ws::kAtom + 3 * C * (D + 8) * 2 + (2 * 64 + 2 * C) * 4 + 2 * 64 * 4;
}

// kind(std::integral_constant<MapKind, K>) for the state pass: BlockPsd, SumPsd or the family (Linear).
template <class F>
void by_state_kind(const MapParams& m, F&& f) {
  if (m.kind == MapKind::BlockPsd) f(std::integral_constant<MapKind, MapKind::BlockPsd>{});
  else if (m.kind == MapKind::SumPsd) f(std::integral_constant<MapKind, MapKind::SumPsd>{});
  else f(std::integral_constant<MapKind, MapKind::Linear>{});
}

// Chunk-local (MODE 1) states summed over `cpp` chunks per program: s_loc, z_loc fp32 [bh][ceil(nc/cpp)][np][D];
// FOLD as chunk_state_kernel (false: the fused kernel's segment states). PSD maps at C = D = 64 with cpp <= 4 (the
// block scans) and no wg: chunk_local_multi_kernel, each CTA several feature blocks from one K / V load; as many
// per CTA as leave at least 12 CTAs per SM (all of them at large B·H). paired: the states' feature rows in the
// paired order of M_g (chunk_local_multi_kernel only: M_g, C = D = 64, cpp <= 4, no wg). half (paired only): s_loc
// holds bf16 states (kChunk2HalfBlocks).
template <int C, int D, bool FOLD = true>
void launch_local_states(const AttentionLaunch& p, int cpp, const void* k, const void* v, float* s_loc, float* z_loc,
                         cudaStream_t stream, bool wg = false, bool paired = false, bool half = false) {
  const Sizes z = sizes_of(p);
  const int progs = static_cast<int>((z.nc + cpp - 1) / cpp);
  if (paired && (!FOLD || C != 64 || D != 64 || p.map.kind != MapKind::BlockPsd || cpp > 4 || wg))
    cuda_detail::throw_user_error("chunked attention: the paired feature order needs M_g, C = d = 64 and blocks of "
                                  "<= 4 chunks");
  if (half && !paired) cuda_detail::throw_user_error("chunked attention: bf16 block states need the paired order");
  if constexpr (C == 64 && D == 64) {
    if (p.map.is_psd() && cpp <= 4 && !wg) {
      const int nfb = static_cast<int>(z.np / 64);
      const std::int64_t want = 12 * static_cast<std::int64_t>(current_arch().sms);
      const std::int64_t groups = std::min<std::int64_t>(std::max<std::int64_t>(1, (want + progs * z.bh - 1) /
                                                                                       (progs * z.bh)), (nfb + 1) / 2);
      const int fb_per = static_cast<int>((nfb + groups - 1) / groups);
      const int ngroups = (nfb + fb_per - 1) / fb_per;
      constexpr int smem = 8 * 64 * 72 * 2;  // [K x 4][V x 4] in rows of 72
      auto go = [&](auto kern, auto* s_out) {
        ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
        kern<<<dim3(static_cast<unsigned>(ngroups), static_cast<unsigned>(progs), static_cast<unsigned>(z.bh)), 256,
               smem, stream>>>(attn_map(p), static_cast<const bf16*>(k), static_cast<const bf16*>(v), s_out, z_loc,
                               static_cast<int>(p.T), static_cast<int>(z.nc), cpp, fb_per);
        MEMCAP_CUDA_CHECK_LAUNCH("chunk_local_multi_kernel");
      };
      auto by_g = [&](auto kind, auto pc, auto* s_out) {
        constexpr MapKind K = decltype(kind)::value;
        constexpr bool PR = decltype(pc)::value;
        using SOut = std::remove_pointer_t<decltype(s_out)>;
        if (p.map.g == 1) go(chunk_local_multi_kernel<K, 1, FOLD, PR, SOut>, s_out);
        else if (p.map.g == 2) go(chunk_local_multi_kernel<K, 2, FOLD, PR, SOut>, s_out);
        else go(chunk_local_multi_kernel<K, 4, FOLD, PR, SOut>, s_out);
      };
      if (p.map.kind == MapKind::BlockPsd) {
        if constexpr (FOLD) {  // the paired order is for the stored states (the output pass), not the fused walk's
          constexpr std::integral_constant<MapKind, MapKind::BlockPsd> bp{};
          if (paired && half) return by_g(bp, std::true_type{}, reinterpret_cast<bf16*>(s_loc));
          if (paired) return by_g(bp, std::true_type{}, s_loc);
        }
        return by_g(std::integral_constant<MapKind, MapKind::BlockPsd>{}, std::false_type{}, s_loc);
      }
      return by_g(std::integral_constant<MapKind, MapKind::SumPsd>{}, std::false_type{}, s_loc);
    }
  }
  by_state_kind(p.map, [&](auto kind) {
    launch_state<C, 1, decltype(kind)::value, D, FOLD>(p, attn_map(p), static_cast<const bf16*>(k),
                                                       static_cast<const bf16*>(v), s_loc, z_loc, progs, cpp,
                                                       nullptr, nullptr, 1, stream, wg);
  });
}

// segments == 1: the state pass walks all chunks of a head (MODE 0). segments > 1 (the `split` variant, small
// B·H): local states of `segments` runs of chunks (MODE 1), an exclusive scan over the segments, then each
// segment's walk from its entering state (MODE 2); stages: state = the local states, scan = the scan and the
// walks, output = the output pass. stride > 1 (chunked form, PSD maps, C = 64; one walk or segments): only every
// stride-th chunk's entering state is stored; the output pass adds the chunks in between by the closed form.
// opts & kChunk2Wgmma: the state pass (walk or block-local states) and the output pass's readout on wgmma
// (chunk_state_frag_kernel's and chunk_output_kernel's WG: sm_90a, stride 4, C = D = 64). opts & kChunk2Paired: the
// paired feature order of M_g (block scans, stride 4, C = D = 64): chunk_local_multi_kernel's and
// chunk_output_kernel's PAIRED; with wgmma, the block-local states stay on chunk_local_multi_kernel.
template <int C, int D>
void run(const AttentionLaunch& p, AttentionForm form, int segments, int stride, const AttentionPtrs& a,
         cudaStream_t stream, unsigned opts = 0) {
  const bool wg = (opts & kChunk2Wgmma) != 0, paired = (opts & kChunk2Paired) != 0,
             half = (opts & kChunk2HalfBlocks) != 0;
  const Sizes z = sizes_of(p);
  if (paired && (C != 64 || D != 64 || stride != 4 || p.map.kind != MapKind::BlockPsd || p.map.g > 4 ||
                 (segments != kChunk2BlockScan && segments != kChunk2BlockScanColumns)))
    cuda_detail::throw_user_error("chunked attention: the paired feature order needs M_g (g <= 4), C = d = 64 and "
                                  "a block scan of stride 4");
  if (wg && (C != 64 || D != 64 || stride != 4))
    cuda_detail::throw_user_error("chunked attention: the wgmma output pass needs C = d = 64 and the state stride 4");
  if (half && (!paired || segments != kChunk2BlockScanColumns))
    cuda_detail::throw_user_error("chunked attention: bf16 block states need the paired order and the column scan");
  // the output pass adds the chunks between stored states by the PSD closed form at C = 64 only
  if ((stride != 1 && stride != 4) || (stride > 1 && (form != AttentionForm::chunked || C != 64 || !p.map.is_psd())))
    cuda_detail::throw_user_error(
        "chunked attention: the state stride is 1 or 4, and 4 needs the chunked form, a PSD map and C = 64");
  const AttnMap mp = attn_map(p);
  const int T = static_cast<int>(p.T), nc = static_cast<int>(z.nc);
  const std::int64_t slots = (z.nc + stride - 1) / stride;  // stored entering states per head
  const std::int64_t nS = z.bh * slots * z.np * D, nZ = z.bh * slots * z.np;
  auto* ws = static_cast<unsigned char*>(a.workspace);
  bf16* s_pre = reinterpret_cast<bf16*>(ws);
  float* z_pre = reinterpret_cast<float*>(ws + nS * 2);
  const auto* q = static_cast<const bf16*>(a.q);
  const auto* k = static_cast<const bf16*>(a.k);
  const auto* v = static_cast<const bf16*>(a.v);
  if (form == AttentionForm::chunked && (segments == kChunk2BlockScan || segments == kChunk2BlockScanColumns)) {
    // local states of the blocks of `stride` chunks (MODE 1, all in parallel), then one exclusive scan over the
    // blocks: the state entering chunk stride * j, with no walk
    float* s_loc = reinterpret_cast<float*>(ws + nS * 2 + nZ * 4);
    float* z_loc = s_loc + nS;
    launch_local_states<C, D>(p, stride, k, v, s_loc, z_loc, stream, wg && !paired, paired, half);
    if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[0], stream));
    const auto scan = segments == kChunk2BlockScan ? launch_scan_tree : launch_scan_columns;
    if (half) launch_scan_columns_bf16(s_loc, s_pre, z.bh, slots, z.np * D, stream);
    else scan(s_loc, s_pre, gpu::DType::bf16, z.bh, slots, z.np * D, stream);
    scan(z_loc, z_pre, gpu::DType::f32, z.bh, slots, z.np, stream);
    if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[1], stream));
  } else if (form == AttentionForm::chunked && segments <= 1) {
    by_state_kind(p.map, [&](auto kind) {
      launch_state<C, 0, decltype(kind)::value, D>(p, mp, k, v, s_pre, z_pre, 1, nc, nullptr, nullptr, stride, stream,
                                                   wg);
    });
    if (p.stage_events) {
      MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[0], stream));
      MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[1], stream));
    }
  } else if (form == AttentionForm::chunked) {
    const int cps = (nc + segments - 1) / segments;
    const std::int64_t nSs = z.bh * segments * z.np * D, nZs = z.bh * segments * z.np;
    float* s_loc = reinterpret_cast<float*>(ws + nS * 2 + nZ * 4);
    float* z_loc = s_loc + nSs;
    float* s_seg = z_loc + nZs;
    float* z_seg = s_seg + nSs;
    launch_local_states<C, D>(p, cps, k, v, s_loc, z_loc, stream);
    if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[0], stream));
    // the scan over segments: Hillis-Steele in shared memory (log2(segments) rounds; a thread walking the segments
    // one after another made a chain of `segments` dependent global loads, up to ~1000 at B = H = 1)
    launch_scan_tree(s_loc, s_seg, gpu::DType::f32, z.bh, segments, z.np * D, stream);
    launch_scan_tree(z_loc, z_seg, gpu::DType::f32, z.bh, segments, z.np, stream);
    by_state_kind(p.map, [&](auto kind) {
      launch_state<C, 2, decltype(kind)::value, D>(p, mp, k, v, s_pre, z_pre, segments, cps, s_seg, z_seg, stride,
                                                   stream);
    });
    if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[1], stream));
  } else {
    float* s_loc = reinterpret_cast<float*>(ws + nS * 2 + nZ * 4);
    float* z_loc = s_loc + nS;
    launch_state<C, 1, MapKind::Linear, D>(p, mp, k, v, s_loc, z_loc, nc, 1, nullptr, nullptr, 1, stream);
    if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[0], stream));
    launch_scan_tree(s_loc, s_pre, gpu::DType::bf16, z.bh, z.nc, z.np * D, stream);
    if (p.normalized) launch_scan_tree(z_loc, z_pre, gpu::DType::f32, z.bh, z.nc, z.np, stream);
    if (p.stage_events) MEMCAP_CUDA_CHECK(cudaEventRecord(p.stage_events[1], stream));
  }
  auto launch_out = [&](auto kern, int smem) {
    ::memcap::cuda_detail::raise_dynamic_smem(kern, smem);
    kern<<<dim3(static_cast<unsigned>(nc), static_cast<unsigned>(z.bh)), C * 2, smem, stream>>>(
        mp, q, k, v, s_pre, z_pre, static_cast<bf16*>(a.out), T, nc);
    MEMCAP_CUDA_CHECK_LAUNCH("chunk_output_kernel");
  };
  auto psd = [&](auto kind) {
    constexpr MapKind K = decltype(kind)::value;
    auto by_g = [&](auto st, auto wgc, auto pc) {
      constexpr int S = decltype(st)::value;
      constexpr bool W = decltype(wgc)::value, PR = decltype(pc)::value;
      constexpr int smem = W ? output_smem_wg<C, D>() : output_smem<C, K, D>();
      if (p.map.g == 1) launch_out(chunk_output_kernel<C, K, 1, D, S, W, PR>, smem);
      else if (p.map.g == 2) launch_out(chunk_output_kernel<C, K, 2, D, S, W, PR>, smem);
      else launch_out(chunk_output_kernel<C, K, 4, D, S, W, PR>, smem);
    };
    if constexpr (C == 64 && D == 64 && K == MapKind::BlockPsd) {
      if (paired && wg) return by_g(std::integral_constant<int, 4>{}, std::true_type{}, std::true_type{});
      if (paired) return by_g(std::integral_constant<int, 4>{}, std::false_type{}, std::true_type{});
    }
    if constexpr (C == 64 && D == 64) {
      if (wg) return by_g(std::integral_constant<int, 4>{}, std::true_type{}, std::false_type{});
    }
    if constexpr (C == 64) {
      if (stride == 4) return by_g(std::integral_constant<int, 4>{}, std::false_type{}, std::false_type{});
    }
    by_g(std::integral_constant<int, 1>{}, std::false_type{}, std::false_type{});
  };
  if (p.map.kind == MapKind::BlockPsd) psd(std::integral_constant<MapKind, MapKind::BlockPsd>{});
  else if (p.map.kind == MapKind::SumPsd) psd(std::integral_constant<MapKind, MapKind::SumPsd>{});
  else launch_out(chunk_output_kernel<C, MapKind::Linear, 1, D, 1>, output_smem<C, MapKind::Linear, D>());
}

}  // namespace chunk2
}  // namespace memcap::kata::cuda
