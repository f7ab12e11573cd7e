// The CUDA math libraries are loaded on first use (src/core/cuda_libs.cpp), not at program start: this test binary
// links memcap_base like the apps do, so at its start none of them may be in the process; every function memcap
// forwards must then resolve in the installed libraries, and a forwarded call must reach the real function. Needs
// the CUDA toolkit's libraries, not a GPU (CI runs it).
#include <doctest/doctest.h>

#include <cublas_v2.h>

#include <set>
#include <string>

#include "core/cuda_libs.hpp"

using memcap::cuda_libs::Lib;

TEST_CASE("cuBLAS, cuBLASLt and cuSOLVER are not loaded at start, and every forwarded function resolves") {
  // doctest runs test cases in file order; this is the only one, so nothing has called a forwarder yet
  CHECK_FALSE(memcap::cuda_libs::loaded(Lib::cublas));
  CHECK_FALSE(memcap::cuda_libs::loaded(Lib::cublasLt));
  CHECK_FALSE(memcap::cuda_libs::loaded(Lib::cusolver));

  const auto& fns = memcap::cuda_libs::functions();
  std::set<std::string> names;
  for (const auto& f : fns) names.insert(f.name);
  CHECK(names.size() == fns.size());  // no function listed twice
  CHECK(names.count("cublasGemmStridedBatchedEx") == 1);
  CHECK(names.count("cusolverDnXsyevd") == 1);

  const std::vector<std::string> missing = memcap::cuda_libs::unresolved();
  for (const auto& m : missing) INFO(m);
  CHECK(missing.empty());
  CHECK(memcap::cuda_libs::loaded(Lib::cublas));
  CHECK(memcap::cuda_libs::loaded(Lib::cublasLt));
  CHECK(memcap::cuda_libs::loaded(Lib::cusolver));

  // a forwarded call reaches the library: the status names are the library's own strings, GPU or not
  CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_SUCCESS)) == "CUBLAS_STATUS_SUCCESS");
  CHECK(std::string(cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED)) == "CUBLAS_STATUS_NOT_INITIALIZED");
  // creating a handle: success on a GPU machine, NOT_INITIALIZED (no driver or device) elsewhere, never a crash
  cublasHandle_t h = nullptr;
  const cublasStatus_t st = cublasCreate(&h);
  INFO("cublasCreate: " << cublasGetStatusName(st));
  CHECK((st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_INITIALIZED));
  if (st == CUBLAS_STATUS_SUCCESS) CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}
