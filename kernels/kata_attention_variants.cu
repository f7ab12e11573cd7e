// The KATA attention variant table and the one validation of a launch (kata_attention_variants.cuh).
// Order in the table = preference: the first variant that applies is the default for a shape.
#include "kata_attention_variants.cuh"

#include <string>

#include "cuda_check.cuh"
#include "kata_feature_map.cuh"

namespace memcap::kata::cuda {
namespace {

using P = const AttentionLaunch&;
using A = const DeviceArch&;
constexpr int kMaxSmem = 200 * 1024;  // what a scalar kernel may ask for (the H100/H200 opt-in limit is 227 KB)

std::size_t no_workspace(const AttentionLaunch&) { return 0; }

const char* form_name(AttentionForm f) {
  return f == AttentionForm::quadratic ? "quadratic" : (f == AttentionForm::chunked ? "chunked" : "tree");
}

// Preferences measured on the H200 (docs/perf.md, "kata attention kernels"): for Σ_g at d <= 64 the mma.sync kernel
// with 16 rows per warp beats the Hopper kernel (4 or 16 score accumulators per element); the on-chip chunked
// pass wins where one CTA holds the whole state (n_ψ = d maps); for the PSD maps at small B*H the split pass
// through memory beats it (B = H = 1, d = 64, T = 32K ... 128K: M_2 0.260 / 0.471 / 1.025 ms against 0.409 /
// 0.859 / 1.634, M_1 0.526 / 0.991 / 1.905 against 0.829 / 1.580 / 3.101; twenty-third session), and storing
// every 4th state beats storing each (split-g4, 2pass-g4; twenty-fifth session, below).
bool sum_psd_small(P p) { return p.map.kind == MapKind::SumPsd && p.d <= 64; }
// 192 query rows per CTA (ws3) leave a small grid (B*H*T/192 CTAs, one per SM) with a ragged last wave: below
// about four waves the 128-row CTAs of ws2 balance better (B = H = 1, T = 32K: 0.285 ms against 0.362 ms).
bool many_waves(P p, A a) { return p.B * p.H * ((p.T + 191) / 192) >= 4 * static_cast<std::int64_t>(a.sms); }
bool fused_pays(P p) { return p.map.is_linear_family(); }
// The variants that store every 4th chunk's entering state (the output pass's closed form: PSD maps, C = 64).
bool stride4_applies(P p, A a) {
  return a.cc >= 80 && p.map.is_psd() && p.chunk == 64 && chunk2_supported(p, AttentionForm::chunked);
}

// The paired-order variants of M_g at d = 64 (kChunk2Paired | OPTS; the column scan over blocks of 4 chunks).
template <unsigned OPTS>
bool paired_applies(P p, A a) {
  return ((OPTS & kChunk2Wgmma) == 0 || a.wgmma) && p.d == 64 && p.map.kind == MapKind::BlockPsd &&
         stride4_applies(p, a);
}
std::size_t column_scan_workspace(P p) {
  return chunk2_workspace(p, AttentionForm::chunked, kChunk2BlockScanColumns, 4);
}
template <unsigned OPTS>
void launch_paired(P p, const AttentionPtrs& x, cudaStream_t s) {
  launch_chunk2(p, AttentionForm::chunked, kChunk2BlockScanColumns, 4, x, s, kChunk2Paired | OPTS);
}
bool always(P, A) { return true; }
bool never(P, A) { return false; }

std::vector<KernelVariant> make_table() {
  using X = const AttentionPtrs&;
  constexpr unsigned kW = kChunk2Wgmma, kH = kChunk2HalfBlocks;  // the paired variants' opts
  std::vector<KernelVariant> t;
  // ---- quadratic (§5.1)
  t.push_back({AttentionForm::quadratic, "ws3", "tensor cores (wgmma)",
               "Hopper warp-specialised TMA + wgmma, 3 consumer warpgroups (192 query rows per CTA); d <= 64",
               [](P p, A a) { return a.wgmma && quad_ws_supported(p, 3); }, no_workspace,
               [](P p, X x, cudaStream_t s) { launch_quad_ws(p, 3, x, s); },
               [](P p, A a) { return !sum_psd_small(p) && many_waves(p, a); }});
  t.push_back({AttentionForm::quadratic, "ws2", "tensor cores (wgmma)",
               "Hopper warp-specialised TMA + wgmma, 2 consumer warpgroups (128 rows per CTA, more registers)",
               [](P p, A a) { return a.wgmma && quad_ws_supported(p, 2); }, no_workspace,
               [](P p, X x, cudaStream_t s) { launch_quad_ws(p, 2, x, s); }, [](P p, A) { return !sum_psd_small(p); }});
  t.push_back({AttentionForm::quadratic, "mt2", "tensor cores (mma.sync)",
               "mma.sync m16n8k16, 32 query rows per warp (every K/V fragment feeds two mma); d <= 64",
               [](P p, A a) { return a.cc >= 80 && quad_mma_supported(p, 2); }, no_workspace,
               [](P p, X x, cudaStream_t s) { launch_quad_mma(p, 2, x, s); },
               [](P p, A) { return p.map.kind != MapKind::SumPsd; }});
  t.push_back({AttentionForm::quadratic, "mt1", "tensor cores (mma.sync)",
               "mma.sync m16n8k16, 16 query rows per warp, 8 warps",
               [](P p, A a) { return a.cc >= 80 && quad_mma_supported(p, 1); }, no_workspace,
               [](P p, X x, cudaStream_t s) { launch_quad_mma(p, 1, x, s); }});
  t.push_back({AttentionForm::quadratic, "simt", "scalar fallback",
               "fp32 CUDA-core kernel for any d, d_v, map and dtype (reference-like, slow)",
               [](P p, A) { return quad_simt_smem_bytes(p) <= kMaxSmem; }, no_workspace,
               [](P p, X x, cudaStream_t s) { launch_quad_simt(p, x, s); }});
  // ---- chunked (§5.2)
  t.push_back({AttentionForm::chunked, "fused", "tensor cores (mma.sync)",
               "state on chip: one cluster per head splits the features, T split into segments when B*H is small",
               [](P p, A a) { return a.cc >= 90 && fused_supported(p); },
               [](P p) { return fused_workspace(p, fused_segments(p, true)); },
               [](P p, X x, cudaStream_t s) { launch_fused(p, fused_segments(p, true), x, s); },
               [](P p, A) { return fused_pays(p); }});
  t.push_back({AttentionForm::chunked, "fused-seq", "tensor cores (mma.sync)",
               "state on chip, one sequential walk over all chunks per head (the sequential chunk scan)",
               [](P p, A a) { return a.cc >= 90 && fused_supported(p); },
               [](P p) { return fused_workspace(p, 1); },
               [](P p, X x, cudaStream_t s) { launch_fused(p, 1, x, s); }, [](P, A) { return false; }});
  // scan-g4p / scan-g4pw with the block-local states in bf16 (kChunk2HalfBlocks): the column scan reads 9 GB instead
  // of 18 at M_2, B = 8, H = 16, T = 128K. Each block's state is rounded once more (relative 2^-9, as the stored
  // prefix states already are: worst relative error against float64 2.75e-3, against the fp32 pair 1.9e-3). The
  // defaults for M_g at d = 64 since the twenty-ninth session (H100, every size timed): item 3's shape 37.78 ms
  // against scan-g4pw's 41.25 (scan 10.27 -> 6.99 ms; the local stage is not write-bound: 13.17 -> 13.14); B = H =
  // 1, M_2, T = 32K / 128K 0.124 / 0.403 ms against 0.130 / 0.412; B = 4, H = 16, T = 128K 19.05 against 20.70.
  // scan-g4pwb (readout on wgmma) was the faster of the two at every size, so it leads where sm_90a runs. With the
  // thirtieth session's output pass (Z split once per block): 34.22 ms at item 3's shape (H100; output 13.95 ms).
  t.push_back({AttentionForm::chunked, "scan-g4pwb", "tensor cores (wgmma)",
               "scan-g4pw with bf16 block-local states (half the local stage's stores and the scan's loads)",
               paired_applies<kW | kH>, column_scan_workspace, launch_paired<kW | kH>, always});
  t.push_back({AttentionForm::chunked, "scan-g4pb", "tensor cores (mma.sync)",
               "scan-g4p with bf16 block-local states (half the local stage's stores and the scan's loads)",
               paired_applies<kH>, column_scan_workspace, launch_paired<kH>, always});
  // scan-g4c with M_g's features in the paired order (make_paired_slot): the output pass forms each ψ(Q) A-fragment
  // register as q_i · (q_j0, q_j0+1) from the untransposed Q rows (no ψ(Q) tile, no ldmatrix of it). The default
  // for M_g at d = 64 (twenty-eighth session, H200): M_2, B = 8, H = 16, T = 128K 39.8 ms against scan-g4c's 50.5
  // (output 19.0 vs 30.1 ms); B = H = 1, T = 32K / 64K / 128K, M_2 0.126 / 0.226 / 0.409 ms against
  // 0.147 / 0.270 / 0.502, M_1 0.205 / 0.368 / 0.673 against 0.249 / 0.454 / 0.844. scan-g4pw (the readout on
  // wgmma) was preferred where B·H >= 128: 38.7 ms there. Both are opt-in since the twenty-ninth session (their
  // bf16-block-state twins above are faster at every size timed).
  t.push_back({AttentionForm::chunked, "scan-g4pw", "tensor cores (wgmma)",
               "scan-g4p with the output pass's readout on wgmma (d = 64)",
               paired_applies<kW>, column_scan_workspace, launch_paired<kW>, never});
  t.push_back({AttentionForm::chunked, "scan-g4p", "tensor cores (mma.sync)",
               "scan-g4c with M_g's features paired, ψ(Q) formed in registers in the output pass (d = 64)",
               paired_applies<0u>, column_scan_workspace, launch_paired<0u>, never});
  // scan-g4 with the column scan over the blocks, whose block-local states come from chunk_local_multi_kernel (one
  // K / V load per CTA for all its feature blocks): was the default at d = 64 (twenty-sixth session, H100: B = H = 1,
  // T = 32K / 64K / 128K, M_2 0.159 / 0.285 / 0.527 ms against scan-g4's 0.208 / 0.371 / 0.707 and split-g4's
  // 0.237 / 0.403 / 0.866, M_1 0.266 / 0.480 / 0.877 against 0.343 / 0.634 / 1.228; M_2, B = 8, H = 16, T = 128K:
  // 52.2 ms against 2pass-g4's 55.3 ms); since the twenty-eighth session for the PSD maps scan-g4p does not take
  // (Σ_g at d = 64, and d = 32 / 128). Its workspace holds the fp32 block states besides the bf16 stored ones
  // (3x 2pass-g4's: 27 GB at that 128K shape).
  t.push_back({AttentionForm::chunked, "scan-g4c", "tensor cores (mma.sync)",
               "scan-g4 with a per-element column scan over the blocks (loads 8 deep, no shared memory)",
               stride4_applies, column_scan_workspace,
               [](P p, X x, cudaStream_t s) {
                 launch_chunk2(p, AttentionForm::chunked, kChunk2BlockScanColumns, 4, x, s);
               },
               [](P p, A) { return p.d == 64; }});
  // the stored states of 2pass-g4 without a walk (a scan over 4-chunk blocks, Hillis-Steele in shared memory);
  // was the default at small B*H (twenty-fifth session: B = H = 1, T = 32K / 64K / 128K, M_2 0.223 / 0.414 / 0.807 ms
  // against split-g4's 0.242 / 0.421 / 0.956, M_1 0.382 / 0.734 / 1.468 against 0.477 / 0.900 / 1.745) until
  // scan-g4c; not at large B*H, where its fp32 block states cost a second pass through memory (M_2, B = 8, H = 16,
  // T = 128K: 93.2 ms, the scan alone 31.4 ms)
  t.push_back({AttentionForm::chunked, "scan-g4", "tensor cores (mma.sync)",
               "local states of every 4-chunk block in parallel, one scan over the blocks (no walk), then 2pass-g4's "
               "output pass (PSD maps, C = 64)",
               [](P p, A a) {
                 return stride4_applies(p, a) && scan_tree_fits((p.T + 4 * p.chunk - 1) / (4 * p.chunk));
               },
               [](P p) { return chunk2_workspace(p, AttentionForm::chunked, kChunk2BlockScan, 4); },
               [](P p, X x, cudaStream_t s) { launch_chunk2(p, AttentionForm::chunked, kChunk2BlockScan, 4, x, s); },
               [](P, A) { return false; }});
  // opt-in: the stride-4 variants with the state pass's ψ(K)ᵀ V and the output pass's readout ψ(Q) S_pre on wgmma
  // (each V / S tile read once per warpgroup from shared memory, not once per warp as with mma.sync). Twenty-sixth
  // session, H100, M_2, B = 8, H = 16, T = 128K: 2pass-g4w 52.4 ms against 2pass-g4's 55.3 (output 28.0 vs 29.8,
  // walk 24.3 vs 25.7); scan-g4w (block states per feature-block program, not chunk_local_multi_kernel) is slower
  // than scan-g4c at B = H = 1 (M_1, 32K: 0.283 against 0.266 ms)
  t.push_back({AttentionForm::chunked, "scan-g4w", "tensor cores (wgmma)",
               "scan-g4c with its local states and the output pass's readout on wgmma (d = 64)",
               [](P p, A a) { return a.wgmma && p.d == 64 && stride4_applies(p, a); },
               column_scan_workspace,
               [](P p, X x, cudaStream_t s) {
                 launch_chunk2(p, AttentionForm::chunked, kChunk2BlockScanColumns, 4, x, s, kChunk2Wgmma);
               },
               [](P, A) { return false; }});
  t.push_back({AttentionForm::chunked, "2pass-g4w", "tensor cores (wgmma)",
               "2pass-g4 with its walk and the output pass's readout on wgmma (d = 64)",
               [](P p, A a) { return a.wgmma && p.d == 64 && stride4_applies(p, a); },
               [](P p) { return chunk2_workspace(p, AttentionForm::chunked, 1, 4); },
               [](P p, X x, cudaStream_t s) { launch_chunk2(p, AttentionForm::chunked, 1, 4, x, s, kChunk2Wgmma); },
               [](P, A) { return false; }});
  // split's segments with 2pass-g4's stored states, preferred over split at d = 64 (measured there, twenty-fifth
  // session, B = H = 1, T = 32K / 64K / 128K: M_2 0.251 / 0.438 / 0.996 ms against 0.281 / 0.490 / 1.078, M_1
  // 0.493 / 0.934 / 1.812 against 0.543 / 1.026 / 2.032; at d = 32 and 128 validated, not timed)
  t.push_back({AttentionForm::chunked, "split-g4", "tensor cores (mma.sync)",
               "split storing every 4th chunk's entering state (the segment walks write a quarter of the states); the "
               "output pass adds the 0-3 chunks in between by the closed form (PSD maps, C = 64)",
               stride4_applies,
               [](P p) { return chunk2_workspace(p, AttentionForm::chunked, chunk2_segments(p), 4); },
               [](P p, X x, cudaStream_t s) { launch_chunk2(p, AttentionForm::chunked, chunk2_segments(p), 4, x, s); },
               [](P p, A) { return p.d == 64 && chunk2_segments(p) >= 4; }});
  // PSD maps at C = 64: every 4th chunk's entering state through memory. Preferred over its stride-1 twin at
  // d = 64 (twenty-fifth session, M_2, B = 8, H = 16, T = 128K: 59.61 ms against 69.86 ms; state 26.92 vs 38.18)
  t.push_back({AttentionForm::chunked, "2pass-g4", "tensor cores (mma.sync)",
               "2pass storing every 4th chunk's entering state; the output pass adds the 0-3 chunks in between by the "
               "closed form (PSD maps, C = 64)",
               stride4_applies,
               [](P p) { return chunk2_workspace(p, AttentionForm::chunked, 1, 4); },
               [](P p, X x, cudaStream_t s) { launch_chunk2(p, AttentionForm::chunked, 1, 4, x, s); },
               [](P p, A) { return p.d == 64; }});
  t.push_back({AttentionForm::chunked, "split", "tensor cores (mma.sync)",
               "2pass with T split into segments for small B*H: local states, scan over segments, each segment's walk",
               [](P p, A a) { return a.cc >= 80 && chunk2_supported(p, AttentionForm::chunked); },
               [](P p) { return chunk2_workspace(p, AttentionForm::chunked, chunk2_segments(p)); },
               [](P p, X x, cudaStream_t s) { launch_chunk2(p, AttentionForm::chunked, chunk2_segments(p), 1, x, s); },
               [](P p, A) { return chunk2_segments(p) >= 4; }});  // where a walk per head leaves SMs idle
  t.push_back({AttentionForm::chunked, "2pass", "tensor cores (mma.sync)",
               "every chunk's entering state through memory (bf16 S, fp32 Z), then the output pass",
               [](P p, A a) { return a.cc >= 80 && chunk2_supported(p, AttentionForm::chunked); },
               [](P p) { return chunk2_workspace(p, AttentionForm::chunked); },
               [](P p, X x, cudaStream_t s) { launch_chunk2(p, AttentionForm::chunked, 1, 1, x, s); }});
  t.push_back({AttentionForm::chunked, "simt", "scalar fallback",
               "fp32 CUDA-core kernels for any d, d_v and dtype, C <= 64 (reference-like, slow)",
               [](P p, A) { return p.chunk <= 64 && chunk_simt_smem_bytes(p) <= kMaxSmem; },
               [](P p) { return chunk_simt_workspace(p); },
               [](P p, X x, cudaStream_t s) { launch_chunk_simt(p, AttentionForm::chunked, x, s); }});
  // ---- tree (§5.3)
  t.push_back({AttentionForm::tree, "mma", "tensor cores (mma.sync)",
               "chunk-local fp32 states, Hillis-Steele scan over chunks, output pass",
               [](P p, A a) { return a.cc >= 80 && chunk2_supported(p, AttentionForm::tree); },
               [](P p) { return chunk2_workspace(p, AttentionForm::tree); },
               [](P p, X x, cudaStream_t s) { launch_chunk2(p, AttentionForm::tree, 1, 1, x, s); }});
  t.push_back({AttentionForm::tree, "simt", "scalar fallback",
               "fp32 CUDA-core kernels for any d, d_v and dtype, C <= 64 (reference-like, slow)",
               [](P p, A) { return p.chunk <= 64 && chunk_simt_smem_bytes(p) <= kMaxSmem; },
               [](P p) { return chunk_simt_workspace(p); },
               [](P p, X x, cudaStream_t s) { launch_chunk_simt(p, AttentionForm::tree, x, s); }});
  return t;
}

std::string names_of(const std::vector<const KernelVariant*>& v) {
  std::string s;
  for (const auto* k : v) s += (s.empty() ? "" : ", ") + std::string(k->name);
  return s.empty() ? "none" : s;
}

[[noreturn]] void refuse(const std::string& m) { cuda_detail::throw_user_error(m); }

}  // namespace

const std::vector<KernelVariant>& variant_table() {
  static const std::vector<KernelVariant> t = make_table();
  return t;
}

DeviceArch current_arch() {
  static const DeviceArch a = [] {
    DeviceArch r;
    int dev = 0, major = 0, minor = 0, sms = 0;
    MEMCAP_CUDA_CHECK(cudaGetDevice(&dev));
    MEMCAP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    MEMCAP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    MEMCAP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    r.cc = major * 10 + minor;
    r.sms = sms;
    r.wgmma = wgmma_available();
    return r;
  }();
  return a;
}

void validate_launch(AttentionForm form, const AttentionLaunch& p) {
  const std::string what = std::string(form_name(form)) + " attention: ";
  if (p.B < 1 || p.H < 1 || p.T < 1 || p.d < 1 || p.dv < 1 || p.chunk < 1)
    refuse(what + "B, H, T, d_head, d_v and the chunk must all be >= 1");
  if (p.B * p.H > 65535) refuse(what + "B*H = " + std::to_string(p.B * p.H) + " heads is over the grid limit 65535");
  if (p.T >= (std::int64_t(1) << 30)) refuse(what + "T must be < 2^30");
  if (p.d > 1024 || p.dv > 1024) refuse(what + "d_head and d_v must be <= 1024");
  if (p.dtype != gpu::DType::bf16 && p.dtype != gpu::DType::f32) refuse(what + "dtype must be bf16 or fp32");
  if (p.map.d != p.d) refuse(what + "the feature map was built for d = " + std::to_string(p.map.d) + ", not " + std::to_string(p.d));
  if (!p.map.is_psd() && !p.map.is_linear_family())
    refuse(what + "feature map kind not available for attention (use linear, orthant, lorentz, m<g>, sigma<g>)");
  if (p.normalized && !p.map.nonnegative())
    refuse(what + "the linear map has no cone: use the unnormalized readout with it");
  if (form != AttentionForm::quadratic) {
    const std::int64_t nc = (p.T + p.chunk - 1) / p.chunk;
    if (nc > 65535) refuse(what + std::to_string(nc) + " chunks per sequence is over 65535; use a larger --chunk");
    if (form == AttentionForm::tree && !p.map.is_linear_family())
      refuse("tree scan is for the linear, orthant and Lorentz maps (spec §5.3: a PSD chunk state is too large to "
             "scan); use the chunked or quadratic form for M_g / Sigma_g");
    if (form == AttentionForm::tree && !scan_tree_fits(nc))
      refuse(what + std::to_string(nc) + " chunks is more than the tree scan holds (24576); use a larger --chunk");
  }
  if (p.variant && *p.variant) {
    bool known = false;
    std::string names;
    for (const auto& v : variant_table())
      if (v.form == form) {
        known = known || std::string(v.name) == p.variant;
        names += (names.empty() ? "" : ", ") + std::string(v.name);
      }
    if (!known) refuse(what + "unknown kernel variant '" + p.variant + "'; the variants are " + names);
  }
}

std::vector<const KernelVariant*> applicable_variants(AttentionForm form, const AttentionLaunch& p,
                                                      const DeviceArch& arch) {
  std::vector<const KernelVariant*> out;
  for (const auto& v : variant_table())
    if (v.form == form && v.applies(p, arch)) out.push_back(&v);
  return out;
}

const KernelVariant& select_variant(AttentionForm form, const AttentionLaunch& p, const DeviceArch& arch) {
  validate_launch(form, p);
  const auto ok = applicable_variants(form, p, arch);
  const std::string what = std::string(form_name(form)) + " attention: ";
  if (p.variant && *p.variant) {
    for (const auto* v : ok)
      if (std::string(v->name) == p.variant) return *v;
    refuse(what + "kernel variant '" + p.variant + "' does not apply to d_head = " + std::to_string(p.d) +
           ", d_v = " + std::to_string(p.dv) + ", chunk = " + std::to_string(p.chunk) +
           " on this GPU; variants that do: " + names_of(ok));
  }
  for (const auto* v : ok)
    if (!v->preferred || v->preferred(p, arch)) return *v;
  if (ok.empty())
    refuse(what + "no kernel runs d_head = " + std::to_string(p.d) + ", d_v = " + std::to_string(p.dv) +
           ", chunk = " + std::to_string(p.chunk) +
           " (tensor cores: bf16, d = d_v in {32, 64, 128}, chunk 64 (or 128 at d = 64); the scalar fallback: "
           "chunk <= 64 and d + d_v small enough for shared memory)");
  return *ok.front();
}

const KernelVariant& launch_attention(AttentionForm form, const AttentionLaunch& p, const AttentionPtrs& ptrs,
                                      cudaStream_t stream) {
  const KernelVariant& v = select_variant(form, p, current_arch());
  if (ptrs.workspace_bytes < v.workspace(p))
    refuse(std::string(form_name(form)) + " attention: workspace too small for variant " + v.name);
  v.launch(p, ptrs, stream);
  return v;
}

}  // namespace memcap::kata::cuda
