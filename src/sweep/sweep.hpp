// The sweep engine every sweep command runs on: a plan (list of jobs) -> shard selection ->
// resume -> progress -> crash-safe per-job records -> one assembled HDF5 file.
//
// Crash safety: each finished job is written as its own small HDF5 record
// OUT.partial/job-<index>.h5 (written to a temporary name, then renamed, so a record either
// exists whole or not at all). --resume skips jobs whose record exists (after checking that the
// stored config matches). When every job of the shard is done the records are assembled into
// OUT (via OUT.tmp + rename) and the .partial folder is removed. A SIGKILL at any moment loses at
// most the job in flight.
#pragma once
#include <cstdint>
#include <fmt/format.h>

#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <type_traits>
#include <utility>
#include <string>
#include <vector>

#include "io/output_file.hpp"
#include "io/table.hpp"

namespace memcap::sweep {

struct Job {
  std::int64_t index = 0;     // position in the full (unsharded) plan
  std::string key;            // unique, human-readable: "width=64/seed=0"
  nlohmann::json params;      // the job's parameters (also stored per record)
  std::uint64_t seed = 0;     // per-job seed (plan decides: base seed or derive_seed)
  // Estimated relative cost (any unit, >= 0; 0 = unknown). run_parallel starts the costliest pending jobs
  // first (ties in plan order), so one long job does not start last and set the wall time; records are
  // still assembled in plan order, so results do not depend on it.
  double cost = 0;
  std::string detail;         // optional: printed after the key by a dry run (e.g. where a search starts)
};

struct JobOutput {
  io::Row row;                                    // summary columns for this job
  std::function<void(h5::Group& run)> write_run;  // optional heavy arrays -> /runs/<key>
};

struct Plan {
  std::vector<Job> jobs;
  std::vector<std::string> grid_axes;     // summary columns indexing /grid arrays, e.g. {"width","seed"}
  std::vector<std::string> grid_values;   // summary columns written to /grid, e.g. {"min_margin"}
  std::string finalizer;                  // registered name run after assembly/merge ("" = none)
};

struct Options {
  bool dry_run = false;
  std::string shard;        // "i/n"; empty = SLURM_ARRAY_TASK_ID/COUNT or 0/1
  bool resume = false;
  std::string progress = "auto";   // auto|bar|lines|none
  int workers = 1;          // run_parallel: jobs run concurrently on this many threads (>= 1)
  bool resumable = true;    // false: a single run without --resume (a dead run's OUT.partial is cleared)
};

// Where a job runs (run_parallel).
struct JobContext {
  int worker = 0;           // 0 .. Options::workers-1 (the thread running the job)
  // OUT.partial/scratch-<index>: a file name the job may write while it runs (e.g. its progress
  // within the job). It survives a kill, is there again when --resume reruns the job, is deleted
  // once the job's record is written, and goes with the .partial folder at the end.
  std::string scratch;
};

// Shard split. "" -> the SLURM array variables (task i = (TASK_ID - TASK_MIN) / TASK_STEP of
// TASK_COUNT, all checked for consistency; a one-task array is refused, since a resubmitted task of
// a bigger array looks the same) or 0/1 outside an array. UserError when malformed. env: getenv
// replacement for tests (nullptr = the process environment).
using EnvLookup = std::function<const char*(const char*)>;
struct Shard {
  int index = 0, count = 1;
  static Shard parse(const std::string& spec, const EnvLookup& env = nullptr);
  bool owns(std::int64_t job_index) const { return job_index % count == index; }
  std::string str() const;
};

// Post-processing hook (fits, derived arrays) run on the assembled/merged file.
using Finalizer = std::function<void(io::OutputFile& out, const io::Table& summary, const nlohmann::json& config)>;
void register_finalizer(const std::string& name, Finalizer f);

// Run the plan; ctx.config must hold the resolved configuration. Returns the process exit code.
// The summary table gets columns job, job_index, seed, status, wall_s, path (device) prepended.
int run(const Plan& plan, const Options& opt, const io::RunContext& ctx, const std::string& out,
        const std::function<JobOutput(const Job&)>& run_job);

// As run(), with up to opt.workers jobs in flight at once, each on its own thread (workers = 1:
// one at a time on the calling thread). Records are written as jobs finish and assembled in plan
// order, so the result does not depend on the worker count or on the order jobs finish. When a
// job throws, no new job starts, the jobs in flight finish (their records are kept for --resume)
// and the first exception is rethrown.
int run_parallel(const Plan& plan, const Options& opt, const io::RunContext& ctx, const std::string& out,
                 const std::function<JobOutput(const Job&, const JobContext&)>& run_job);

// The jobs of `plan` (their indices) that `run_parallel` with these options would skip as already done: with
// --resume (opt.resume), those of this shard whose records in OUT.partial/ are intact and were written under the
// same configuration; else none. Read only (no lock, nothing created), so a command can leave them out of the
// checks it makes before running (the sizes of jobs that will not run again do not matter on this device).
std::set<std::int64_t> finished_jobs(const Plan& plan, const Options& opt, const io::RunContext& ctx,
                                     const std::string& out);

// Join shard files (same config apart from the shard) into one file; rebuilds grids and runs the
// finalizer. UserError on mismatched configs, duplicate or missing jobs (missing: allowed with
// allow_partial).
void merge(const std::vector<std::string>& inputs, const std::string& out, const io::RunContext& ctx,
           bool allow_partial = false);

// ---- plan validation (call before building or running a plan; nothing is created) ----
inline constexpr std::int64_t kMaxJobs = 10'000'000;
// Product of the axis sizes, {name, size}, with overflow checks; UserError naming every axis when it
// exceeds kMaxJobs.
std::int64_t job_count(std::initializer_list<std::pair<std::string_view, std::int64_t>> axes);
// Strict integer text: the whole string, in [lo, hi]; UserError naming `what` otherwise.
std::int64_t parse_int(std::string_view text, const std::string& what, std::int64_t lo, std::int64_t hi);
// A double as an integer in [lo, hi] (range checked before converting); UserError naming `what`.
std::int64_t to_int(double v, const std::string& what, std::int64_t lo, std::int64_t hi);
// UserError "FLAG lists 'x' twice" when two entries print the same.
void require_distinct(const std::vector<std::string>& shown, const std::string& flag);
// The same for numbers, compared by value: each printed exactly (shortest round trip, so 1e-3 and 0.001 are one
// value and 1.0000001 and 1.0000002 two), -0 as 0.
template <class T>
  requires std::is_arithmetic_v<T>
void require_distinct(const std::vector<T>& values, const std::string& flag) {
  std::vector<std::string> shown;
  for (const T& v : values) shown.push_back(fmt::format("{}", v == T(0) ? T(0) : v));
  require_distinct(shown, flag);
}
// MemAvailable of /proc/meminfo in bytes (-1 when unknown).
std::int64_t available_memory();
// UserError when one job of `what` needs more than the available memory (or a non-finite amount).
void require_memory(double bytes, const std::string& what);

// Name of a job's group under /runs: the key with '/' -> ',' and '.' -> 'p' ("job" when empty).
std::string run_group_name(const std::string& key);

// Grid helpers for plans.
std::vector<double> logspace_unique_ints(double lo, double hi, int n);  // round(logspace), dedup
std::vector<double> logspace(double lo, double hi, int n);

}  // namespace memcap::sweep
