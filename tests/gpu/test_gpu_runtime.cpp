// GPU runtime layer (core/gpu.hpp, core/gpu_eigen.hpp): exact tensor round trips per dtype, NaN
// poisoning, error mapping (dtype mismatch, memory that does not fit), events, graph capture and
// replay, concurrent streams with their own cuBLAS handles, and ownership transfer by moves.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/gpu.hpp"
#include "core/gpu_eigen.hpp"
#include "core/random_fill.hpp"

using namespace memcap;

namespace {

constexpr std::uint64_t kSeed = 20240611;
// f64 GEMM against Eigen, k <= 256: rounding error ~ sqrt(k) * 2^-53 relative, far below this.
constexpr double kF64GemmRelTol = 1e-12;

Eigen::MatrixXd random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint64_t stream) {
  return rng::normal_matrix(rows, cols, kSeed, stream);
}

// Small integers: every product and sum below is exact in f64, so GEMM results compare exactly.
Eigen::MatrixXd integer_matrix(Eigen::Index rows, Eigen::Index cols, int offset) {
  Eigen::MatrixXd m(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) m(i, j) = static_cast<double>((3 * i + 5 * j + offset) % 11 - 5);
  return m;
}

// Row-major C (m x n) = A (m x k) B (k x n) on device f64 tensors (cuBLAS sees C^T = B^T A^T).
void gemm_rm(cublasHandle_t h, const gpu::Tensor& A, const gpu::Tensor& B, gpu::Tensor& C) {
  const int m = static_cast<int>(A.dim(0)), k = static_cast<int>(A.dim(1)), n = static_cast<int>(B.dim(1));
  const double one = 1.0, zero = 0.0;
  MEMCAP_CUBLAS_CHECK(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, B.data<double>(), n,
                                  A.data<double>(), k, &zero, C.data<double>(), n));
}

double rel_error(const Eigen::MatrixXd& got, const Eigen::MatrixXd& want) {
  return (got - want).norm() / want.norm();
}

}  // namespace

TEST_CASE("gpu: dtype sizes and names") {
  CHECK(gpu::dtype_size(gpu::DType::f64) == 8);
  CHECK(gpu::dtype_size(gpu::DType::f32) == 4);
  CHECK(gpu::dtype_size(gpu::DType::bf16) == 2);
  CHECK(gpu::dtype_size(gpu::DType::i64) == 8);
  CHECK(gpu::dtype_size(gpu::DType::u8) == 1);
  CHECK(std::string(gpu::to_string(gpu::DType::bf16)) == "bf16");
  CHECK(gpu::device_count() >= 1);
}

TEST_CASE("gpu: Eigen round trip is exact in f64 and exact-after-rounding in f32 / bf16") {
  gpu::Stream s;
  const Eigen::MatrixXd m = random_matrix(37, 53, 1);  // odd sizes: row-major indexing is exercised

  const gpu::Tensor t64 = gpu::to_device(m, gpu::DType::f64, s);
  CHECK(t64.shape() == std::vector<std::int64_t>{37, 53});
  CHECK(t64.dtype() == gpu::DType::f64);
  CHECK(gpu::to_host(t64, s) == m);

  const Eigen::MatrixXd r32 = gpu::to_host(gpu::to_device(m, gpu::DType::f32, s), s);
  const Eigen::MatrixXd rb16 = gpu::to_host(gpu::to_device(m, gpu::DType::bf16, s), s);
  int bad32 = 0, bad16 = 0;
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) {
      // f32: exactly the host rounding. bf16: exactly the host bf16 rounding, within half an ulp (2^-8 rel.).
      if (r32(i, j) != static_cast<double>(static_cast<float>(m(i, j)))) ++bad32;
      const double want16 = static_cast<double>(__bfloat162float(__double2bfloat16(m(i, j))));
      if (rb16(i, j) != want16 || std::abs(rb16(i, j) - m(i, j)) > std::ldexp(std::abs(m(i, j)), -8)) ++bad16;
    }
  CHECK(bad32 == 0);
  CHECK(bad16 == 0);

  // Vectors and raw host arrays.
  const Eigen::VectorXd v = random_matrix(101, 1, 2).col(0);
  const gpu::Tensor tv = gpu::to_device(v, gpu::DType::f64, s);
  CHECK(tv.rank() == 1);
  CHECK(gpu::to_host_vector(tv, s) == v);
  std::vector<std::int32_t> ints(1000), back(1000, 0);
  for (int i = 0; i < 1000; ++i) ints[static_cast<std::size_t>(i)] = i * i - 7;
  gpu::Tensor ti({10, 100}, gpu::DType::i32);
  ti.upload(ints.data(), s);
  ti.download(back.data(), s);
  s.synchronize();
  CHECK(back == ints);

  // upload_into checks the shape.
  gpu::Tensor dst({37, 53}, gpu::DType::f32);
  gpu::upload_into(dst, m, s);
  CHECK(gpu::to_host(dst, s) == r32);
  CHECK_THROWS_AS(gpu::upload_into(dst, random_matrix(53, 37, 3), s), UserError);
}

TEST_CASE("gpu: fill_nan writes NaN in every floating dtype, 0xFF bytes in integer ones") {
  gpu::Stream s;
  for (gpu::DType t : {gpu::DType::f64, gpu::DType::f32, gpu::DType::bf16}) {
    CAPTURE(gpu::to_string(t));
    gpu::Tensor x = gpu::to_device(Eigen::MatrixXd(Eigen::MatrixXd::Zero(9, 17)), t, s);
    x.fill_nan(s);
    CHECK(gpu::to_host(x, s).array().isNaN().all());
    x.fill_zero(s);
    CHECK(gpu::to_host(x, s).isZero(0.0));
  }
  gpu::Tensor ints({33}, gpu::DType::i64);
  ints.fill_nan(s);
  std::vector<std::int64_t> h(33, 0);
  ints.download(h.data(), s);
  s.synchronize();
  CHECK(std::all_of(h.begin(), h.end(), [](std::int64_t x) { return x == -1; }));
}

TEST_CASE("gpu: a dtype mismatch in data<T>() is a DeviceError") {
  gpu::Tensor t({4, 4}, gpu::DType::f32);
  CHECK(t.data<float>() != nullptr);
  CHECK_THROWS_AS(t.data<double>(), DeviceError);
  CHECK_THROWS_AS(t.data<std::int32_t>(), DeviceError);
  gpu::Tensor b({8}, gpu::DType::bf16);
  CHECK(b.data<__nv_bfloat16>() != nullptr);
  CHECK_THROWS_AS(b.data<float>(), DeviceError);
}

TEST_CASE("gpu: memory that cannot fit is a UserError naming the size") {
  const std::size_t ten_pib = std::size_t(10) << 50;
  try {
    gpu::require_device_memory(ten_pib, "the test grid");
    FAIL("require_device_memory accepted 10 PiB");
  } catch (const DeviceError&) {
    FAIL("a size that does not fit must be a UserError (exit 2), not a DeviceError");
  } catch (const UserError& e) {
    const std::string msg = e.what();
    CHECK(e.exit_code() == kExitUsage);
    CHECK(msg.find("the test grid") != std::string::npos);
    CHECK(msg.find(gpu::format_bytes(ten_pib)) != std::string::npos);
    CHECK(msg.find("--device cpu") != std::string::npos);
  }
  CHECK_NOTHROW(gpu::require_device_memory(1 << 20, "a small buffer"));
  CHECK(gpu::memory_info().total > 0);
  CHECK(gpu::format_bytes(std::size_t(3) << 29) == "1.50 GiB");
}

TEST_CASE("gpu: an allocation the card cannot hold is a UserError and the next allocation works") {
  const std::size_t absurd = std::size_t(1) << 60;
  try {
    gpu::Buffer huge(absurd);
    FAIL("cudaMalloc of 1 EiB succeeded");
  } catch (const DeviceError&) {
    FAIL("out-of-memory must be a UserError (exit 2)");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find(gpu::format_bytes(absurd)) != std::string::npos);
  }
  CHECK(cudaGetLastError() == cudaSuccess);  // the sticky error was cleared
  gpu::Stream s;
  gpu::Buffer ok(1 << 20);
  CHECK(ok.get() != nullptr);
  const Eigen::MatrixXd m = random_matrix(8, 8, 4);
  CHECK(gpu::to_host(gpu::to_device(m, gpu::DType::f64, s), s) == m);
}

TEST_CASE("gpu: events time a small copy") {
  gpu::Stream s;
  gpu::Buffer a(std::size_t(4) << 20), b(std::size_t(4) << 20);
  gpu::Event e0, e1;
  e0.record(s);
  MEMCAP_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), a.bytes(), cudaMemcpyDeviceToDevice, s.get()));
  e1.record(s);
  CHECK(gpu::Event::elapsed_ms(e0, e1) > 0.0f);
}

TEST_CASE("gpu: a captured copy + GEMM graph replays with the current inputs") {
  gpu::Stream s;
  gpu::Handles h(s);
  cublasHandle_t blas = h.blas();  // handles are made before capture (creation allocates)
  const Eigen::MatrixXd A1 = integer_matrix(24, 40, 0), A2 = integer_matrix(24, 40, 7);
  const Eigen::MatrixXd B = integer_matrix(40, 16, 3);
  gpu::Tensor src = gpu::to_device(A1, gpu::DType::f64, s);
  gpu::Tensor A({24, 40}, gpu::DType::f64), C({24, 16}, gpu::DType::f64);
  const gpu::Tensor dB = gpu::to_device(B, gpu::DType::f64, s);
  A.fill_nan(s);
  C.fill_nan(s);
  s.synchronize();

  gpu::Graph g;
  CHECK_FALSE(g.ready());
  g.capture(s, [&] {
    MEMCAP_CUDA_CHECK(cudaMemcpyAsync(A.raw(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice, s.get()));
    gemm_rm(blas, A, dB, C);
  });
  REQUIRE(g.ready());
  CHECK(gpu::to_host(C, s).array().isNaN().all());  // capture ran nothing

  g.launch(s);
  CHECK(gpu::to_host(C, s) == A1 * B);
  gpu::upload_into(src, A2, s);
  C.fill_nan(s);
  g.launch(s);
  CHECK(gpu::to_host(C, s) == A2 * B);
}

TEST_CASE("gpu: a throwing capture body ends the capture and leaves the stream usable") {
  gpu::Stream s;
  gpu::Tensor x({64}, gpu::DType::f32);
  gpu::Graph g;
  CHECK_THROWS_AS(g.capture(s, [&] {
    x.fill_zero(s);
    throw std::runtime_error("body failed");
  }),
                  std::runtime_error);
  CHECK_FALSE(g.ready());
  cudaStreamCaptureStatus st{};
  MEMCAP_CUDA_CHECK(cudaStreamIsCapturing(s.get(), &st));
  CHECK(st == cudaStreamCaptureStatusNone);
  x.fill_nan(s);
  CHECK(gpu::to_host(x, s).array().isNaN().all());
}

TEST_CASE("gpu: two streams with their own handles run GEMMs concurrently and agree with the CPU") {
  const int n = 256;
  const Eigen::MatrixXd A[2] = {random_matrix(n, n, 10), random_matrix(n, n, 11)};
  const Eigen::MatrixXd B[2] = {random_matrix(n, n, 12), random_matrix(n, n, 13)};
  Eigen::MatrixXd got[2];
  std::exception_ptr err[2];
  auto worker = [&](int w) {
    try {
      gpu::Stream s;
      gpu::Handles h(s);
      const gpu::Tensor dA = gpu::to_device(A[w], gpu::DType::f64, s), dB = gpu::to_device(B[w], gpu::DType::f64, s);
      gpu::Tensor C({n, n}, gpu::DType::f64);
      C.fill_nan(s);
      for (int rep = 0; rep < 8; ++rep) gemm_rm(h.blas(), dA, dB, C);
      got[w] = gpu::to_host(C, s);
    } catch (...) {
      err[w] = std::current_exception();
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  for (int w = 0; w < 2; ++w) {
    CAPTURE(w);
    if (err[w]) std::rethrow_exception(err[w]);
    CHECK(rel_error(got[w], A[w] * B[w]) < kF64GemmRelTol);
  }
}

TEST_CASE("gpu: two host threads capture graphs at the same time (thread-local capture mode)") {
  Eigen::MatrixXd got[2];
  std::exception_ptr err[2];
  const Eigen::MatrixXd B = integer_matrix(32, 32, 1);
  auto worker = [&](int w) {
    try {
      gpu::Stream s;
      gpu::Handles h(s);
      cublasHandle_t blas = h.blas();
      const gpu::Tensor dA = gpu::to_device(integer_matrix(32, 32, w), gpu::DType::f64, s);
      const gpu::Tensor dB = gpu::to_device(B, gpu::DType::f64, s);
      gpu::Tensor C({32, 32}, gpu::DType::f64);
      C.fill_nan(s);
      s.synchronize();
      gpu::Graph g;
      g.capture(s, [&] {
        for (int rep = 0; rep < 4; ++rep) gemm_rm(blas, dA, dB, C);
      });
      g.launch(s);
      got[w] = gpu::to_host(C, s);
    } catch (...) {
      err[w] = std::current_exception();
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  for (int w = 0; w < 2; ++w) {
    CAPTURE(w);
    if (err[w]) std::rethrow_exception(err[w]);
    CHECK(got[w] == integer_matrix(32, 32, w) * B);
  }
}

TEST_CASE("gpu: Handles make cuBLASLt and cuSOLVER handles on demand") {
  gpu::Stream s;
  gpu::Handles h(s);
  CHECK(h.lt() != nullptr);
  CHECK(h.solver() != nullptr);
  CHECK(h.blas() == h.blas());
  cudaStream_t bound = nullptr;
  MEMCAP_CUBLAS_CHECK(cublasGetStream(h.blas(), &bound));
  CHECK(bound == s.get());
  cublasMath_t mode{};
  MEMCAP_CUBLAS_CHECK(cublasGetMathMode(h.blas(), &mode));
  CHECK(mode == CUBLAS_DEFAULT_MATH);
}

TEST_CASE("gpu: moving Buffers and Tensors transfers ownership") {
  gpu::Buffer a(4096);
  void* p = a.get();
  gpu::Buffer b(std::move(a));
  CHECK(a.get() == nullptr);
  CHECK(a.bytes() == 0);
  CHECK(b.get() == p);
  CHECK(b.bytes() == 4096);
  gpu::Buffer c(16);
  c = std::move(b);  // c's old 16 bytes are freed
  CHECK(c.get() == p);
  CHECK(b.get() == nullptr);

  gpu::Stream s;
  const Eigen::MatrixXd m = random_matrix(5, 6, 20);
  gpu::Tensor t = gpu::to_device(m, gpu::DType::f64, s);
  void* tp = t.raw();
  gpu::Tensor u(std::move(t));
  CHECK(t.empty());
  CHECK(t.raw() == nullptr);
  CHECK(t.bytes() == 0);
  CHECK(u.raw() == tp);
  CHECK(u.shape() == std::vector<std::int64_t>{5, 6});
  gpu::Tensor w({2}, gpu::DType::f32);
  w = std::move(u);
  CHECK(w.raw() == tp);
  CHECK(w.dtype() == gpu::DType::f64);
  CHECK(gpu::to_host(w, s) == m);
  t.fill_nan(s);  // an empty tensor: no-op, no error
  s.synchronize();
}
