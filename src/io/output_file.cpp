// Crash-safe single result files and provenance attributes (see output_file.hpp).
#include "io/output_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "core/error.hpp"
#include "core/threads.hpp"
#include "core/version.hpp"
#include "io/describe.hpp"

namespace memcap::io {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

RunContext make_context(const std::string& tool, const std::string& subcommand, int argc, char** argv) {
  RunContext c;
  c.tool = tool;
  c.subcommand = subcommand;
  for (int i = 0; i < argc; ++i) {
    if (i) c.command_line += ' ';
    c.command_line += argv[i];
  }
  c.started_utc = utc_now();
  return c;
}

void write_provenance(h5::Group& root, const RunContext& ctx) {
  root.attr("memcap_version", build::kVersion);
  root.attr("git_hash", build::kGitHash);
  root.attr("git_dirty", build::kGitDirty);
  root.attr("tool", ctx.tool);
  root.attr("subcommand", ctx.subcommand);
  root.attr("command_line", ctx.command_line);
  root.attr("start_utc", ctx.started_utc);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  root.attr("hostname", std::string(host));
  root.attr("device", to_string(ctx.device.device));
  root.attr("device_name", ctx.device.name);
  root.attr("compute_capability", ctx.device.compute_capability);
  root.attr("cuda_version", ctx.device.cuda_version);
  root.attr("blas", blas_config());
  write_library_versions(root);  // hdf5/eigen/openblas/compiler versions (describe.cpp)
  root.attr("threads", static_cast<std::int64_t>(ctx.threads > 0 ? ctx.threads : max_threads()));
  for (const char* var : {"SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"}) {
    if (const char* v = std::getenv(var)) {
      std::string key(var);
      for (auto& ch : key) ch = static_cast<char>(std::tolower(ch));
      root.attr(key, std::string(v));
    }
  }
  h5::Group cfg = root.child("config");
  cfg.attr("json", ctx.config.dump());
}

namespace {
// The checks and clean-up that precede creating the temporary.
h5::File create_temporary(const std::string& path, const std::string& tmp) {
  check_output_path(path);
  remove_stale_temporaries(path);
  return h5::File::create(tmp);
}
}  // namespace

OutputFile::OutputFile(const std::string& path, const RunContext& ctx)
    : path_(path), tmp_(temporary_name(path)), guard_(tmp_), file_(create_temporary(path_, tmp_)) {
  write_provenance(file_, ctx);
}

OutputFile::~OutputFile() {
  if (!committed_) {
    file_.discard();
    std::remove(tmp_.c_str());
  }
}

void OutputFile::write_summary(const Table& t) {
  h5::Group g = file_.child("summary");
  t.write(g);
  write_row_scale(g, t);  // /summary/row dimension scale (describe.cpp)
}

void OutputFile::commit() {
  annotate_datasets(file_);  // units + long_name on every dataset (describe.cpp)
  file_.attr("end_utc", utc_now());
  file_.flush();
  file_.close();
  check_output_path(path_);  // again: the target may have appeared (or become an input) meanwhile
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw IoError(fmt::format("cannot move '{}' to '{}': {}", tmp_, path_, std::strerror(errno)));
  committed_ = true;
}

}  // namespace memcap::io
