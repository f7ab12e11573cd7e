// Float64 CPU reference for causal KATA attention (spec kata.md §1.3, §5.1-5.3): the recurrent,
// quadratic, chunked-state and tree-scan forms. Layout: q, k [B,H,T,d], v and out [B,H,T,dv],
// row-major contiguous. These define the function the CUDA kernels (kernels/kata_attention_*) compute.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kata/attention_features.hpp"

namespace memcap::kata {

struct AttentionShape {
  std::int64_t B = 1, H = 1, T = 1, d = 64, dv = 64;
  std::int64_t qk_size() const { return B * H * T * d; }
  std::int64_t v_size() const { return B * H * T * dv; }
  void validate() const;  // UserError on non-positive sizes
};

// Readout. normalized: o_t = psi(q_t)^T S_t / psi(q_t)^T Z_t (plain KATA, §1.3/§2.11.1);
// a zero denominator (all scores 0) gives o_t = 0. unnormalized: o_t = psi(q_t)^T S_t (the
// linear feature has no cone, so it is always read out unnormalized).
// `map` comes from FeatureMap::parse(spec, d) with d the head width; the forms use its apply()
// (packed ψ) and kernel_matrix() (closed form). Only the maps attention_map() accepts can run.
struct AttentionOptions {
  FeatureMap map;
  bool normalized = true;
  std::int64_t chunk = 64;   // C for the chunked and tree forms
  // C of the chunked O(T) backward (0: chunk). It recomputes every state from q, k, v, so it need not equal the
  // forward's C; a larger C moves fewer state bytes (the state of a chunk is as large as ~W of its feature rows).
  std::int64_t backward_chunk = 0;
  // UserError unless map is an attention map (attention_map) built for d = s.d, chunk >= 1, and the
  // readout suits the map (normalized needs a cone map).
  void validate(const AttentionShape& s) const;
};

// Default readout for a map: normalized for cone maps, unnormalized for linear. UserError for maps
// attention cannot run (see attention_map).
AttentionOptions default_options(const FeatureMap& map, std::int64_t chunk = 64);

// All four return out [B,H,T,dv]. Inputs are validated for size and finiteness.
std::vector<double> attention_recurrent(const AttentionShape& s, const AttentionOptions& o,
                                        const double* q, const double* k, const double* v);
std::vector<double> attention_quadratic(const AttentionShape& s, const AttentionOptions& o,
                                        const double* q, const double* k, const double* v);
std::vector<double> attention_chunked(const AttentionShape& s, const AttentionOptions& o,
                                      const double* q, const double* k, const double* v);
// Chunk-local states, Hillis-Steele exclusive prefix over chunks, chunk outputs (§5.3).
std::vector<double> attention_tree(const AttentionShape& s, const AttentionOptions& o,
                                   const double* q, const double* k, const double* v);

// ||a - b|| / ||b|| (NaN in either gives +inf, so NaN never passes a tolerance).
double relative_error(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace memcap::kata
