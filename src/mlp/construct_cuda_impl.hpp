// Internals of the closed-form GPU path (construct_cuda.hpp), shared by device_ops_cuda.cpp,
// construct_cuda.cpp, readout_cuda.cpp, cg_cuda.cpp and evaluate_cuda.cpp: a bump arena over one
// device allocation (or a counting pass that only measures it), column-major device views, cuBLAS
// wrappers, tiles, and the build / evaluation stages.
#pragma once
#ifdef MEMCAP_HAVE_CUDA
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/gpu.hpp"
#include "mlp/construct_cuda.hpp"
#include "mlp_margin.cuh"

namespace memcap::mlp::cudaimpl {

// Bump allocator. Counting arena (default constructed): take() returns nullptr and only measures;
// the peak of a counting pass is the size of the real arena that replays the same sequence.
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(std::size_t bytes, const gpu::Stream& s, bool poison);
  bool counting() const { return storage_.empty(); }
  template <class T>
  T* take(std::int64_t n) {
    MEMCAP_ASSERT(n >= 0, "negative arena request");
    const std::size_t off = used_;
    used_ = align(used_ + static_cast<std::size_t>(n) * sizeof(T));
    peak_ = std::max(peak_, used_);
    if (counting()) return nullptr;
    MEMCAP_ASSERT(used_ <= capacity_, "device arena overflow (layout differs from its counting pass)");
    return reinterpret_cast<T*>(static_cast<char*>(storage_.raw()) + off);
  }
  std::size_t mark() const { return used_; }
  void release(std::size_t m) { used_ = m; }
  std::size_t peak() const { return peak_; }
  static constexpr std::size_t kAlign = 256;
  static std::size_t align(std::size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

 private:
  gpu::Tensor storage_;
  std::size_t used_ = 0, peak_ = 0, capacity_ = 0;
};

struct Dims {
  std::int64_t F = 0, P = 0, d = 0, m = 0;
};

// Rows / columns per tile of each loop (all >= 1, never more than the extent).
struct Tiles {
  std::int64_t eval_rows = 1;  // keys per score tile (T x m hidden, T x P scores)
  std::int64_t feat_rows = 1;  // keys per feature tile (primal Gram, NTK up-projection)
  std::int64_t feat_cols = 1;  // features per column tile (sketched readout, dual Gram)
  std::int64_t cg_cols = 1;    // keys per tile of the CG operator / right-hand side
};
Tiles choose_tiles(const Dims& z, std::int64_t override_tile);

// Execution context: the caller's stream and handles, plus workspaces kept alive to the end of
// the call (freeing device memory mid-call would synchronise the whole device).
struct Ctx {
  gpu::Handles& h;
  cudaStream_t s;
  cublasHandle_t blas;
  std::vector<gpu::Tensor> keep;
  explicit Ctx(gpu::Handles& handles);
  // Device workspace of `bytes` that lives until the context ends.
  void* workspace(std::size_t bytes);
  // Copy n elements of T from device to host and wait for the stream.
  template <class T>
  void read(T* host, const T* dev, std::int64_t n = 1) {
    if (n > 0)
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(host, dev, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToHost, s));
    sync();
  }
  void sync() { MEMCAP_CUDA_CHECK(cudaStreamSynchronize(s)); }
  template <class T>
  void write(T* dev, const T* host, std::int64_t n) {
    if (n > 0)
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dev, host, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyHostToDevice, s));
  }
  template <class T>
  void copy(T* dst, const T* src, std::int64_t n) {
    if (n > 0)
      MEMCAP_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, s));
  }
  template <class T>
  void zero(T* dst, std::int64_t n) {
    if (n > 0) MEMCAP_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<std::size_t>(n) * sizeof(T), s));
  }
};

// Column-major C (M x N) = alpha op(A) op(B) + beta C (cuBLAS 64-bit API; no TF32).
void gemm(Ctx& c, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const double* A,
          std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C, std::int64_t ldc);
void gemm(Ctx& c, bool ta, bool tb, std::int64_t M, std::int64_t N, std::int64_t K, double alpha, const float* A,
          std::int64_t lda, const float* B, std::int64_t ldb, double beta, float* C, std::int64_t ldc);
// Lower triangle of C (n x n) = alpha op(A) op(A)ᵀ + beta C; trans: op(A) = Aᵀ (A is k x n).
void syrk(Ctx& c, bool trans, std::int64_t n, std::int64_t k, double alpha, const double* A, std::int64_t lda,
          double beta, double* C, std::int64_t ldc);
// C (M x N, ld ldc) = Aᵀ (A is N x M, ld lda).
void transpose(Ctx& c, std::int64_t M, std::int64_t N, const double* A, std::int64_t lda, double* C, std::int64_t ldc);

// Facts on the device (column-major, float64): keys F x d, values P x d, targets C_f F x d, map F.
struct DeviceFacts {
  double* keys = nullptr;
  double* values = nullptr;
  double* targets = nullptr;
  int* map = nullptr;
  std::int64_t F = 0, P = 0, d = 0;
};
DeviceFacts layout_facts(DeviceArena& a, const Dims& z);
void upload_facts(Ctx& c, const FactSet& fs, const DeviceFacts& df);

// A gated MLP on the device: A, G m x d, B d x m, optional biases (null = none).
struct DeviceModel {
  double* A = nullptr;
  double* G = nullptr;
  double* B = nullptr;
  double* bias_up = nullptr;
  double* bias_gate = nullptr;
  double* bias_out = nullptr;
  int gate = 0;  // cuda::Gate: identity, relu, silu
  std::int64_t m = 0, d = 0;
};
// GatedMLP::gate as cuda::Gate (UserError for a gate the GPU path does not know).
int gate_code(const std::string& gate);
DeviceModel layout_model(DeviceArena& a, std::int64_t m, std::int64_t d, bool biases);
void upload_model(Ctx& c, const GatedMLP& mlp, const DeviceModel& dm);
GatedMLP download_model(Ctx& c, const DeviceModel& dm);

// Hidden layer of a tile: H (T x n, ld T) = (X[r0:r0+T] A[c0:c0+n]ᵀ + bu) ⊙ σ(X[r0:r0+T] G[c0:c0+n]ᵀ + bg),
// X with leading dimension ldx. work: T x n.
void hidden_tile(Ctx& c, const DeviceModel& dm, const double* X, std::int64_t ldx, std::int64_t r0, std::int64_t T,
                 std::int64_t c0, std::int64_t n, double* H, double* work);

// ---- build and evaluation stages ------------------------------------------------------------------
// Each stage first takes its buffers from the arena, then, when c is non-null, computes. A counting
// pass (c = nullptr, counting arena) therefore measures exactly what the real pass allocates.

// Flags the stages raise on the device (zeroed at the start of a call).
struct DeviceFlags {
  int* solve_failed = nullptr;  // optimistic Cholesky failed (or gave NaN/Inf): redo in careful mode
  int* nonfinite = nullptr;     // NaN/Inf in the weights
};

// Sketched / exact-K2 readout B = (1/F) C_fᵀ Φ with Φ = hidden(keys) (construct_cuda.cpp).
void hebbian_stage(Ctx* c, DeviceArena& a, const DeviceModel& dm, const DeviceFacts& df, const Dims& z,
                   const Tiles& t);
// NTK up-projection A = (1/m)(H ⊙ (C_f P))ᵀ K, H = K W_gateᵀ (construct_cuda.cpp).
void ntk_stage(Ctx* c, DeviceArena& a, const DeviceModel& dm, const DeviceFacts& df, const Dims& z, const Tiles& t);

struct SolveOutcome {
  bool dual = false;
  std::string solver;  // cholesky | ldlt-bunch-kaufman | eigen (optimistic mode: cholesky, see flags)
};
// Whitened readout (spec §2.3) on Φ = hidden(keys) of dm (A, G set); writes dm.B (readout_cuda.cpp).
// careful: the CPU's Cholesky -> LDLᵀ -> eigen chain (synchronises); else Cholesky only, raising
// flags.solve_failed when it fails.
SolveOutcome whitened_stage(Ctx* c, DeviceArena& a, const DeviceModel& dm, const DeviceFacts& df, const Dims& z,
                            const Tiles& t, double ridge, bool careful, const DeviceFlags& flags);
// solve_symmetric on the device: S (n x n, lower triangle valid) X = R, X in place of R. diag (n)
// and R0 (n x nrhs) are scratch for the careful chain; info one device int.
std::string solve_symmetric_device(Ctx& c, double* S, std::int64_t n, double* R, std::int64_t nrhs, double* diag,
                                   double* R0, int* info, bool careful, const DeviceFlags& flags);

// Data-dependent construction (spec §2.4) on dm holding the unscaled A0, A1: W0, the two CG fits,
// the whitened readout; returns the solver note in the CPU's format (cg_cuda.cpp).
bool cg_uses_float32(const MethodSpec& method, std::int64_t m, std::int64_t d);
std::string data_dependent_stage(Ctx* c, DeviceArena& a, const DeviceModel& dm, const DeviceFacts& df,
                                 const Dims& z, const Tiles& t, const MethodSpec& method, bool careful,
                                 const DeviceFlags& flags);

// Per-key results of an evaluation (evaluate_cuda.cpp).
struct PerKey {
  double* margin = nullptr;  // F
  int* argmax = nullptr;     // F
  int* worst = nullptr;      // F
  cuda::EvalSummary* summary = nullptr;
};
PerKey layout_per_key(DeviceArena& a, const Dims& z);
// Tiled evaluation of MLP(queries) (F x d, ld F) against all P values, raw or normalized outputs;
// per-key results and the summary stay on the device (no host sync).
void evaluate_stage(Ctx* c, DeviceArena& a, const PerKey& pk, const DeviceModel& dm, const DeviceFacts& df,
                    const double* queries, const Dims& z, const Tiles& t, bool normalize);

}  // namespace memcap::mlp::cudaimpl
#endif
