// Exclusive prefix over chunks of per-chunk states (spec kata.md §5.2/5.3): in[bh][c][e] (fp32) ->
// out[bh][c][e] = sum_{c' < c} in[bh][c'][e], in fp32 or bf16. Two algorithms: a sequential walk over
// chunks (one thread per (bh, e)), and the Hillis-Steele tree scan (ceil(log2 NC) double-buffered
// rounds in shared memory, NC-wide per round).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kata_attention_launch.cuh"

namespace memcap::kata::cuda {

void launch_scan_sequential(const float* in, void* out, DType out_type, std::int64_t bh, std::int64_t nc,
                            std::int64_t e, cudaStream_t stream);
void launch_scan_tree(const float* in, void* out, DType out_type, std::int64_t bh, std::int64_t nc, std::int64_t e,
                      cudaStream_t stream);

}  // namespace memcap::kata::cuda
