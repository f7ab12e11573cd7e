// Thread control for OpenMP and OpenBLAS (--threads). 0 = leave the OpenMP default.
// BLAS, LAPACK and Eigen's own products always run single-threaded: a threaded OpenBLAS call sums in an
// order that depends on the thread count (dgemm/dgemv/dsyrk differ in the last bits between 1 and 2
// threads), so results would change with --threads and between cluster nodes. Parallelism comes from our OpenMP loops over
// work blocks whose boundaries do not depend on the thread count (core/parallel_product.hpp for products).
#pragma once
#include <cstdint>
#include <exception>
#include <vector>

namespace memcap {
void set_threads(int n);
int max_threads();
const char* blas_config();  // OpenBLAS build string, recorded in results

// body(i) for i in [0, n) over the OpenMP threads (dynamic schedule, one index at a time). An exception may not
// leave an OpenMP region (std::terminate: exit 134, a half-written sweep); one thrown by a body is kept and, after
// the loop, the one of the smallest index is rethrown, so the error does not depend on the thread count.
template <class Body>
void parallel_for_rethrow(std::int64_t n, Body&& body) {
  std::vector<std::exception_ptr> err(static_cast<std::size_t>(n > 0 ? n : 0));
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
  for (std::int64_t i = 0; i < n; ++i) {
    try {
      body(i);
    } catch (...) {
      err[static_cast<std::size_t>(i)] = std::current_exception();
    }
  }
  for (const auto& e : err)
    if (e) std::rethrow_exception(e);
}
}  // namespace memcap
