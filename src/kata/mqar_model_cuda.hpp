// The MQAR language model on the GPU (spec kata.md §4.4): the device twin of mqar_forward / mqar_backward
// (mqar_model.hpp), buffer by buffer, on one stream with no host synchronisation, so a training step
// can be captured in a CUDA graph. Layers: kernels/nn_seq_layers.cuh (LayerNorm, RMSNorm, embedding,
// causal conv, ℓ2 norm, glue), nn_layers.cuh (cuBLAS linear, cross-entropy), mixer cores:
// kernels/kata_mqar_mixers.cuh. One flat device arena holds parameters | gradients | Adam m | Adam v
// (float32 master weights on the device for T = float; double for the float64 test path).
// Activation buffers are sized once for the largest batch of every shape the caller names.
#pragma once
#ifdef MEMCAP_HAVE_CUDA
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/gpu.hpp"
#include "kata/mqar_model.hpp"

namespace memcap::kata {

// One batch shape: B sequences of length T with `labelled` scored positions in all.
struct MqarShape {
  std::int64_t B = 0, T = 0, labelled = 0;
  bool backward = true;  // false: an evaluation shape (forward only: no backward workspace is sized for it)
};

// Labelled positions of a host batch (flat b·T + t) and their targets; UserError for a token or label
// outside the vocabulary (the CPU forward's messages).
void mqar_labelled_rows(const std::int32_t* inputs, const std::int32_t* labels, std::int64_t N, std::int64_t V,
                        std::vector<std::int64_t>& rows, std::vector<std::int32_t>& targets);

// Device bytes of a model sized for `shapes` in element size `elem` (4 or 8): arena, activations,
// logits, workspaces. For gpu::require_device_memory before anything is allocated or written.
std::size_t mqar_device_bytes(const MqarModel& model, const std::vector<MqarShape>& shapes, std::size_t elem,
                              const std::string& mixer_kernel = "auto");

template <class T>
class MqarDeviceModel {
 public:
  // Buffers for every shape in `shapes` (at least one); the handles' stream runs everything. mixer_kernel:
  // "auto" or a variant of mqar_mixer_kernels(), resolved per sequence length (plan_mixer_kernels; UserError when
  // it does not apply).
  // tf32 (T = float only): the handle's cuBLAS products run on TF32 tensor cores (else exact fp32 / fp64).
  MqarDeviceModel(const MqarModel& model, const std::vector<MqarShape>& shapes, gpu::Handles& h,
                  const std::string& mixer_kernel = "auto", bool tf32 = false);
  ~MqarDeviceModel();
  MqarDeviceModel(const MqarDeviceModel&) = delete;
  MqarDeviceModel& operator=(const MqarDeviceModel&) = delete;

  const MqarModel& model() const { return model_; }
  // The mixer-core variants this model runs (MixerKernelPlan::name): "gemm", "tiled", "gemm+tiled",
  // "gemm+chunked-eval", … (auto: chunked-eval at the KATA evaluation lengths where chunked_eval_pays, gemm at
  // the lengths whose T × T buffers fit, tiled at the longer ones).
  const std::string& mixer_kernel() const;
  std::int64_t n() const { return n_; }
  T* params() const;
  T* grads() const;
  T* adam_m() const;
  T* adam_v() const;
  // Parameters from a float64 host arena (cast to T), moments zeroed; synchronises.
  void upload_params(const std::vector<double>& p);
  // params | grads | m | v region (0..3) to the host as float64; synchronises.
  std::vector<double> download(int region) const;

  // Device inputs of the next forward (written by the caller, e.g. cudaMemcpyAsync from pinned memory):
  // tokens [B·T], labelled rows [labelled] (flat b·T + t, ascending), targets [labelled].
  std::int32_t* tokens() const;
  std::int64_t* rows() const;
  std::int32_t* targets() const;
  // Synchronous upload of a host batch (tests, evaluation): validates, fills the three inputs; returns its shape.
  MqarShape upload_batch(const std::int32_t* inputs, const std::int32_t* labels, std::int64_t B, std::int64_t Tlen);

  // Enqueue the forward of shape s. train: the CE backward runs fused (dlogits of the MEAN loss over the
  // labelled rows replace the logits). Writes *loss_mean() (device double: mean CE over the labelled rows)
  // and *n_correct() (device int64: argmax == target, smallest id on ties).
  void forward(const MqarShape& s, bool train);
  // Enqueue the backward of the last training forward: gradients OVERWRITTEN (zeroed, then filled).
  void backward(const MqarShape& s);
  double* loss_mean() const;
  std::int64_t* n_correct() const;

 private:
  struct Impl;
  const MqarModel& model_;
  std::int64_t n_ = 0;
  std::unique_ptr<Impl> impl_;
};

// One forward (+ backward when grad is not null) of a host batch on the GPU in T: the float64 test
// path of mqar_forward / mqar_backward (loss_scale 1/labelled: the gradient of the mean loss). Without grad the
// length is a forward-only one (so `auto` / chunked-eval may pick the chunked-eval core).
template <class T>
MqarForward mqar_loss_grad_cuda(const MqarModel& model, const std::vector<double>& params, const std::int32_t* inputs,
                                const std::int32_t* labels, std::int64_t B, std::int64_t Tlen,
                                std::vector<double>* grad, gpu::Handles& h, const std::string& mixer_kernel = "auto");

}  // namespace memcap::kata

#endif  // MEMCAP_HAVE_CUDA
