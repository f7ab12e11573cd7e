// The CUDA math libraries loaded on first use (src/core/cuda_libs.cpp says why and how). CUDA builds only.
#pragma once
#include <string>
#include <vector>

namespace memcap::cuda_libs {

enum class Lib { cublas = 0, cublasLt = 1, cusolver = 2 };

// One library function memcap calls through a forwarder.
struct Function {
  Lib lib;
  const char* name;  // the exported symbol (cublasCreate_v2, not the cublasCreate macro)
};

// Every forwarded function.
const std::vector<Function>& functions();
// Loads every library and looks up every forwarded function; one message per function that cannot be found
// (empty when all resolve). Needs the libraries installed, not a GPU.
std::vector<std::string> unresolved();
// Whether the library is loaded in this process (without loading it).
bool loaded(Lib lib);

}  // namespace memcap::cuda_libs
