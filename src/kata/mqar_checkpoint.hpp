// Checkpoint files of an MQAR training (kata/mqar_train.hpp, MqarCheckpoint): float64 parameters and
// Adam moments, the position (step, epoch, batches of the epoch done) and the curves so far, in one
// small HDF5 file written to a temporary name and renamed (mlp::write_checkpoint_file), so a kill
// never leaves a torn checkpoint. A training resumes only from a file whose fingerprint (everything
// that determines the run) matches its own.
#pragma once
#include <optional>
#include <string>

#include "kata/mqar_train.hpp"

namespace memcap::kata {

// What a run is: the model, the slices, every optimizer and schedule field, the seed, the precision
// and `device` ("cpu" / "cuda": the path that computes it). Not the checkpoint period or the hooks.
std::string mqar_fingerprint(const MqarTrainConfig& cfg, const std::string& device);

// Atomic write (PATH.tmp-<pid>, then rename). IoError when it cannot be written.
void write_mqar_checkpoint(const std::string& path, const MqarCheckpoint& ck, const std::string& fingerprint);

// nullopt when there is no file at `path`, or it is not an MQAR checkpoint of this fingerprint (a
// training then starts afresh); IoError when it is one but its arrays are inconsistent.
std::optional<MqarCheckpoint> read_mqar_checkpoint(const std::string& path, const std::string& fingerprint);

}  // namespace memcap::kata
