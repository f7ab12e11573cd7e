// CUDA path of the E7 recall protocol: the same function as recall_outputs_cpu / decode_cpu /
// evaluate_trial_cpu (recall.hpp), on the GPU of the given handles' stream. Inputs are the host draws
// (so both paths see the same keys, values and noise); factor tables and fixed-point Top-K scores are
// computed on the host as in the CPU reference and uploaded, so features, Top-K lists, GSU steps and
// sparse reads equal the CPU's bit for bit; GEMM sums (cuBLAS DGEMM, float64, no TF32) differ in the
// last bits. Large N×N and N×dp^U matrices exist only as row tiles of kDeviceTileDoubles.
// Built only with MEMCAP_HAVE_CUDA.
#pragma once
#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#include "ramnet/recall.hpp"

namespace memcap::ramnet {

// Outputs o_i (N × dv) into O: a device f64 tensor of shape {N, dv} (tests poison it first).
void recall_outputs_cuda(const RecallModel& m, const RecallInputs& in, gpu::Handles& h, gpu::Tensor& O);
// Decoding of device outputs O ({N, dv}) against the host values V.
Decoded decode_cuda(const gpu::Tensor& O, const RowMatrix& V, gpu::Handles& h);
// One (N, seed) evaluation: outputs, decoding, score.
TrialOutcome evaluate_trial_cuda(const RecallModel& m, const RecallInputs& in, gpu::Handles& h);

}  // namespace memcap::ramnet
#endif
