// Eigen <-> device tensor transfers for host code (never included from .cu files: Eigen and fmt
// stay on the host side). Device tensors are row-major {rows, cols} (or {n} for vectors) in
// f64, f32 or bf16; values are converted on the host (bf16: round to nearest even).
#pragma once
#ifdef MEMCAP_HAVE_CUDA
#include <Eigen/Dense>

#include "core/gpu.hpp"

namespace memcap::gpu {

// A new device tensor of shape {rows, cols} (row-major) holding m converted to `t` (f64/f32/bf16).
// The host staging copy is finished when this returns (the stream is synchronized).
Tensor to_device(const Eigen::MatrixXd& m, DType t, const Stream& s);
// A new device tensor of shape {n}.
// (Pass an evaluated MatrixXd / VectorXd here and below: an Eigen expression matches both overloads.)
Tensor to_device(const Eigen::VectorXd& v, DType t, const Stream& s);

// Copy m into an existing tensor of shape {rows, cols} (or {rows} when cols == 1) and float dtype;
// UserError on a shape mismatch. Synchronizes s (the host staging buffer is local).
void upload_into(Tensor& dst, const Eigen::MatrixXd& m, const Stream& s);
void upload_into(Tensor& dst, const Eigen::VectorXd& v, const Stream& s);

// The tensor's values as doubles: rank 2 {R, C} -> R x C matrix, rank 1 {n} -> n x 1.
// Waits for the work queued on s first (synchronizes).
Eigen::MatrixXd to_host(const Tensor& t, const Stream& s);
// Any rank, flattened in row-major order.
Eigen::VectorXd to_host_vector(const Tensor& t, const Stream& s);

}  // namespace memcap::gpu
#endif  // MEMCAP_HAVE_CUDA
