// One SSFR training as a sweep job runs it (hebb ssfr capacity / noise / usability): CPU or GPU
// trainer, with a checkpoint file written after every evaluation and resumed from when a killed job
// is run again (--resume), and the shared per-run summary columns.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/device.hpp"
#include "io/h5.hpp"
#include "io/table.hpp"
#include "mlp/ssfr_setup.hpp"
#include "nn/ssfr_train.hpp"

namespace memcap::gpu { class Handles; }

namespace memcap::margin {

// Where and how one training runs.
struct SsfrRunner {
  Device device = Device::cpu;
  gpu::Handles* handles = nullptr;  // device == cuda
  std::string checkpoint;           // "" = none; else the checkpoint file of this training
};

// What determines a training's result (sizes, settings, inserted MLP, seed, every result-changing
// SsfrTrainConfig field, the path): a checkpoint is resumed only under an equal fingerprint.
std::string ssfr_fingerprint(const nn::SsfrProblem& p, const std::string& mlp_text, std::int64_t width,
                             const nn::SsfrTrainConfig& cfg, Device device);

// Trains (train_ssfr_cpu or train_ssfr_cuda). With run.checkpoint set: a checkpoint there with the
// same fingerprint is resumed (one line on stderr), one of another training is ignored and
// replaced, a new one is written (temporary name + rename) after every evaluation, and the file is
// removed when the training ends.
nn::SsfrTrainResult train_ssfr(const nn::SsfrProblem& p, nn::SsfrTrainConfig cfg, const std::string& fingerprint,
                               const SsfrRunner& run);

// Checkpoint file (HDF5): nullopt when missing or of another fingerprint.
void write_ssfr_checkpoint(const std::string& path, const nn::SsfrCheckpoint& ck, const std::string& fingerprint);
std::optional<nn::SsfrCheckpoint> read_ssfr_checkpoint(const std::string& path, const std::string& fingerprint);

// The curves of a training under a /runs group: loss, batch_accuracy, eval_step, eval_accuracy,
// eval_loss, train_accuracy, train_loss (hebb ssfr train writes the same names).
void write_ssfr_curves(h5::Group& g, const nn::SsfrTrainResult& r);

}  // namespace memcap::margin
