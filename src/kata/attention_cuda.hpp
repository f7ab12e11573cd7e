// Host-side entry points to the CUDA KATA attention kernels (kernels/kata_attention_*.cu): run one
// form on float64 host data (for tests and validation), time a form on device-generated inputs, and
// measure the card's copy-bandwidth and bf16-GEMM ceilings. Compiles without CUDA: every function
// then throws DeviceError (no silent CPU fallback).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kata/attention.hpp"

namespace memcap::kata {

enum class AttentionForm { quadratic, chunked, tree };
enum class GpuDType { f32, bf16 };

AttentionForm parse_attention_form(const std::string& s);  // "quadratic" | "chunked" | "tree"
const char* to_string(AttentionForm f);
GpuDType parse_gpu_dtype(const std::string& s);            // "bf16" | "fp32"
const char* to_string(GpuDType t);

// True when this build has the CUDA kernels (a GPU may still be absent).
bool attention_cuda_built();

// x rounded to the GPU input type (bf16: round-to-nearest-even), as float64.
std::vector<double> round_to_dtype(GpuDType t, const std::vector<double>& x);

struct GpuAttentionResult {
  std::vector<double> out;  // [B,H,T,dv]
  std::string variant;      // kernel variant that ran, e.g. "quadratic/mma-bf16"
};
// Uploads q, k, v (converted to t), NaN-poisons the output and workspace, runs the form, downloads.
GpuAttentionResult attention_cuda(AttentionForm form, const AttentionShape& s, const AttentionOptions& o, GpuDType t,
                                  const double* q, const double* k, const double* v);

struct GpuTiming {
  std::string variant;
  std::vector<double> ms;     // one sample per repeat (CUDA events around the whole form)
  double median_ms = 0;
  std::size_t workspace_bytes = 0;
  // chunked / tree: milliseconds of the stages (chunk-state, scan, chunk-output) of one extra
  // launch; empty for the quadratic form.
  std::vector<double> stage_ms;
};
// Inputs: Philox normals generated on the device (seed); warmup untimed launches, then repeats.
GpuTiming time_attention_cuda(AttentionForm form, const AttentionShape& s, const AttentionOptions& o, GpuDType t,
                              int warmup, int repeats, std::uint64_t seed);

struct GpuCeilings {
  double copy_gbps = 0;     // device-to-device cudaMemcpy, (bytes read + bytes written) / time, median
  double gemm_tflops = 0;   // cuBLAS bf16 GEMM (fp32 accumulate) n x n x n, median
  std::int64_t copy_bytes = 0, gemm_n = 0;
};
GpuCeilings measure_gpu_ceilings(int repeats);

}  // namespace memcap::kata
