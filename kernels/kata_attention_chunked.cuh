// O(T) chunked-state causal KATA attention on the GPU (spec kata.md §5.2) and the tree-scan form
// (§5.3). Both are chunk-state -> prefix over chunks -> chunk-output:
//   chunked: one program per (b, h, 64-feature block) walks the chunks carrying S, Z in registers and
//            writes the state entering every chunk (B*H*ceil(n_psi/64) programs: the sequential scan);
//   tree:    chunk-local states for all (b, h, chunk) in parallel, then a Hillis-Steele scan (linear,
//            orthant and Lorentz maps only, as in the paper).
// bf16 with d = dv = 64 and C in {64, 128}: tensor cores; otherwise an fp32 SIMT path (C <= 64).
#pragma once
#include <cstddef>

#include "kata_attention_launch.cuh"

namespace memcap::kata::cuda {

enum class ChunkForm { chunked, tree };

// Bytes of device workspace the form needs for this launch (states of every chunk).
std::size_t chunk_workspace_bytes(const AttentionLaunch& p, ChunkForm form);

// Returns the variant that ran, e.g. "chunked/mma-bf16" or "tree/simt". workspace: >= chunk_workspace_bytes.
const char* launch_chunk_form(const AttentionLaunch& p, ChunkForm form, const void* q, const void* k, const void* v,
                              void* out, void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace memcap::kata::cuda
