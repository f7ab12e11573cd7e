// Thread control for OpenMP and OpenBLAS (--threads). 0 = leave the OpenMP default.
// BLAS, LAPACK and Eigen's own products always run single-threaded: a threaded OpenBLAS call sums in an
// order that depends on the thread count (dgemm/dgemv/dsyrk differ in the last bits between 1 and 2
// threads), so results would change with --threads and between cluster nodes. Parallelism comes from our OpenMP loops over
// work blocks whose boundaries do not depend on the thread count (core/parallel_product.hpp for products).
#pragma once
namespace memcap {
void set_threads(int n);
int max_threads();
const char* blas_config();  // OpenBLAS build string, recorded in results
}  // namespace memcap
