// The fact editors on the GPU (spec hebbian.md §4.9): one object per worker thread holds the §6.4 model on the
// device (EditDeviceModel<T>, T = float for the apps, double for the tests), the packed prompts, and runs
//  - the prompt evaluation of every fact × template sentence (EditPromptEval: the GPU twin of evaluate_prompts),
//  - the local editors MEMIT / AlphaEdit / ROME (the GPU twin of local_edit): keys = the expert's hidden
//    activation at the last position of each fact's train prompt (device forward, gathered), K_p K_pᵀ and
//    K_a K_aᵀ by cuBLAS DGEMM in float64, the target residuals optimised on the device (every altered fact of
//    a chunk at once: one forward of the chunk, then per step the model's tail after the expert on the last
//    rows only, per-fact loss check, tail backward, per-fact Adam + clip in float64 on g_f; one host
//    synchronisation per step), then the closed form on the CPU in float64
//    (edit_local.hpp local_closed_form: the same code as the CPU editors),
//  - the swap of the fact expert (set_expert: only the fact.* tensors are uploaded).
// Runs on the handles' stream and the calling thread's current GPU. Without CUDA the constructor throws
// DeviceError.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edit/edit_local.hpp"
#include "edit/edit_pipeline.hpp"
#include "mlp/gated_mlp.hpp"

namespace memcap::gpu { class Handles; }

namespace memcap::edit {

struct EditGpuOptions {
  std::string precision = "f32";   // f32 (the apps) | f64 (the tests)
  std::int64_t eval_batch = 1024;  // sequences per evaluation forward
  std::int64_t edit_batch = 2048;  // facts per key / residual forward (the residual state is per chunk)
};

class EditGpu {
 public:
  // `base` (its trainable parameters and frozen tensors, the base's expert included) and `seqs` (packed with
  // EditLabels::all) must outlive the object. Checks the device memory first (UserError, exit 2).
  EditGpu(const EditModel& base, const nn::EditSequences& seqs, gpu::Handles& h, const EditGpuOptions& opt = {});
  ~EditGpu();
  EditGpu(const EditGpu&) = delete;
  EditGpu& operator=(const EditGpu&) = delete;

  // Puts `mlp` in the device model's fact.* tensors (UserError as load_expert); reset_expert() puts the base's
  // expert back.
  void set_expert(const mlp::GatedMLP& mlp);
  void reset_expert();
  // Every prompt through the device model with the current expert.
  PromptEval evaluate();
  // local_edit on the GPU with the base's expert (set back first if another one was set); the model is not
  // changed. NumericError naming the fact (and step) as the CPU path.
  LocalEditResult local_edit(const EditSet& set, const std::vector<std::int32_t>& author_token,
                             const LocalEditConfig& cfg);
  const std::string& precision() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Device bytes an EditGpu needs for this model, these sequences and F facts (model, activations of the larger
// batch, corpus, keys and their products, residual state, library workspaces); 0 without CUDA.
std::size_t edit_gpu_bytes(const EditModelConfig& c, const nn::EditSequences& seqs, std::int64_t facts,
                           const EditGpuOptions& opt = {});

}  // namespace memcap::edit
