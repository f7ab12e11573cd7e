// GPU base-model training and prompt evaluation of the fact-editing experiment (spec hebbian.md §4.9):
// the same batches in the same order as the CPU trainer (edit_pipeline.hpp train_base: a fresh permutation
// per epoch from kEditShuffleStream), AdamW with weight decay on every ≥ 2-D trainable tensor and the
// constant learning rate, value accuracy and non-fact CE over every prompt after each epoch, early stop at
// the target accuracy, the best state kept. Model: EditDeviceModel (edit_model_cuda.hpp) in float32
// ("f32", float32 master weights) or float64 ("f64", the test path). One training step (forward, backward,
// AdamW per tensor) per batch shape is captured once as a CUDA graph and replayed; the batch and the Adam
// step count are uploaded from pinned memory (double-buffered); the step losses come back asynchronously
// and are read every 64 steps. Runs on the calling thread's current GPU; in a build without CUDA these
// throw DeviceError.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "edit/edit_pipeline.hpp"

namespace memcap::edit {

struct BaseTrainCudaOptions {
  std::string precision = "f32";  // f32 | f64
  bool graphs = true;             // false: every step launched eagerly (tests: graph replay == eager)
  std::int64_t eval_batch = 1024; // sequences per evaluation forward on the GPU
};

struct BaseTrainCudaResult {
  BaseTrainResult train;  // as train_base (train_s, eval_s measured on the host around the GPU work)
  PromptEval final_eval;  // the evaluation of the kept (best-epoch) parameters
  std::string path;       // "cuda:f32" / "cuda:f64"
};

// cfg.eval_batch is not used (opt.eval_batch is). The model ends with the best-value-accuracy parameters
// (for f32: the float32 values, widened). NumericError on a non-finite step loss (the CPU's message, same
// epoch and step); on_step is called for every step, in order, in groups of up to 64.
BaseTrainCudaResult train_base_cuda(EditModel& model, const nn::EditSequences& seqs, const BaseTrainConfig& cfg,
                                    const BaseTrainCudaOptions& opt = {});

// Every prompt through the model on the GPU (the GPU twin of evaluate_prompts).
PromptEval evaluate_prompts_cuda(const EditModel& model, const nn::EditSequences& seqs,
                                 const std::string& precision = "f32", std::int64_t batch = 1024);

// Device bytes train_base_cuda needs (model, padded embedding, activations of the largest batch, the
// corpus, the best-state copy, library workspaces), for gpu::require_device_memory before anything runs.
std::size_t edit_base_cuda_bytes(const EditModelConfig& c, const nn::EditSequences& seqs, const BaseTrainConfig& cfg,
                                 const BaseTrainCudaOptions& opt = {});

}  // namespace memcap::edit
