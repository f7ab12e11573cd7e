// The table of KATA attention kernel variants (name, applies(shape, map, dtype, arch), workspace, launch) and
// the one validation of a launch: every CUDA attention call goes through launch_attention(), which checks the
// shape, picks the variant (by name, or the table's first that applies) and runs it. Host API; the kernels
// are in kernels/kata_attention_*.cu. Variant names are per form: quadratic ws3 ws2 mt2 mt1 simt; chunked
// fused fused-seq scan-g4pwb scan-g4pb scan-g4pw scan-g4p scan-g4c scan-g4 scan-g4w 2pass-g4w split-g4
// 2pass-g4 split 2pass simt; tree mma simt
// (docs/kata-kernels.md says what each is).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "kata_attention_impl.cuh"
#include "kata_attention_launch.cuh"

namespace memcap::kata::cuda {

struct DeviceArch {
  int cc = 0;          // compute capability, major * 10 + minor
  int sms = 0;         // multiprocessors
  bool wgmma = false;  // this binary holds the sm_90a kernels and the device runs them
};
DeviceArch current_arch();  // the current device (queried once)

struct KernelVariant {
  AttentionForm form;
  const char* name;   // unique per form
  const char* path;   // "tensor cores (wgmma)", "tensor cores (mma.sync)" or "scalar fallback"
  const char* about;  // one line for --help and the docs
  bool (*applies)(const AttentionLaunch&, const DeviceArch&);
  std::size_t (*workspace)(const AttentionLaunch&);
  void (*launch)(const AttentionLaunch&, const AttentionPtrs&, cudaStream_t);
  // Where it applies, whether it is the one to run by default (from the H200 measurements in docs/perf.md);
  // nullptr = always. The default is the first variant that applies and is preferred, else the first that applies.
  bool (*preferred)(const AttentionLaunch&, const DeviceArch&) = nullptr;
};
const std::vector<KernelVariant>& variant_table();

// UserError unless the launch is one the kernels can run: sizes >= 1 and within the grid limits, bf16 or fp32,
// d, d_v <= 1024, a map/form combination the forms define (the tree scan is for the n_ψ = d maps), and — when
// p.variant names one — a variant of this form. Touches no device.
void validate_launch(AttentionForm form, const AttentionLaunch& p);
// validate_launch, then the variant to run on `arch`: p.variant if set (UserError when it does not apply, listing
// those that do), else the first of the table that applies and is preferred (then the first that applies;
// UserError when none does, saying what to change).
const KernelVariant& select_variant(AttentionForm form, const AttentionLaunch& p, const DeviceArch& arch);
std::vector<const KernelVariant*> applicable_variants(AttentionForm form, const AttentionLaunch& p,
                                                      const DeviceArch& arch);
// Runs the selected variant on `stream` (workspace: >= its workspace bytes, else UserError); returns its name.
const KernelVariant& launch_attention(AttentionForm form, const AttentionLaunch& p, const AttentionPtrs& ptrs,
                                      cudaStream_t stream);

}  // namespace memcap::kata::cuda
