// Checkpoints of a GD training (CPU or GPU trainer): parameters, Adam moments, epoch, curves and a
// fingerprint of everything that determines the run, in one small HDF5 file written to a temporary
// name and renamed (a kill never leaves a torn checkpoint). A trainer resumes only from a file whose
// fingerprint matches; any other file at that path is refused (UserError: delete it).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/h5.hpp"
#include "mlp/factset.hpp"
#include "mlp/gd_train.hpp"

namespace memcap::mlp {

struct GdCheckpoint {
  std::vector<double> params, m, v;      // host copies of the arenas (GdLayout order), float64
  std::int64_t epoch = 0;                // epochs completed = index of the next epoch to run
  bool finished = false;                 // the run ended (all epochs, or early stop)
  bool stopped_early = false;
  double final_loss = 0;                 // loss of the last forward
  double wall_s = 0;                     // training seconds spent before this checkpoint
  std::vector<double> loss_curve, accuracy_curve;
  std::vector<std::int64_t> curve_epoch;
  std::string fingerprint;
};

// A checkpoint of a run after `epochs_done` epochs: the arenas given (moved in), the run state of
// `res` (stopped_early, final_loss, curves), wall_s and fingerprint. Used by the CPU and CUDA trainers.
GdCheckpoint make_gd_checkpoint(std::vector<double> params, std::vector<double> m, std::vector<double> v,
                                const GdResult& res, std::int64_t epochs_done, bool done, double wall_s,
                                const std::string& fingerprint);

// What a run is: sizes, seed, a hash of the fact data, the path ("cpu", "cuda:f32", ...) and every
// GdConfig field that changes the result (not the checkpoint file, its period or the progress hook).
std::string gd_fingerprint(const FactSet& facts, std::int64_t width, std::uint64_t seed, const GdConfig& cfg,
                           const std::string& path);

// Atomic write (PATH.tmp-<pid>, then rename). IoError when the file cannot be written.
void write_gd_checkpoint(const std::string& path, const GdCheckpoint& ck);

// A checkpoint file written atomically: root attributes format and fingerprint, then whatever
// `fill` writes, all into PATH.tmp-<pid>, renamed to PATH at the end (a failed write leaves no
// file behind). IoError "cannot move <what> ..." when the rename fails. Used by every trainer's
// checkpoints (GD here, SSFR in margin/ssfr_run.cpp).
void write_checkpoint_file(const std::string& path, const std::string& what, const std::string& format,
                           const std::string& fingerprint, const std::function<void(h5::File&)>& fill);

// nullopt when no file exists at `path`; the checkpoint when its fingerprint equals `fingerprint`;
// UserError (exit 2) naming both fingerprints when it differs; IoError when unreadable.
std::optional<GdCheckpoint> read_gd_checkpoint(const std::string& path, const std::string& fingerprint);

}  // namespace memcap::mlp
