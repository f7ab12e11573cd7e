// Device scan of one tile of scores for argmax, best competitor and margin (CPU reference:
// margin::margins_from_outputs in src/margin/margins.cpp), the normalized-output row scaling and
// the reduction of the per-key results to accuracy and min margin. Column-major, float64.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace memcap::mlp::cuda {

struct EvalSummary {
  double correct = 0;     // #keys whose argmax is f(i)
  double min_margin = 0;  // min_i γ_i; NaN when some γ_i is NaN/Inf (as the CPU)
};

// Rows of a rows x d matrix (ld rows) divided by max(||row||, 1e-8).
void normalize_rows(cudaStream_t s, std::int64_t rows, std::int64_t d, double* Y);
// Scores S (P x n, ld P): column i holds <ŷ_{r0+i}, v_j> for j < P. For each column: argmax over all
// P (smallest index on ties, NaN never wins), best competitor j != f(i) and γ = s_f(i) - s_j*.
// Writes per_key[r0+i], argmax[r0+i], worst[r0+i].
void score_margins(cudaStream_t s, std::int64_t P, std::int64_t n, const double* S, const int* map, std::int64_t r0,
                   double* per_key, int* argmax, int* worst);
// One block over all F keys: accuracy count and min margin into *out.
void summarize(cudaStream_t s, std::int64_t F, const double* per_key, const int* argmax, const int* map,
               EvalSummary* out);

}  // namespace memcap::mlp::cuda
