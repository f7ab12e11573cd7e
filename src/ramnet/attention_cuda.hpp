// GPU backend of the attention comparisons (E2/E3, `ramnet attn --device cuda`): a LogKappaFn that computes
// the kappa student's n×T log-kernel matrix with log_kappa_matrix_cuda (kappa_cuda.hpp, float64). Everything
// else in run_attention stays on the CPU. Built only with MEMCAP_HAVE_CUDA.
#pragma once
#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#include "ramnet/attention.hpp"

namespace memcap::ramnet {

// log_kappa_matrix_cuda on GPU `ordinal` through h (its stream and cuBLAS handle). The trials of
// run_attention call it from several OpenMP threads: the calls are serialised (one stream, one handle)
// and each makes `ordinal` current on its thread first. h must outlive the returned function.
LogKappaFn cuda_log_kappa(gpu::Handles& h, int ordinal);

}  // namespace memcap::ramnet
#endif
