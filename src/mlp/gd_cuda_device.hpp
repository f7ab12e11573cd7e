// Device side of the GPU GD trainer (gd_train_cuda.cpp): the plan (precision, kernel variant, splits,
// graph unroll), every device buffer allocated once (parameter / gradient / Adam arenas, data tables,
// activations, loss histories, the TrainState), and the enqueue of one training step — all kernels
// gated by the device TrainState, so K steps are captured once as a CUDA graph and replayed.
// Kernel variants (the table in gd_cuda_device.cpp): "fused" (d ≤ 128: nn_gated_mlp_fused + nn_softmax_ce_fused,
// or their bf16 tensor-core versions nn_gd_bf16 at precision bf16; hidden activations and logits never in
// global memory) and "cublas" (any d: nn::cuda layers on cuBLAS GEMMs; f32, tf32, f64, and bf16x3: the float32
// chain with the two logit products on bf16 tensor cores from split operands, kernels/nn_bf16x3.cuh).
#pragma once
#ifdef MEMCAP_HAVE_CUDA
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/gpu.hpp"
#include "mlp/factset.hpp"
#include "mlp/gd_init.hpp"
#include "mlp/gd_train.hpp"
#include "nn_train_state.cuh"

namespace memcap::mlp {

struct GdCudaPlan {
  std::string precision;     // f32 | f64 | tf32 | bf16 | bf16x3 (recorded as "cuda:<precision>")
  bool f64 = false, tf32 = false, bf16 = false;  // bf16: fused kernels only (nn_gd_bf16.cuh), no biases
  bool bf16x3 = false;       // cuBLAS chain only: float32 everywhere but Z = y Vᵀ and dy = dZ V (split bf16)
  std::string kernel;        // fused | cublas
  std::int64_t F = 0, P = 0, d = 0, m = 0;
  bool ce = true, bias = false;
  nn::Activation act = nn::Activation::identity;
  GdLayout layout;
  int fwd_splits = 1;        // fused: hidden-unit chunks of the forward (y partials)
  int bwd_splits = 1;        // fused: row chunks of the backward (gradient partial arenas)
  int ce_splits = 1;         // fused: value chunks of the CE kernels (dy partials)
  std::int64_t out_blocks = 1;  // fused MSE: loss partials
  int graph_steps = 16;      // steps unrolled in one captured graph
  std::int64_t epochs = 0;
};

// Resolves precision (cfg.precision f32 | f64 | tf32 | bf16 | bf16x3, or f32 + cfg.tf32) and the kernel variant
// (environment MEMCAP_GD_KERNEL = auto | fused | cublas; auto = the faster by the measured table in
// gd_cuda_device.cpp — cublas for f32 / tf32 / f64, fused for bf16, which has no cuBLAS path; bf16x3 has only the
// cuBLAS path; fused needs d ≤ 128, bf16 also no biases), reads the SM count
// of the current device for the splits. UserError on an unknown precision / variant or a variant that
// does not apply.
GdCudaPlan make_gd_cuda_plan(std::int64_t F, std::int64_t P, std::int64_t d, std::int64_t m, const GdConfig& cfg);

// Device bytes the plan allocates (arenas, tables, activations, histories); excludes the cuBLAS
// workspace gpu::Handles already owns.
std::size_t gd_cuda_plan_bytes(const GdCudaPlan& plan);

// All device buffers of one training, and the step enqueue. Not copyable; one per training.
class GdDevice {
 public:
  GdDevice(const GdCudaPlan& plan, const gpu::Stream& stream);
  ~GdDevice();
  GdDevice(const GdDevice&) = delete;
  GdDevice& operator=(const GdDevice&) = delete;

  // Adam hyper-parameters the step's optimizer kernel uses (defaults: PyTorch's).
  void set_optimizer(double beta1, double beta2, double eps, double weight_decay, bool adamw);

  // Uploads (each returns with the copy finished).
  void upload_tables(const FactSet& facts);
  void upload_arenas(const std::vector<double>& params, const std::vector<double>& m, const std::vector<double>& v);
  void upload_schedule(const std::vector<nn::cuda::AdamScalars>& sched);
  void upload_state(const nn::cuda::TrainState& st);
  // Downloads (synchronize the stream).
  nn::cuda::TrainState download_state();
  void download_history(std::int64_t from, std::int64_t to, std::vector<double>& loss, std::vector<long long>& correct);
  void download_arenas(std::vector<double>* params, std::vector<double>* m, std::vector<double>* v);

  // One training step on the stream (every launch gated by the device TrainState).
  void enqueue_step(cublasHandle_t blas);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memcap::mlp
#endif  // MEMCAP_HAVE_CUDA
