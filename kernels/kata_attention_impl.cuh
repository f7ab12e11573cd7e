// Internal launchers of the KATA attention kernels, one per kernel family; the variant table
// (kata_attention_variants.cu) is the only caller, and it validates shapes before any of these runs.
#pragma once
#include <cstddef>

#include "kata_attention_launch.cuh"

namespace memcap::kata::cuda {

struct AttentionPtrs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// ---- quadratic (§5.1) -------------------------------------------------------------------------------
// Scalar fallback: any d, d_v, map, dtype (fp32 arithmetic). Shared memory it needs (bytes).
int quad_simt_smem_bytes(const AttentionLaunch& p);
void launch_quad_simt(const AttentionLaunch& p, const AttentionPtrs& a, cudaStream_t stream);
// mma.sync (sm_80+): bf16, d = d_v in {32, 64, 128}, every attention map (PSD with g in {1,2,4} and block
// width 8 or a multiple of 16); mt in {1, 2} query m-tiles per warp (mt = 2 only for d <= 64).
bool quad_mma_supported(const AttentionLaunch& p, int mt);
void launch_quad_mma(const AttentionLaunch& p, int mt, const AttentionPtrs& a, cudaStream_t stream);
void launch_quad_mma_d32(const AttentionLaunch& p, int mt, const AttentionPtrs& a, cudaStream_t stream);
void launch_quad_mma_d64(const AttentionLaunch& p, int mt, const AttentionPtrs& a, cudaStream_t stream);
void launch_quad_mma_d128(const AttentionLaunch& p, int mt, const AttentionPtrs& a, cudaStream_t stream);
// Hopper warp-specialised wgmma kernel (sm_90a build): nwg consumer warpgroups (3: d <= 64; 2: any).
bool wgmma_available();  // this binary holds the sm_90a kernels and the current device runs them (probed once)
bool quad_ws_supported(const AttentionLaunch& p, int nwg);  // shape / map / dtype side
void launch_quad_ws(const AttentionLaunch& p, int nwg, const AttentionPtrs& a, cudaStream_t stream);
void launch_quad_ws_d32(const AttentionLaunch& p, int nwg, const AttentionPtrs& a, cudaStream_t stream);
void launch_quad_ws_d64(const AttentionLaunch& p, int nwg, const AttentionPtrs& a, cudaStream_t stream);
void launch_quad_ws_d128(const AttentionLaunch& p, int nwg, const AttentionPtrs& a, cudaStream_t stream);

// ---- chunked / tree, two passes through memory (§5.2, §5.3) --------------------------------------------
// State pass writes every chunk's entering state (bf16 S, fp32 Z) to the workspace; the output pass reads it.
// Tree: chunk-local fp32 states, Hillis-Steele scan, same output pass. bf16, d = d_v in {32, 64, 128},
// C in {64, 128}; tree: linear / orthant / Lorentz.
// segments > 1 (chunked form only, the `split` variant): T split into that many runs of chunks for small B·H: their
// local states in parallel, an exclusive scan over them, then each run's walk writes its chunks' entering states.
// stride > 1 (chunked, PSD maps, C = 64: `2pass-g4`, `split-g4`): only every stride-th chunk's entering state
// is stored; the output pass adds the chunks in between by the closed form (stride times less state traffic).
// segments == kChunk2BlockScan (chunked, with stride > 1: `scan-g4`): no walk; the local states of every block of
// `stride` chunks in parallel, then one exclusive scan over the blocks writes the stored states.
constexpr int kChunk2BlockScan = -1;
constexpr int kChunk2BlockScanColumns = -2;  // the same with launch_scan_columns (`scan-g4c`)
bool chunk2_supported(const AttentionLaunch& p, AttentionForm form);
int chunk2_segments(const AttentionLaunch& p);  // the split's segments: enough walks to fill the GPU, >= 2 chunks each
std::size_t chunk2_workspace(const AttentionLaunch& p, AttentionForm form, int segments = 1, int stride = 1);
// opts (d = 64, C = 64, stride 4): kChunk2Wgmma, the output pass's readout on wgmma (`2pass-g4w`, `scan-g4w`:
// sm_90a); kChunk2Paired, M_g's features in the paired order of make_paired_slot (`scan-g4p`, `scan-g4pw`: block
// scans), the output pass forming ψ(Q) in registers; kChunk2HalfBlocks (with kChunk2Paired: `scan-g4pb`,
// `scan-g4pwb`), the block-local states written and scanned in bf16 instead of fp32 (half the bytes of the local
// stage's stores and of the scan's loads; the scan still adds in fp32).
constexpr unsigned kChunk2Wgmma = 1u, kChunk2Paired = 2u, kChunk2HalfBlocks = 4u;
void launch_chunk2(const AttentionLaunch& p, AttentionForm form, int segments, int stride, const AttentionPtrs& a,
                   cudaStream_t stream, unsigned opts = 0);
void launch_chunk2_d32(const AttentionLaunch& p, AttentionForm form, int segments, int stride,
                       const AttentionPtrs& a, cudaStream_t stream);
void launch_chunk2_d64(const AttentionLaunch& p, AttentionForm form, int segments, int stride,
                       const AttentionPtrs& a, cudaStream_t stream, unsigned opts);
void launch_chunk2_d128(const AttentionLaunch& p, AttentionForm form, int segments, int stride,
                        const AttentionPtrs& a, cudaStream_t stream);
// Scalar fallback (fp32 arithmetic, any d / d_v, C <= 64): chunk-local states, sequential or tree scan, output.
int chunk_simt_smem_bytes(const AttentionLaunch& p);  // the larger of its two kernels
std::size_t chunk_simt_workspace(const AttentionLaunch& p);
void launch_chunk_simt(const AttentionLaunch& p, AttentionForm form, const AttentionPtrs& a, cudaStream_t stream);

// ---- chunked, state on chip (§5.2) ----------------------------------------------------------------------
// One thread-block cluster per (b, h, segment of chunks); its CTAs split the feature blocks and keep their
// slice of S, Z in registers through the segment; per chunk the partial numerators / denominators are summed
// across the cluster in distributed shared memory. segments > 1 splits T: a first pass forms each segment's
// local state (fp32), an exclusive scan over segments gives the state entering each one.
// bf16, d = d_v = 64, C = 64, every attention map with n_ψ <= 64 * 16 * 5.
bool fused_supported(const AttentionLaunch& p);
// Pass 1 of the split: the local state (fp32 S [bh][seg][np][64], Z [bh][seg][np]) of `cpp` consecutive chunks
// per segment (d = 64, C = 64; kata_attention_chunk2_d64.cu).
void launch_segment_states(const AttentionLaunch& p, int cpp, const void* k, const void* v, float* s_loc,
                           float* z_loc, cudaStream_t stream);
int fused_segments(const AttentionLaunch& p, bool split);  // 1 when !split; else enough to fill the GPU
std::size_t fused_workspace(const AttentionLaunch& p, int segments);
void launch_fused(const AttentionLaunch& p, int segments, const AttentionPtrs& a, cudaStream_t stream);

// ---- scans over chunk (or segment) states ---------------------------------------------------------------
// Exclusive prefix over chunks: in[bh][c][e] (fp32) -> out[bh][c][e] = sum_{c' < c} in[bh][c'][e] (fp32 or
// bf16 out). Sequential walk (one thread per (bh, e)) or Hillis-Steele tree (log2 NC rounds in shared memory).
void launch_scan_sequential(const float* in, void* out, gpu::DType out_type, std::int64_t bh, std::int64_t nc,
                            std::int64_t e, cudaStream_t stream);
void launch_scan_tree(const float* in, void* out, gpu::DType out_type, std::int64_t bh, std::int64_t nc,
                      std::int64_t e, cudaStream_t stream);
// One thread per (bh, e) as the sequential walk, with the loads of 8 chunks issued before their adds (no shared
// memory, no limit on nc): for few chunks and wide states (`scan-g4c`).
void launch_scan_columns(const float* in, void* out, gpu::DType out_type, std::int64_t bh, std::int64_t nc,
                         std::int64_t e, cudaStream_t stream);
// launch_scan_columns with bf16 in and out, two adjacent elements per thread (e even): the block-local states of
// kChunk2HalfBlocks, half the bytes read.
void launch_scan_columns_bf16(const void* in, void* out, std::int64_t bh, std::int64_t nc, std::int64_t e,
                              cudaStream_t stream);
bool scan_tree_fits(std::int64_t nc);  // the tree scan's shared memory holds nc chunks

}  // namespace memcap::kata::cuda
