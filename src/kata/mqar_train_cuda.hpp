// GPU training and evaluation of the MQAR language model (spec kata.md §4.4, §4.5): the same batches in
// the same order, AdamW, global-norm clip and cosine schedule as the CPU trainer (mqar_train.hpp), with
// float32 master weights on the device (f32; f64 keeps float64 everywhere). One training step per batch
// shape (B, T, labelled) is captured once as a CUDA graph and replayed; token batches are generated on
// the host and uploaded with cudaMemcpyAsync from pinned memory (double-buffered). Runs on the calling
// thread's current GPU. In a build without CUDA these throw DeviceError.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kata/mqar_train.hpp"

namespace memcap::kata {

// cfg.device is ignored (the caller chose the GPU). Path "cuda:f32" / "cuda:f64".
MqarTrainResult train_mqar_cuda(const MqarTrainConfig& cfg);

// Accuracy and loss of `params` on `slice.examples` examples, forward on the GPU in `precision`.
SliceResult evaluate_mqar_cuda(const MqarModel& model, const std::vector<double>& params, const TaskSlice& slice,
                               std::uint64_t seed, const std::string& precision);

// Device bytes a training run needs (arena, activations for the largest batch, logits, workspaces,
// histories, library workspaces), for gpu::require_device_memory before anything is written.
std::size_t mqar_cuda_memory_bytes(const MqarTrainConfig& cfg);

}  // namespace memcap::kata
