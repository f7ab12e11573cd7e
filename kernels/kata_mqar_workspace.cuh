// Workspace sizing of the MQAR mixer cores that run groups of sequences out of one caller-provided workspace
// (gemm, gemm-psi, chunked-eval): how many sequences a workspace holds, and the workspace to ask for. Host only.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda_check.cuh"
#include "kata_mqar_mixers.cuh"  // HeadShape

namespace memcap::kata::mqar::cuda::wsp {

inline constexpr std::size_t kMaxWorkspace = std::size_t(1) << 30;  // the largest workspace the queries ask for

// Sequences per group for a workspace of `bytes` when one sequence needs `per_seq` bytes (UserError when not one).
inline std::int64_t group_size(const HeadShape& s, std::size_t per_seq, std::size_t bytes, const char* what) {
  if (per_seq == 0) return std::max<std::int64_t>(s.B, 1);
  const std::int64_t n = static_cast<std::int64_t>(bytes / per_seq);
  if (n < 1)
    cuda_detail::throw_user_error(std::string(what) + ": the workspace holds " + std::to_string(bytes) +
                                  " bytes but one sequence at T = " + std::to_string(s.T) + " needs " +
                                  std::to_string(per_seq));
  return std::min<std::int64_t>(n, std::max<std::int64_t>(s.B, 1));
}

// The workspace to ask for: every sequence at once, capped at kMaxWorkspace (whole sequences), at least one.
inline std::size_t capped(const HeadShape& s, std::size_t per_seq) {
  const std::size_t all = per_seq * static_cast<std::size_t>(std::max<std::int64_t>(s.B, 1));
  return std::max(per_seq, std::min(all, kMaxWorkspace / per_seq * per_seq));
}

}  // namespace memcap::kata::mqar::cuda::wsp
