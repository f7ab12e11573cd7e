// Thread control for OpenMP and OpenBLAS (--threads). 0 = leave the library defaults.
#pragma once
namespace memcap {
void set_threads(int n);
int max_threads();
const char* blas_config();  // OpenBLAS build string, recorded in results
}  // namespace memcap
