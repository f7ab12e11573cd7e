// The GPU runtime layer (see gpu.hpp): buffers, tensors, streams, events, graphs and library
// handles, with every CUDA / cuBLAS / cuSOLVER status turned into DeviceError, and an allocation
// the card cannot hold turned into UserError naming the size. Compiled by the host compiler.
#include "core/gpu.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <map>

#include "smem_limit.cuh"

#include "core/error.hpp"

namespace memcap::gpu {

// Serialises graph captures against device-synchronising calls of other threads (see Graph::capture).
std::recursive_mutex& capture_exclusion() {
  static std::recursive_mutex m;
  return m;
}

namespace {

std::string device_name() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    cudaGetLastError();
    return "the current GPU";
  }
  return fmt::format("GPU {} ({})", dev, prop.name);
}

const char* cusolver_status_name(cusolverStatus_t st) {
  switch (st) {
    case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_MAPPING_ERROR: return "CUSOLVER_STATUS_MAPPING_ERROR";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    default: return "cusolverStatus_t";
  }
}

}  // namespace

// ---- error checks ------------------------------------------------------------------------------
void throw_cublas(cublasStatus_t st, const char* what, const char* file, int line) {
  throw DeviceError(fmt::format("cuBLAS error in {} at {}:{}: {} ({})", what, file, line,
                                cublasGetStatusName(st), cublasGetStatusString(st)));
}

void throw_cusolver(cusolverStatus_t st, const char* what, const char* file, int line) {
  throw DeviceError(fmt::format("cuSOLVER error in {} at {}:{}: {} (status {})", what, file, line,
                                cusolver_status_name(st), static_cast<int>(st)));
}

// ---- element types -------------------------------------------------------------------------------
std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  MEMCAP_ASSERT(false, "unknown DType");
  return 0;
}

const char* to_string(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "unknown";
}

// ---- memory ----------------------------------------------------------------------------------------
MemoryInfo memory_info() {
  MemoryInfo m;
  MEMCAP_CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total));
  return m;
}

std::string format_bytes(std::size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < (std::size_t(1) << 10)) return fmt::format("{} B", bytes);
  if (bytes < (std::size_t(1) << 20)) return fmt::format("{:.2f} KiB", b / 1024.0);
  if (bytes < (std::size_t(1) << 30)) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024.0));
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024.0 * 1024.0));
}

void require_device_memory(std::size_t bytes, const std::string& what) {
  // Headroom for the cuBLAS / cuSOLVER workspaces and the CUDA context's own growth.
  constexpr std::size_t kReserve = std::size_t(256) << 20;
  const MemoryInfo m = memory_info();
  const std::size_t usable = m.free > kReserve ? m.free - kReserve : 0;
  if (bytes <= usable) return;
  throw UserError(fmt::format("{} needs {} of GPU memory, {} free on {}; use a smaller size or --device cpu",
                              what, format_bytes(bytes), format_bytes(m.free), device_name()));
}

// ---- Buffer ------------------------------------------------------------------------------------
Buffer::Buffer(std::size_t bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it, so the next call does not see a stale error
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) cudaGetLastError();
    throw UserError(fmt::format("cannot allocate {} of GPU memory ({} free on {}); use a smaller size or --device cpu",
                                format_bytes(bytes), format_bytes(free), device_name()));
  }
  if (err != cudaSuccess) cuda_detail::throw_cuda(err, "cudaMalloc", __FILE__, __LINE__);
  ptr_ = p;
  bytes_ = bytes;
}

Buffer::~Buffer() { reset(); }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void Buffer::reset() {
  if (ptr_) {
    // cudaFree synchronises the device, which would invalidate another thread's graph capture.
    std::lock_guard<std::recursive_mutex> lock(capture_exclusion());
    cudaFree(ptr_);  // never throws: a failing free here means the context is already lost
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

// ---- PinnedBuffer ----------------------------------------------------------------------------------
PinnedBuffer::PinnedBuffer(std::size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(capture_exclusion());
  MEMCAP_CUDA_CHECK(cudaMallocHost(&ptr_, std::max<std::size_t>(bytes, 16)));
}

PinnedBuffer::~PinnedBuffer() {
  std::lock_guard<std::recursive_mutex> lock(capture_exclusion());
  cudaFreeHost(ptr_);  // never throws
}

// ---- Tensor ------------------------------------------------------------------------------------------
Tensor::Tensor(std::vector<std::int64_t> shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
  std::int64_t n = 1;
  const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(dtype_size(dtype));
  for (std::int64_t d : shape_) {
    if (d < 0) throw UserError(fmt::format("a GPU tensor dimension is negative ({})", d));
    if (d != 0 && n > limit / d)
      throw UserError(fmt::format("a GPU tensor of shape [{}] has too many elements", fmt::join(shape_, ", ")));
    n *= d;
  }
  numel_ = n;
  buf_ = Buffer(bytes());
}

void Tensor::check_type(DType want) const {
  if (want != dtype_)
    throw DeviceError(fmt::format("a GPU tensor of dtype {} was accessed as {} (internal type mismatch)",
                                  to_string(dtype_), to_string(want)));
}

void Tensor::upload(const void* host, const Stream& s) {
  if (empty()) return;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(buf_.get(), host, bytes(), cudaMemcpyHostToDevice, s.get()));
}

void Tensor::download(void* host, const Stream& s) const {
  if (empty()) return;
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(host, buf_.get(), bytes(), cudaMemcpyDeviceToHost, s.get()));
}

// The legacy default stream does not order against our non-blocking streams, and a pageable host-to-device
// cudaMemcpy may return before its DMA ends: the streamless copies wait for the whole device on both sides.
void Tensor::upload(const void* host) {
  if (empty()) return;
  MEMCAP_CUDA_CHECK(cudaDeviceSynchronize());
  MEMCAP_CUDA_CHECK(cudaMemcpy(buf_.get(), host, bytes(), cudaMemcpyHostToDevice));
  MEMCAP_CUDA_CHECK(cudaDeviceSynchronize());
}

void Tensor::download(void* host) const {
  if (empty()) return;
  MEMCAP_CUDA_CHECK(cudaDeviceSynchronize());
  MEMCAP_CUDA_CHECK(cudaMemcpy(host, buf_.get(), bytes(), cudaMemcpyDeviceToHost));
}

// All-ones bytes are a quiet NaN in f64, f32 and bf16 (sign set, exponent all ones, mantissa
// non-zero). Integer dtypes get the same bytes (-1 for i32/i64, 255 for u8): a recognisable junk value.
void Tensor::fill_nan(const Stream& s) {
  if (empty()) return;
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(buf_.get(), 0xFF, bytes(), s.get()));
}

void Tensor::fill_zero(const Stream& s) {
  if (empty()) return;
  MEMCAP_CUDA_CHECK(cudaMemsetAsync(buf_.get(), 0, bytes(), s.get()));
}

// ---- Stream / Event / Graph ------------------------------------------------------------------
Stream::Stream() { MEMCAP_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }

Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}

void Stream::synchronize() const { MEMCAP_CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event() { MEMCAP_CUDA_CHECK(cudaEventCreate(&e_)); }

Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}

void Event::record(const Stream& s) { MEMCAP_CUDA_CHECK(cudaEventRecord(e_, s.get())); }

void Event::synchronize() const { MEMCAP_CUDA_CHECK(cudaEventSynchronize(e_)); }

float Event::elapsed_ms(const Event& start, const Event& end) {
  start.synchronize();
  end.synchronize();
  float ms = 0.f;
  MEMCAP_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), end.get()));
  return ms;
}

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void Graph::capture(const Stream& s, const std::function<void()>& body) {
  if (exec_) cudaGraphExecDestroy(std::exchange(exec_, nullptr));
  if (graph_) cudaGraphDestroy(std::exchange(graph_, nullptr));
  // Thread-local mode: several host threads may capture their own streams at the same time. Calls
  // that synchronise the whole device (cudaFree, library handle destruction) in another thread
  // would still invalidate the capture, so they wait on capture_exclusion() until it ends.
  std::lock_guard<std::recursive_mutex> lock(capture_exclusion());
  MEMCAP_CUDA_CHECK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(s.get(), &partial);  // leave the stream usable again
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t g = nullptr;
  MEMCAP_CUDA_CHECK(cudaStreamEndCapture(s.get(), &g));
  graph_ = g;
  MEMCAP_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void Graph::launch(const Stream& s) const {
  MEMCAP_ASSERT(exec_ != nullptr, "Graph::launch before capture");
  MEMCAP_CUDA_CHECK(cudaGraphLaunch(exec_, s.get()));
}

// ---- Handles ---------------------------------------------------------------------------------------
Handles::Handles(const Stream& s) : stream_(&s) {}

Handles::~Handles() {
  std::lock_guard<std::recursive_mutex> lock(capture_exclusion());  // destroying frees workspaces
  if (solver_) cusolverDnDestroy(solver_);
  if (lt_) cublasLtDestroy(lt_);
  if (blas_) cublasDestroy(blas_);
}

cublasHandle_t Handles::blas() {
  if (blas_) return blas_;
  cublasHandle_t h = nullptr;
  MEMCAP_CUBLAS_CHECK(cublasCreate(&h));
  try {
    MEMCAP_CUBLAS_CHECK(cublasSetStream(h, stream_->get()));
    MEMCAP_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    MEMCAP_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    blas_workspace_ = Buffer(kBlasWorkspaceBytes);
    MEMCAP_CUBLAS_CHECK(cublasSetWorkspace(h, blas_workspace_.get(), blas_workspace_.bytes()));
  } catch (...) {
    cublasDestroy(h);
    blas_workspace_.reset();
    throw;
  }
  blas_ = h;
  return blas_;
}

cublasLtHandle_t Handles::lt() {
  if (!lt_) MEMCAP_CUBLAS_CHECK(cublasLtCreate(&lt_));
  return lt_;
}

cusolverDnHandle_t Handles::solver() {
  if (solver_) return solver_;
  cusolverDnHandle_t h = nullptr;
  MEMCAP_CUSOLVER_CHECK(cusolverDnCreate(&h));
  try {
    MEMCAP_CUSOLVER_CHECK(cusolverDnSetStream(h, stream_->get()));
  } catch (...) {
    cusolverDnDestroy(h);
    throw;
  }
  solver_ = h;
  return solver_;
}

// ---- devices -------------------------------------------------------------------------------------
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

void set_device(int ordinal) {
  const int n = device_count();
  if (ordinal < 0 || ordinal >= n)
    throw DeviceError(fmt::format("GPU {} was requested but {} CUDA device(s) are visible", ordinal, n));
  MEMCAP_CUDA_CHECK(cudaSetDevice(ordinal));
}

}  // namespace memcap::gpu

namespace memcap::cuda_detail {

void raise_dynamic_smem(const void* func, std::size_t bytes) {
  static std::mutex m;
  static std::map<std::pair<int, const void*>, std::size_t> limit;  // (device, kernel) -> limit set so far
  int dev = 0;
  MEMCAP_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(m);
  std::size_t& have = limit[{dev, func}];
  if (bytes <= have) return;
  MEMCAP_CUDA_CHECK(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  have = bytes;
}

}  // namespace memcap::cuda_detail
#endif  // MEMCAP_HAVE_CUDA
