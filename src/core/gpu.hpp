// The one GPU runtime layer under every kernel: device buffers and tensors (RAII, shape, dtype),
// streams, events, CUDA graphs, the cuBLAS / cuBLASLt / cuSOLVER handles of a stream, and one
// error check for each library. Host-side header, usable from .cu and .cpp files of a CUDA build.
// It does not include fmt or Eigen (fmt 9 does not compile under nvcc -std=c++20): Eigen transfer
// helpers live in core/gpu_eigen.hpp. Errors become memcap::DeviceError (exit 5); a size that does
// not fit the card becomes memcap::UserError (exit 2) naming the bytes it needs.
#pragma once
#ifdef MEMCAP_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.cuh"  // MEMCAP_CUDA_CHECK, MEMCAP_CUDA_CHECK_LAUNCH

namespace memcap::gpu {

// ---- error checks (cuda_check.cuh has the runtime ones) -----------------------------------------
[[noreturn]] void throw_cublas(cublasStatus_t st, const char* what, const char* file, int line);
[[noreturn]] void throw_cusolver(cusolverStatus_t st, const char* what, const char* file, int line);

// ---- element types ---------------------------------------------------------------------------
enum class DType { f64, f32, bf16, i32, i64, u8 };
std::size_t dtype_size(DType t);
const char* to_string(DType t);
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<__nv_bfloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }

// ---- memory ----------------------------------------------------------------------------------
struct MemoryInfo {
  std::size_t free = 0, total = 0;
};
MemoryInfo memory_info();
// UserError("<what> needs X GiB of GPU memory, Y GiB free on GPU i (name); use a smaller size or
// --device cpu") unless `bytes` fit in the free memory less a 256 MiB reserve for library workspaces.
void require_device_memory(std::size_t bytes, const std::string& what);
// Human-readable size ("1.50 GiB").
std::string format_bytes(std::size_t bytes);

// Owning device allocation (cudaMalloc / cudaFree). Move-only; never leaks on a throw.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  void reset();

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Owning page-locked host allocation (cudaMallocHost / cudaFreeHost, both taken under capture_exclusion(),
// since they synchronise) for asynchronous uploads and downloads; at least 16 bytes. Not copyable or movable.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get() const { return ptr_; }
  template <class U>
  U* as(std::size_t byte_offset = 0) const {
    return reinterpret_cast<U*>(static_cast<char*>(ptr_) + byte_offset);
  }

 private:
  void* ptr_ = nullptr;
};

class Stream;

// A dense device tensor: row-major (C order) shape, one dtype, owning its buffer.
// A 2-D tensor of shape {R, C} is, to cuBLAS, a column-major C x R matrix with leading dim C.
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::vector<std::int64_t> shape, DType dtype);
  Tensor(std::initializer_list<std::int64_t> shape, DType dtype)
      : Tensor(std::vector<std::int64_t>(shape), dtype) {}
  // Move-only; a moved-from tensor is empty (no shape, no elements, no buffer).
  Tensor(Tensor&& o) noexcept
      : shape_(std::exchange(o.shape_, {})), dtype_(o.dtype_), numel_(std::exchange(o.numel_, 0)),
        buf_(std::move(o.buf_)) {}
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      shape_ = std::exchange(o.shape_, {});
      dtype_ = o.dtype_;
      numel_ = std::exchange(o.numel_, 0);
      buf_ = std::move(o.buf_);
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t dim(int i) const { return shape_.at(static_cast<std::size_t>(i)); }
  int rank() const { return static_cast<int>(shape_.size()); }
  DType dtype() const { return dtype_; }
  std::int64_t numel() const { return numel_; }
  std::size_t bytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  bool empty() const { return numel_ == 0; }
  void* raw() const { return buf_.get(); }
  // Typed pointer; DeviceError when T does not match the dtype.
  template <class T> T* data() const {
    check_type(dtype_of<T>());
    return static_cast<T*>(buf_.get());
  }

  // Host <-> device copies of the whole tensor (host array in the same row-major order and dtype).
  void upload(const void* host, const Stream& s);
  void download(void* host, const Stream& s) const;
  // Synchronous convenience copies: they wait for all work on the device (every stream) before and after.
  void upload(const void* host);
  void download(void* host) const;
  // Fill with NaN (floating dtypes; tests use it so an unwritten output cannot pass) or zero.
  void fill_nan(const Stream& s);
  void fill_zero(const Stream& s);

 private:
  void check_type(DType want) const;
  std::vector<std::int64_t> shape_;
  DType dtype_ = DType::f32;
  std::int64_t numel_ = 0;
  Buffer buf_;
};

// A non-owning typed view into a device array (for arena slices: parameters, gradients, moments).
template <class T>
struct View {
  T* ptr = nullptr;
  std::int64_t numel = 0;
};

// ---- streams, events, graphs ---------------------------------------------------------------------
class Stream {
 public:
  Stream();  // a new non-blocking stream on the current device
  ~Stream();
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& s);
  void synchronize() const;
  cudaEvent_t get() const { return e_; }
  // Milliseconds between two recorded events (both synchronized first).
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  cudaEvent_t e_ = nullptr;
};

// A captured CUDA graph: capture(stream, body) records every launch `body` makes on the stream
// (no allocation, no synchronisation inside), instantiate once, replay with launch().
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void capture(const Stream& s, const std::function<void()>& body);
  void launch(const Stream& s) const;
  bool ready() const { return exec_ != nullptr; }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// ---- library handles --------------------------------------------------------------------------
// cuBLAS, cuBLASLt and cuSOLVER handles bound to one stream (created lazily, destroyed with it).
// One per stream / worker thread; not shared between threads.
class Handles {
 public:
  explicit Handles(const Stream& s);
  ~Handles();
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
  cublasHandle_t blas();          // pointer mode host, default math mode (no TF32 unless asked)
  cublasLtHandle_t lt();
  cusolverDnHandle_t solver();
  const Stream& stream() const { return *stream_; }
  // Bytes of the workspace blas() gives cuBLAS (cublasSetWorkspace); cuBLASLt callers bring their own.
  static constexpr std::size_t kBlasWorkspaceBytes = std::size_t(32) << 20;

 private:
  const Stream* stream_;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cusolverDnHandle_t solver_ = nullptr;
  Buffer blas_workspace_;  // our own cuBLAS workspace, so GEMMs can be captured into a Graph
};

// Held by Graph::capture for the whole capture and by every device-synchronising call of this layer
// (cudaFree, handle destruction): take it around any other such call made while captures may run.
std::recursive_mutex& capture_exclusion();

// Number of visible CUDA devices (0 when none or no driver); select one for this host thread.
int device_count();
void set_device(int ordinal);

}  // namespace memcap::gpu

#define MEMCAP_CUBLAS_CHECK(call)                                                        \
  do {                                                                                   \
    cublasStatus_t memcap_st_ = (call);                                                  \
    if (memcap_st_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::memcap::gpu::throw_cublas(memcap_st_, #call, __FILE__, __LINE__);                \
  } while (0)

#define MEMCAP_CUSOLVER_CHECK(call)                                                      \
  do {                                                                                   \
    cusolverStatus_t memcap_st_ = (call);                                                \
    if (memcap_st_ != CUSOLVER_STATUS_SUCCESS)                                           \
      ::memcap::gpu::throw_cusolver(memcap_st_, #call, __FILE__, __LINE__);              \
  } while (0)

#endif  // MEMCAP_HAVE_CUDA
