// Eigen <-> device tensor transfers (see gpu_eigen.hpp): conversion to the tensor's dtype on the
// host through one row-major staging vector, then one copy on the caller's stream.
#include "core/gpu_eigen.hpp"

#ifdef MEMCAP_HAVE_CUDA
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/error.hpp"

namespace memcap::gpu {

namespace {

void require_float(DType t, const char* fn) {
  if (t != DType::f64 && t != DType::f32 && t != DType::bf16)
    throw UserError(fmt::format("gpu::{} needs a floating dtype (f64, f32 or bf16), got {}", fn, to_string(t)));
}

// Row-major values (element (i,j) at i*cols+j) written into dst as dtype t.
template <class Get>
void stage_and_upload(Tensor& dst, std::int64_t rows, std::int64_t cols, Get get, const Stream& s) {
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  auto fill = [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        const double x = get(i, j);
        if constexpr (std::is_same_v<T, __nv_bfloat16>)
          out[i * cols + j] = __double2bfloat16(x);
        else
          out[i * cols + j] = static_cast<T>(x);
      }
  };
  switch (dst.dtype()) {
    case DType::f64: {
      std::vector<double> h(n);
      fill(h.data());
      dst.upload(h.data(), s);
      s.synchronize();
      break;
    }
    case DType::f32: {
      std::vector<float> h(n);
      fill(h.data());
      dst.upload(h.data(), s);
      s.synchronize();
      break;
    }
    case DType::bf16: {
      std::vector<__nv_bfloat16> h(n);
      fill(h.data());
      dst.upload(h.data(), s);
      s.synchronize();
      break;
    }
    default: require_float(dst.dtype(), "upload_into");
  }
}

void check_shape(const Tensor& dst, std::int64_t rows, std::int64_t cols) {
  const bool ok = (dst.rank() == 2 && dst.dim(0) == rows && dst.dim(1) == cols) ||
                  (dst.rank() == 1 && cols == 1 && dst.dim(0) == rows);
  if (!ok)
    throw UserError(fmt::format("gpu::upload_into: a {} x {} matrix does not fit a tensor of shape [{}]", rows,
                                cols, fmt::join(dst.shape(), ", ")));
}

}  // namespace

Tensor to_device(const Eigen::MatrixXd& m, DType t, const Stream& s) {
  require_float(t, "to_device");
  Tensor out({static_cast<std::int64_t>(m.rows()), static_cast<std::int64_t>(m.cols())}, t);
  upload_into(out, m, s);
  return out;
}

Tensor to_device(const Eigen::VectorXd& v, DType t, const Stream& s) {
  require_float(t, "to_device");
  Tensor out({static_cast<std::int64_t>(v.size())}, t);
  upload_into(out, v, s);
  return out;
}

void upload_into(Tensor& dst, const Eigen::MatrixXd& m, const Stream& s) {
  check_shape(dst, m.rows(), m.cols());
  stage_and_upload(dst, m.rows(), m.cols(), [&](std::int64_t i, std::int64_t j) { return m(i, j); }, s);
}

void upload_into(Tensor& dst, const Eigen::VectorXd& v, const Stream& s) {
  check_shape(dst, v.size(), 1);
  stage_and_upload(dst, v.size(), 1, [&](std::int64_t i, std::int64_t) { return v(i); }, s);
}

Eigen::VectorXd to_host_vector(const Tensor& t, const Stream& s) {
  const auto n = static_cast<Eigen::Index>(t.numel());
  Eigen::VectorXd out(n);
  switch (t.dtype()) {
    case DType::f64: {
      t.download(out.data(), s);
      s.synchronize();
      break;
    }
    case DType::f32: {
      std::vector<float> h(static_cast<std::size_t>(n));
      t.download(h.data(), s);
      s.synchronize();
      for (Eigen::Index i = 0; i < n; ++i) out(i) = h[static_cast<std::size_t>(i)];
      break;
    }
    case DType::bf16: {
      std::vector<__nv_bfloat16> h(static_cast<std::size_t>(n));
      t.download(h.data(), s);
      s.synchronize();
      for (Eigen::Index i = 0; i < n; ++i) out(i) = __bfloat162float(h[static_cast<std::size_t>(i)]);
      break;
    }
    default: require_float(t.dtype(), "to_host");
  }
  return out;
}

Eigen::MatrixXd to_host(const Tensor& t, const Stream& s) {
  if (t.rank() != 1 && t.rank() != 2)
    throw UserError(fmt::format("gpu::to_host needs a rank-1 or rank-2 tensor, got shape [{}]",
                                fmt::join(t.shape(), ", ")));
  const Eigen::Index rows = static_cast<Eigen::Index>(t.dim(0));
  const Eigen::Index cols = t.rank() == 2 ? static_cast<Eigen::Index>(t.dim(1)) : 1;
  const Eigen::VectorXd flat = to_host_vector(t, s);
  Eigen::MatrixXd out(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) out(i, j) = flat(i * cols + j);
  return out;
}

}  // namespace memcap::gpu
#endif  // MEMCAP_HAVE_CUDA
