// Forward + backward of the MQAR mixer cores at attention-benchmark shapes (`kata bench --shapes table9`, spec
// kata.md §5.5 Table 9; issue 12, acceptance 3): the same CUDA cores the trainer runs (kernels/kata_mqar_*.cu,
// variant chosen from the trainer's table, src/kata/mqar_model.cpp), on packed q|k|v rows of B sequences × H heads
// × d_head, timed as one forward + one backward (CUDA events, median), with the forward alone timed too.
// Before timing, one (sequence, head) slice at T_val tokens is checked against the float64 CPU reference of the
// same names (src/kata/mqar_mixers.hpp): output and the three input gradients.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace memcap::kata {

struct MixerBenchItem {
  std::string mixer = "m2";    // softmax or a KATA map of the MQAR model (m1, m2, m4, sigma2, sigma4, ...)
  std::int64_t B = 8, H = 16, T = 4096, d = 64;
  // auto | gemm | tiled (the trainer's mixer-kernel table, float32 on packed q|k|v) | mma (bf16 tensor cores on
  // [B,H,T,d]: the quadratic attention forward's default variant + the tensor-core backward of
  // kernels/kata_attention_backward.cuh; KATA M_g maps at d_head 32 and 64; not a training path) | chunked (bf16:
  // the chunked forward, C = 64, + the chunked O(T) backward of kernels/kata_attention_chunked_backward.cuh; every
  // KATA map with a device ψ; not a training path)
  std::string kernel = "auto";
  bool tf32 = false;            // TF32 products in the gemm variant's cuBLAS calls
  // chunked: C of the O(T) backward (a multiple of 8 in [8, 256]; the forward keeps C = 64). A chunk's state
  // (W x n_ψ) is as large as ~W of its feature rows, so a larger C moves fewer state bytes and more C x C block bytes.
  std::int64_t backward_chunk = 128;
};

struct MixerBenchResult {
  std::string kernel;            // the variant that ran
  std::string precision;         // "f32", "tf32" or "bf16" (mma, chunked)
  double rel_err = 0;            // largest relative error of o, dq, dk, dv vs the CPU float64 reference
  std::int64_t validate_T = 0;   // the slice's length
  std::vector<double> ms_fwdbwd;  // per timed repeat: forward + backward
  std::vector<double> ms_fwd;     // per timed repeat: forward alone
  std::vector<double> ms_bwd_dq;  // mma: per timed repeat, the backward's first kernel (dq) alone; else empty
  // chunked, when its backward ran as one group: each backward stage's median ms over the timed repeats; else empty
  std::vector<std::pair<std::string, double>> bwd_stages;
  std::size_t device_bytes = 0;   // inputs, outputs, gradients and workspace held during the timing
};

// The variant `item` would run and the device bytes it needs (UserError for an unknown mixer or kernel, one that
// does not apply, or, for "auto", gemm falling back to tiled when its T x T workspace would not fit `free_bytes`).
std::string mixer_bench_kernel(const MixerBenchItem& item, std::size_t free_bytes);
std::size_t mixer_bench_bytes(const MixerBenchItem& item, const std::string& kernel);

// The variant against this GPU's free memory, after checking that item's bytes fit (UserError naming the shape
// otherwise), so a plan is refused before any launch. Needs a CUDA build and a GPU (DeviceError otherwise).
std::string plan_mixer_bench(const MixerBenchItem& item);

// Validates (tolerance 1e-4 relative in fp32, 2e-2 with TF32 products, 5e-2 for the bf16 mma variant: a
// NumericError otherwise, before any timing), then times. Needs a CUDA build and a GPU (DeviceError otherwise).
MixerBenchResult mixer_bench_cuda(const MixerBenchItem& item, const std::string& kernel, std::int64_t validate_T,
                                  int warmup, int repeats, std::uint64_t seed);

}  // namespace memcap::kata
