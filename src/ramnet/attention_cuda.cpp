// GPU log κ backend of run_attention (see attention_cuda.hpp).
#if defined(MEMCAP_HAVE_CUDA)
#include "ramnet/attention_cuda.hpp"

#include <memory>
#include <mutex>

#include "ramnet/kappa_cuda.hpp"

namespace memcap::ramnet {

LogKappaFn cuda_log_kappa(gpu::Handles& h, int ordinal) {
  auto mu = std::make_shared<std::mutex>();
  return [&h, ordinal, mu](const Params& p, const Codebook& C, const Eigen::MatrixXd& Q, const Eigen::MatrixXd& K) {
    std::lock_guard<std::mutex> lock(*mu);
    gpu::set_device(ordinal);
    return log_kappa_matrix_cuda(p, C, Q, K, h);
  };
}

}  // namespace memcap::ramnet
#endif
