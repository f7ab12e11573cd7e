// OpenMP + OpenBLAS thread settings (see threads.hpp).
#include "core/threads.hpp"

#include <omp.h>

#include <Eigen/Core>

extern "C" {
void openblas_set_num_threads(int);
char* openblas_get_config(void);
}

namespace memcap {
void set_threads(int n) {
  openblas_set_num_threads(1);  // always: thread-count-independent BLAS results (threads.hpp)
  Eigen::setNbThreads(1);       // likewise Eigen's own GEMM (non-BLAS scalars), whose blocking follows threads
  if (n <= 0) return;
  omp_set_num_threads(n);
}
int max_threads() { return omp_get_max_threads(); }
const char* blas_config() { return openblas_get_config(); }
}  // namespace memcap
