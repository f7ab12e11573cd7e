// Host-side entry points to the CUDA KATA attention kernels (kernels/kata_attention_*.cu): run one
// form on float64 host data (for tests and validation), time a form on device-generated inputs, and
// measure the card's copy-bandwidth and bf16-GEMM ceilings. Compiles without CUDA: every function
// then throws DeviceError (no silent CPU fallback).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kata/attention.hpp"
#include "kata/attention_form.hpp"

namespace memcap::kata {

enum class GpuDType { f32, bf16 };

AttentionForm parse_attention_form(const std::string& s);  // "quadratic" | "chunked" | "tree"
const char* to_string(AttentionForm f);
GpuDType parse_gpu_dtype(const std::string& s);            // "bf16" | "fp32"
const char* to_string(GpuDType t);

// True when this build has the CUDA kernels (a GPU may still be absent).
bool attention_cuda_built();

// x rounded to the GPU input type (bf16: round-to-nearest-even), as float64.
std::vector<double> round_to_dtype(GpuDType t, const std::vector<double>& x);

// Kernel variants (kernels/kata_attention_variants.cuh): every name of a form's table, in preference order
// (no GPU needed; empty in a build without CUDA).
std::vector<std::string> attention_variant_names(AttentionForm form);
// The variants that apply to this launch on the current GPU, in preference order (the first is the default).
std::vector<std::string> attention_variants(AttentionForm form, const AttentionShape& s, const AttentionOptions& o,
                                            GpuDType t);
// The one validation of a CUDA launch, before any work: shape and option checks, the map/form combination,
// the variant name (unknown, or not applicable on this GPU: UserError listing those that are), and — with
// check_memory — whether inputs, output and workspace fit in free GPU memory. UserError (exit 2) on any of
// these. Returns "form/variant" of what would run and sets *path to its class (tensor cores or the scalar
// fallback) when path is given.
std::string validate_attention_cuda(AttentionForm form, const AttentionShape& s, const AttentionOptions& o,
                                    GpuDType t, const std::string& variant, bool check_memory,
                                    std::string* path = nullptr);

struct GpuAttentionResult {
  std::vector<double> out;  // [B,H,T,dv]
  std::string variant;      // kernel variant that ran, "form/name", e.g. "quadratic/ws3"
  std::string path;         // "tensor cores (wgmma)", "tensor cores (mma.sync)" or "scalar fallback"
};
// Uploads q, k, v (converted to t), NaN-poisons the output and workspace, runs the form with `variant`
// ("" = the default for the shape), downloads.
GpuAttentionResult attention_cuda(AttentionForm form, const AttentionShape& s, const AttentionOptions& o, GpuDType t,
                                  const double* q, const double* k, const double* v, const std::string& variant = "");

struct GpuTiming {
  std::string variant, path;
  std::vector<double> ms;     // one sample per repeat (CUDA events around the whole form)
  double median_ms = 0;
  std::size_t workspace_bytes = 0;
  // chunked / tree: milliseconds of the stages (chunk-state, scan, chunk-output) of one extra
  // launch; empty for the quadratic form.
  std::vector<double> stage_ms;
};
// Inputs: Philox normals generated on the device (seed); warmup untimed launches, then repeats.
GpuTiming time_attention_cuda(AttentionForm form, const AttentionShape& s, const AttentionOptions& o, GpuDType t,
                              int warmup, int repeats, std::uint64_t seed, const std::string& variant = "");

// Forward and backward of the quadratic causal form on tensor cores (kernels/kata_attention_backward.cuh): bf16
// inputs, the quadratic forward's default variant, then the two backward kernels. Covers the normalized M_g maps
// at d = d_v in {32, 64} (UserError, exit 2, naming what does not apply otherwise). Float64 host data in and out
// (inputs rounded to bf16 on upload); for tests and validation against mqar::kata_head_backward.
struct GpuAttentionGrads {
  std::vector<double> out, dq, dk, dv;  // [B,H,T,d] each
  std::string forward_variant;          // "quadratic/NAME" of the forward that ran
};
// Empty when attention_backward_cuda runs this shape and map, else why not (no GPU needed).
std::string attention_backward_unsupported(const AttentionShape& s, const AttentionOptions& o);
// out_given: the forward output to differentiate at ([B,H,T,d_v], rounded to bf16); nullptr = run the forward.
GpuAttentionGrads attention_backward_cuda(const AttentionShape& s, const AttentionOptions& o, const double* q,
                                          const double* k, const double* v, const double* dout,
                                          const double* out_given = nullptr);

// Backward of the chunked O(T) form (kernels/kata_attention_chunked_backward.cuh; chunk C = o.backward_chunk, or
// o.chunk when 0; the forward run first uses o.chunk): bf16 inputs,
// every map with a device ψ, normalized readout; cuBLAS bf16 products with fp32 accumulation, the device
// ψ and its VJP. out_given: the forward output to differentiate at ([B,H,T,d_v], rounded to bf16); nullptr = run
// the chunked forward's default variant first. heads_per_group: (b, h) slices per workspace group, 0 = as many as
// fit half the free memory. Float64 host data in and out; for tests against mqar::kata_head_backward_chunked.
std::string attention_backward_chunked_unsupported(const AttentionShape& s, const AttentionOptions& o);
GpuAttentionGrads attention_backward_chunked_cuda(const AttentionShape& s, const AttentionOptions& o, const double* q,
                                                  const double* k, const double* v, const double* dout,
                                                  const double* out_given = nullptr, std::int64_t heads_per_group = 0);
// Device bytes of the chunked forward's workspace (its default variant) plus the chunked backward's for `heads`
// (b, h) slices at once; 0 in a build without CUDA. For memory plans.
std::size_t chunked_fwdbwd_workspace_bytes(const AttentionShape& s, const AttentionOptions& o, std::int64_t heads);

// VJP of the device feature map (kernels/kata_feature_map.cuh, fp32) on float64 host rows: dX = J_ψ(X)ᵀ G row by
// row (X: rows x d, G: rows x n_ψ, row-major), and ψ(X) itself (rows x n_ψ). For tests against FeatureMap::vjp /
// FeatureMap::apply.
std::vector<double> psi_vjp_cuda(const FeatureMap& map, const std::vector<double>& X, const std::vector<double>& G,
                                 std::int64_t rows);
std::vector<double> psi_cuda(const FeatureMap& map, const std::vector<double>& X, std::int64_t rows);

struct GpuCeilings {
  double copy_gbps = 0;     // device-to-device cudaMemcpy, (bytes read + bytes written) / time, median
  double gemm_tflops = 0;   // cuBLAS bf16 GEMM (fp32 accumulate) n x n x n, median
  std::int64_t copy_bytes = 0, gemm_n = 0;
};
GpuCeilings measure_gpu_ceilings(int repeats);

}  // namespace memcap::kata
