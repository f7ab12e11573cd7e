// Host dispatch of the CUDA capacity trial (kernels/kata_capacity.cu): same inputs and outputs as
// evaluate_trial_cpu, float32 on the device. Declared only when built with CUDA.
#pragma once
#if defined(MEMCAP_HAVE_CUDA)
#include <Eigen/Dense>

#include "kata/capacity.hpp"

namespace memcap::kata {

// One trial on the GPU; tile_rows = 0 picks tiles of about 32M coefficients.
TrialMetrics evaluate_trial_cuda(const CapacityKernel& map, const Eigen::MatrixXd& U, const Eigen::MatrixXd& Q,
                                 const Values& values, Readout readout, std::int64_t tile_rows = 0);

}  // namespace memcap::kata
#endif
