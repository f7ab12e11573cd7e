// The CUDA math libraries (cuBLAS, cuBLASLt, cuSOLVER) loaded when first used, not when a program starts.
// Linking them made every start of hebb / kata / ramnet (and every test binary) pay their static initialisers,
// ≈ 0.45 s (cuBLASLt) to 0.58 s (cuSOLVER) of CPU time on the CI machine, GPU or not: `hebb --help` took 0.6 s and
// the CLI tests, ~1,000 process starts, spent most of their time there. So memcap does not link them: it defines
// each library function it calls (with the parameter types of the C declarations in cublas_v2.h, cublasLt.h and
// cusolverDn.h: a wrong list declares a C++ overload instead, and the link fails) as a forwarder that dlopen()s the
// library on the first call and calls the real function. The library is looked for by its soname (the loader's paths),
// then beside libcudart (the CUDA install this build linked). When it cannot be loaded the call throws DeviceError
// naming the library and why. Adding a call to another function of these libraries: add it to MEMCAP_CUDA_LIB_FUNCTIONS
// below, or the link fails with an undefined reference (CUDA builds, CI included).
#ifdef MEMCAP_HAVE_CUDA
#include "core/cuda_libs.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <dlfcn.h>

#include <array>
#include <mutex>
#include <string>

#include "core/error.hpp"

// Every cuBLAS / cuBLASLt / cuSOLVER function memcap calls, once: X(library, return type, exported name,
// (parameters with the C declaration's types), arguments). Expanded into the forwarders and into functions().
#define MEMCAP_CUDA_LIB_FUNCTIONS(X)                                                                                  \
  X(cublas, cublasStatus_t, cublasCreate_v2, (cublasHandle_t * a0), a0)                                               \
  X(cublas, cublasStatus_t, cublasDestroy_v2, (cublasHandle_t a0), a0)                                                \
  X(cublas, cublasStatus_t, cublasSetStream_v2, (cublasHandle_t a0, cudaStream_t a1), a0, a1)                         \
  X(cublas, cublasStatus_t, cublasGetStream_v2, (cublasHandle_t a0, cudaStream_t * a1), a0, a1)                       \
  X(cublas, cublasStatus_t, cublasSetMathMode, (cublasHandle_t a0, cublasMath_t a1), a0, a1)                          \
  X(cublas, cublasStatus_t, cublasGetMathMode, (cublasHandle_t a0, cublasMath_t * a1), a0, a1)                        \
  X(cublas, cublasStatus_t, cublasSetPointerMode_v2, (cublasHandle_t a0, cublasPointerMode_t a1), a0, a1)             \
  X(cublas, cublasStatus_t, cublasSetWorkspace_v2, (cublasHandle_t a0, void* a1, size_t a2), a0, a1, a2)              \
  X(cublas, const char*, cublasGetStatusString, (cublasStatus_t a0), a0)                                              \
  X(cublas, const char*, cublasGetStatusName, (cublasStatus_t a0), a0)                                                \
  X(cublas, cublasStatus_t, cublasSgemm_v2,                                                                           \
    (cublasHandle_t a0, cublasOperation_t a1, cublasOperation_t a2, int a3, int a4, int a5, const float* a6,          \
     const float* a7, int a8, const float* a9, int a10, const float* a11, float* a12, int a13),                       \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13)                                                       \
  X(cublas, cublasStatus_t, cublasSgemm_v2_64,                                                                        \
    (cublasHandle_t a0, cublasOperation_t a1, cublasOperation_t a2, int64_t a3, int64_t a4, int64_t a5,               \
     const float* a6, const float* a7, int64_t a8, const float* a9, int64_t a10, const float* a11, float* a12,        \
     int64_t a13),                                                                                                    \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13)                                                       \
  X(cublas, cublasStatus_t, cublasDgemm_v2,                                                                           \
    (cublasHandle_t a0, cublasOperation_t a1, cublasOperation_t a2, int a3, int a4, int a5, const double* a6,         \
     const double* a7, int a8, const double* a9, int a10, const double* a11, double* a12, int a13),                   \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13)                                                       \
  X(cublas, cublasStatus_t, cublasDgemm_v2_64,                                                                        \
    (cublasHandle_t a0, cublasOperation_t a1, cublasOperation_t a2, int64_t a3, int64_t a4, int64_t a5,               \
     const double* a6, const double* a7, int64_t a8, const double* a9, int64_t a10, const double* a11, double* a12,   \
     int64_t a13),                                                                                                    \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13)                                                       \
  X(cublas, cublasStatus_t, cublasDgeam_64,                                                                           \
    (cublasHandle_t a0, cublasOperation_t a1, cublasOperation_t a2, int64_t a3, int64_t a4, const double* a5,         \
     const double* a6, int64_t a7, const double* a8, const double* a9, int64_t a10, double* a11, int64_t a12),        \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12)                                                            \
  X(cublas, cublasStatus_t, cublasDsyrk_v2_64,                                                                        \
    (cublasHandle_t a0, cublasFillMode_t a1, cublasOperation_t a2, int64_t a3, int64_t a4, const double* a5,          \
     const double* a6, int64_t a7, const double* a8, double* a9, int64_t a10),                                        \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10)                                                                      \
  X(cublas, cublasStatus_t, cublasSgemmStridedBatched,                                                                \
    (cublasHandle_t a0, cublasOperation_t a1, cublasOperation_t a2, int a3, int a4, int a5, const float* a6,          \
     const float* a7, int a8, long long int a9, const float* a10, int a11, long long int a12, const float* a13,       \
     float* a14, int a15, long long int a16, int a17),                                                                \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17)                                   \
  X(cublas, cublasStatus_t, cublasDgemmStridedBatched,                                                                \
    (cublasHandle_t a0, cublasOperation_t a1, cublasOperation_t a2, int a3, int a4, int a5, const double* a6,         \
     const double* a7, int a8, long long int a9, const double* a10, int a11, long long int a12, const double* a13,    \
     double* a14, int a15, long long int a16, int a17),                                                               \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17)                                   \
  X(cublas, cublasStatus_t, cublasGemmEx,                                                                             \
    (cublasHandle_t a0, cublasOperation_t a1, cublasOperation_t a2, int a3, int a4, int a5, const void* a6,           \
     const void* a7, cudaDataType a8, int a9, const void* a10, cudaDataType a11, int a12, const void* a13, void* a14, \
     cudaDataType a15, int a16, cublasComputeType_t a17, cublasGemmAlgo_t a18),                                       \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18)                              \
  X(cublas, cublasStatus_t, cublasGemmStridedBatchedEx,                                                               \
    (cublasHandle_t a0, cublasOperation_t a1, cublasOperation_t a2, int a3, int a4, int a5, const void* a6,           \
     const void* a7, cudaDataType a8, int a9, long long int a10, const void* a11, cudaDataType a12, int a13,          \
     long long int a14, const void* a15, void* a16, cudaDataType a17, int a18, long long int a19, int a20,            \
     cublasComputeType_t a21, cublasGemmAlgo_t a22),                                                                  \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22)          \
  X(cublasLt, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * a0), a0)                                            \
  X(cublasLt, cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t a0), a0)                                             \
  X(cusolver, cusolverStatus_t, cusolverDnCreate, (cusolverDnHandle_t * a0), a0)                                      \
  X(cusolver, cusolverStatus_t, cusolverDnDestroy, (cusolverDnHandle_t a0), a0)                                       \
  X(cusolver, cusolverStatus_t, cusolverDnSetStream, (cusolverDnHandle_t a0, cudaStream_t a1), a0, a1)                \
  X(cusolver, cusolverStatus_t, cusolverDnCreateParams, (cusolverDnParams_t * a0), a0)                                \
  X(cusolver, cusolverStatus_t, cusolverDnDestroyParams, (cusolverDnParams_t a0), a0)                                 \
  X(cusolver, cusolverStatus_t, cusolverDnXpotrf_bufferSize,                                                          \
    (cusolverDnHandle_t a0, cusolverDnParams_t a1, cublasFillMode_t a2, int64_t a3, cudaDataType a4, const void* a5,  \
     int64_t a6, cudaDataType a7, size_t* a8, size_t* a9),                                                            \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9)                                                                           \
  X(cusolver, cusolverStatus_t, cusolverDnXpotrf,                                                                     \
    (cusolverDnHandle_t a0, cusolverDnParams_t a1, cublasFillMode_t a2, int64_t a3, cudaDataType a4, void* a5,        \
     int64_t a6, cudaDataType a7, void* a8, size_t a9, void* a10, size_t a11, int* a12),                              \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12)                                                            \
  X(cusolver, cusolverStatus_t, cusolverDnXpotrs,                                                                     \
    (cusolverDnHandle_t a0, cusolverDnParams_t a1, cublasFillMode_t a2, int64_t a3, int64_t a4, cudaDataType a5,      \
     const void* a6, int64_t a7, cudaDataType a8, void* a9, int64_t a10, int* a11),                                   \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11)                                                                 \
  X(cusolver, cusolverStatus_t, cusolverDnXsyevd_bufferSize,                                                          \
    (cusolverDnHandle_t a0, cusolverDnParams_t a1, cusolverEigMode_t a2, cublasFillMode_t a3, int64_t a4,             \
     cudaDataType a5, const void* a6, int64_t a7, cudaDataType a8, const void* a9, cudaDataType a10, size_t* a11,     \
     size_t* a12),                                                                                                    \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12)                                                            \
  X(cusolver, cusolverStatus_t, cusolverDnXsyevd,                                                                     \
    (cusolverDnHandle_t a0, cusolverDnParams_t a1, cusolverEigMode_t a2, cublasFillMode_t a3, int64_t a4,             \
     cudaDataType a5, void* a6, int64_t a7, cudaDataType a8, void* a9, cudaDataType a10, void* a11, size_t a12,       \
     void* a13, size_t a14, int* a15),                                                                                \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15)                                             \
  X(cusolver, cusolverStatus_t, cusolverDnXsytrs_bufferSize,                                                          \
    (cusolverDnHandle_t a0, cublasFillMode_t a1, int64_t a2, int64_t a3, cudaDataType a4, const void* a5, int64_t a6, \
     const int64_t* a7, cudaDataType a8, void* a9, int64_t a10, size_t* a11, size_t* a12),                            \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12)                                                            \
  X(cusolver, cusolverStatus_t, cusolverDnXsytrs,                                                                     \
    (cusolverDnHandle_t a0, cublasFillMode_t a1, int64_t a2, int64_t a3, cudaDataType a4, const void* a5, int64_t a6, \
     const int64_t* a7, cudaDataType a8, void* a9, int64_t a10, void* a11, size_t a12, void* a13, size_t a14,         \
     int* a15),                                                                                                       \
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15)                                             \
  X(cusolver, cusolverStatus_t, cusolverDnDsytrf_bufferSize,                                                          \
    (cusolverDnHandle_t a0, int a1, double* a2, int a3, int* a4), a0, a1, a2, a3, a4)                                 \
  X(cusolver, cusolverStatus_t, cusolverDnDsytrf,                                                                     \
    (cusolverDnHandle_t a0, cublasFillMode_t a1, int a2, double* a3, int a4, int* a5, double* a6, int a7, int* a8),   \
    a0, a1, a2, a3, a4, a5, a6, a7, a8)

namespace memcap::cuda_libs {
namespace {

// The soname of each library: its major version from the headers this build compiled against.
std::string soname(Lib lib) {
  switch (lib) {
    case Lib::cublas:
      return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    case Lib::cublasLt:
      return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    case Lib::cusolver:
      return "libcusolver.so." + std::to_string(CUSOLVER_VER_MAJOR);
  }
  return {};
}

// The folder of the libcudart this program runs with ("" when unknown).
std::string cudart_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cudaGetDeviceCount), &info) == 0 || info.dli_fname == nullptr) return {};
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

struct Loaded {
  std::once_flag once;
  void* handle = nullptr;
  std::string error;
};
std::array<Loaded, 3> g_libs;

void* handle_of(Lib lib) {
  Loaded& l = g_libs[static_cast<std::size_t>(lib)];
  std::call_once(l.once, [&] {
    const std::string name = soname(lib);
    l.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l.handle != nullptr) return;
    const char* first = dlerror();
    l.error = first ? first : "not found";
    const std::string dir = cudart_dir();
    if (dir.empty()) return;
    l.handle = dlopen((dir + name).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l.handle == nullptr) {
      const char* second = dlerror();
      l.error += std::string("; ") + (second ? second : (dir + name + ": not found"));
    }
  });
  if (l.handle == nullptr)
    throw DeviceError("cannot load " + soname(lib) + " (CUDA math library, needed by this GPU path): " + l.error);
  return l.handle;
}

void* find(Lib lib, const char* name) {
  void* h = handle_of(lib);
  dlerror();
  void* f = dlsym(h, name);
  if (f == nullptr) {
    const char* why = dlerror();
    throw DeviceError(std::string("the CUDA math library ") + soname(lib) + " has no function " + name +
                      (why ? std::string(": ") + why : std::string()));
  }
  return f;
}

// Calls the library function at f with the forwarder's own parameters: their types (A...) are the declaration's,
// so the pointer type is written once, in the forwarder's parameter list.
template <class R, class... A>
R call(void* f, A... a) {
  return reinterpret_cast<R (*)(A...)>(f)(a...);
}

}  // namespace

const std::vector<Function>& functions() {
#define MEMCAP_ENTRY(LIB, RET, NAME, PARAMS, ...) {Lib::LIB, #NAME},
  static const std::vector<Function> all = {MEMCAP_CUDA_LIB_FUNCTIONS(MEMCAP_ENTRY)};
#undef MEMCAP_ENTRY
  return all;
}

std::vector<std::string> unresolved() {
  std::vector<std::string> missing;
  for (const Function& f : functions()) {
    try {
      find(f.lib, f.name);
    } catch (const DeviceError& e) {
      missing.push_back(e.what());
    }
  }
  return missing;
}

bool loaded(Lib lib) {
  const std::string name = soname(lib);
  // RTLD_NOLOAD: a handle only when the library is already in this process
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) {
    const std::string dir = cudart_dir();
    if (!dir.empty()) h = dlopen((dir + name).c_str(), RTLD_NOW | RTLD_NOLOAD);
  }
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

}  // namespace memcap::cuda_libs

// ---- the forwarders (C linkage: the parameter types of the declarations in the headers above) --------------
using memcap::cuda_libs::call;
using memcap::cuda_libs::find;
using memcap::cuda_libs::Lib;

// MEMCAP_FORWARD(lib, return type, exported name, (parameters), arguments): the forwarder of one function.
#define MEMCAP_FORWARD(LIB, RET, NAME, PARAMS, ...) \
  RET NAME PARAMS {                                 \
    static void* const f = find(Lib::LIB, #NAME);   \
    return call<RET>(f, __VA_ARGS__);               \
  }

MEMCAP_CUDA_LIB_FUNCTIONS(MEMCAP_FORWARD)
#undef MEMCAP_FORWARD

#endif  // MEMCAP_HAVE_CUDA
