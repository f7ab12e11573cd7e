// Per-job records of `ramnet recall` (apps/ramnet/recall.cpp): the /summary row, the /runs/<job>/ arrays
// and the stdout line of one job, and the scratch log of its measured points that lets a killed job resume
// (--resume) without measuring them again.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ramnet/recall.hpp"
#include "sweep/sweep.hpp"

namespace memcap::ramnet::app {

struct RecallJobSpec {
  RecallConfig cfg;
  std::int64_t mixer_id = 0, beta_id = 0;  // positions in --mixers and on the beta axis
  std::string key;                         // the sweep job key
};

// One measured point as a JSON object, and the points logged in a scratch file for the job `key`
// (empty when the file is missing, names another job, or is torn before its first point).
nlohmann::json point_json(const RecallPoint& p);
std::vector<RecallPoint> read_scratch(const std::string& path, const std::string& key);

void print_recall_header();
// The summary row and /runs writer of a finished job (prints its stdout line).
sweep::JobOutput recall_job_output(const RecallJobSpec& js, const RecallResult& r, double eval_s);

}  // namespace memcap::ramnet::app
