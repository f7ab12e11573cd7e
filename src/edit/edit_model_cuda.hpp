// The §6.4 fact-editing language model on the GPU: the device twin of EditModel::forward / backward
// (edit_model.hpp), buffer by buffer, on one stream with no host synchronisation, so a training step can
// be captured in a CUDA graph. Layers: kernels/nn_edit_layers.cuh (GELU, RoPE, low-rank, router mix, tied
// logits + CE), nn_layers.cuh (linear, gated, Adam), nn_seq_layers.cuh (LayerNorm, RMSNorm with gain,
// embedding, residual add); attention: the gemm variant of the MQAR softmax head
// (kernels/kata_mqar_gemm.cuh, H = 1, d_head = d). One flat device arena holds the trainable
// parameters | gradients | Adam m | Adam v in edit_trainable_layout's order, a second one the frozen
// tensors in edit_frozen_layout's order, so both travel as the host arenas' flat vectors.
#pragma once
#ifdef MEMCAP_HAVE_CUDA
#include <cstdint>
#include <memory>
#include <vector>

#include "core/gpu.hpp"
#include "edit/edit_model.hpp"
#include "edit/edit_pipeline.hpp"

namespace memcap::edit {

// One batch shape: B sequences of T tokens.
struct EditShape {
  std::int64_t B = 0, T = 0;
};

// Device bytes of a model sized for `shapes` in element size `elem` (4 or 8): arenas, the padded
// embedding copy, activations of the largest shape, CE tile and attention workspaces.
std::size_t edit_device_bytes(const EditModelConfig& c, const std::vector<EditShape>& shapes, std::size_t elem);

// Host validation and mapping of a batch (the CPU forward's messages): tokens must be −100 (padding) or in
// [0, V), targets −100 (ignored) or in [0, V). emb_rows[n] = tokens[n], padding -> V (the zero row of the
// device's padded embedding table).
void edit_batch_rows(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t N, std::int64_t V,
                     std::int32_t* emb_rows);

template <class T>
class EditDeviceModel {
 public:
  // Buffers for every shape in `shapes` (at least one); the handles' stream runs everything. The cuBLAS
  // math mode is left as the handle has it (exact fp32 / fp64 unless the caller turned TF32 on).
  EditDeviceModel(const EditModelConfig& c, const std::vector<EditShape>& shapes, gpu::Handles& h);
  ~EditDeviceModel();
  EditDeviceModel(const EditDeviceModel&) = delete;
  EditDeviceModel& operator=(const EditDeviceModel&) = delete;

  const EditModelConfig& config() const { return cfg_; }
  std::int64_t n() const { return n_; }  // trainable count (edit_trainable_count)
  T* params() const;
  T* grads() const;
  T* adam_m() const;
  T* adam_v() const;
  T* frozen() const;
  // Trainable parameters from a float64 host arena (cast to T), moments zeroed; synchronises.
  void upload_params(const std::vector<double>& p);
  // Frozen tensors (E and the fact expert) from a float64 host arena; refreshes the padded embedding table.
  void upload_frozen(const std::vector<double>& f);
  // params | grads | m | v region (0..3) of the trainable arena as float64; synchronises.
  std::vector<double> download(int region) const;

  // Device inputs of the next forward (written by the caller, e.g. cudaMemcpyAsync from pinned memory):
  // embedding rows [B·T] (edit_batch_rows: padding = V), targets [B·T] (−100 = ignored).
  std::int32_t* emb_rows() const;
  std::int32_t* targets() const;
  // Synchronous upload of a host batch (tests, evaluation): validates, maps the padding; returns its shape.
  EditShape upload_batch(const std::int32_t* tokens, const std::int32_t* targets, std::int64_t B, std::int64_t Tlen);

  // Optional [B·T, d] offset added to the fact expert's output before the router mix (the local editors'
  // residual, EditActs::f_add), used by every later forward until cleared; its gradient is g_f().
  void set_f_add(const std::vector<double>& host, const EditShape& s);
  void clear_f_add();

  // Enqueue the forward of shape s: *loss_mean() (device double: mean CE over the non-ignored targets, 0 if
  // none), *n_valid() (device int64), losses() [B·T] (0 for ignored rows), argmax() [B·T] (every row,
  // smallest id on ties). logits = false stops before the tied logits + CE (the final RMSNorm output is
  // there for logits_at; losses, argmax and the loss scalars are left as they were).
  void forward(const EditShape& s, bool logits = true);
  // Tied logits + CE at n rows of the last forward (device rows[i] in [0, B·T), device targets[i]):
  // losses()[i], argmax()[i] for i < n, *loss_mean() and *n_valid() over them. The evaluation computes the
  // vocabulary products only where a prompt row is needed (plan_prompt_rows).
  void logits_at(const std::int64_t* rows, const std::int32_t* targets, std::int64_t n);

  // The tail of the model after the fact expert (f + residual -> router mix -> RMSNorm_γf -> tied CE) at n
  // rows of the last forward, for the local editors' residual optimization: the residual enters only there
  // and nothing before the expert depends on it, so each Adam step needs the tail alone.
  // tail_capture copies f, the low-rank output and the router logit of the device rows[i] (and targets[i])
  // into compact tail buffers; tail_add() is the [n, d] residual the caller writes; tail_forward gives
  // losses()[i], argmax()[i], *loss_mean(), *n_valid() over the n rows; tail_backward leaves in g_f() the
  // [n, d] gradient of that mean loss with respect to the captured f rows (no parameter gradients).
  void tail_capture(const std::int64_t* rows, const std::int32_t* targets, std::int64_t n);
  T* tail_add() const;
  void tail_forward(std::int64_t n);
  void tail_backward(std::int64_t n);
  // Enqueue the backward of the last forward of the same shape: the gradient of the mean loss, OVERWRITING
  // grads() (zeroed, then filled; frozen tensors get none).
  void backward(const EditShape& s);
  double* loss_mean() const;
  std::int64_t* n_valid() const;
  T* losses() const;
  std::int32_t* argmax() const;
  T* g_f() const;  // gradient of the loss w.r.t. the fact expert's output: [B·T, d] after backward, [n, d] after tail_backward
  T* fh() const;   // [B·T, h] the fact expert's hidden activation of the last forward (the editors' keys)

 private:
  struct Impl;
  EditModelConfig cfg_;
  std::int64_t n_ = 0;
  std::unique_ptr<Impl> impl_;
};

// The GPU evaluation of every prompt (the GPU twin of evaluate_prompts) through plan_prompt_rows: the corpus
// and the plan's rows and targets live on the device; each batch of sequences is copied device-to-device into
// the model's input rows, runs the forward without logits, then the tied logits + CE at its distinct rows only
// (at paper scale 1,179,708 of the 2,883,584 rows); their losses and argmax go to pinned memory and the host reduces
// them (reduce_prompt_rows). The model must be sized for EditShape{min(batch, S), T}.
template <class T>
class EditPromptEval {
 public:
  EditPromptEval(const nn::EditSequences& seqs, std::int64_t vocab, std::int64_t batch, const gpu::Stream& s);
  ~EditPromptEval();
  EditPromptEval(const EditPromptEval&) = delete;
  EditPromptEval& operator=(const EditPromptEval&) = delete;
  PromptEval run(EditDeviceModel<T>& dm);
  std::int64_t batch() const { return plan_.batch; }
  const PromptRowPlan& plan() const { return plan_; }
  // Device bytes of the corpus and the plan (an upper bound: every row distinct).
  static std::size_t device_bytes(const nn::EditSequences& seqs);

 private:
  const nn::EditSequences& seqs_;
  const gpu::Stream& s_;
  PromptRowPlan plan_;
  gpu::Tensor corpus_rows_, rows_local_, targets_;
  std::unique_ptr<gpu::PinnedBuffer> out_;  // U losses (T) | U argmax (int32)
};

// One forward (+ backward when grad is not null) of a host batch on the GPU in T: the test path of
// EditModel::forward / backward. Returns the mean loss; argmax [B·T] when not null; f_add as EditActs.
template <class T>
double edit_loss_grad_cuda(const EditModel& model, const std::int32_t* tokens, const std::int32_t* targets,
                           std::int64_t B, std::int64_t Tlen, std::vector<double>* grad,
                           std::vector<std::int32_t>* argmax, const std::vector<double>* f_add, gpu::Handles& h);

}  // namespace memcap::edit

#endif  // MEMCAP_HAVE_CUDA
