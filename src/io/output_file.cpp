// Crash-safe single result files and provenance attributes (see output_file.hpp).
#include "io/output_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "core/error.hpp"
#include "core/threads.hpp"
#include "core/version.hpp"

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

void check_output_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw UserError("no output file given: pass --out FILE.h5");
  fs::path p(path);
  if (fs::is_directory(p)) throw UserError(fmt::format("--out '{}' is a directory; give a file name such as {}/result.h5", path, path));
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UserError(fmt::format("output folder '{}' does not exist (create it first: mkdir -p {})", dir.string(), dir.string()));
  if (access(dir.c_str(), W_OK) != 0)
    throw UserError(fmt::format("output folder '{}' is not writable", dir.string()));
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

OutputFile::OutputFile(const std::string& path, const RunContext& ctx)
    : path_(path), tmp_(path + ".tmp-" + std::to_string(getpid())), file_(h5::File::create((check_output_path(path), tmp_))) {
  write_provenance(file_, ctx);
}

OutputFile::~OutputFile() {
  if (!committed_) {
    file_.close();
    std::remove(tmp_.c_str());
  }
}

void OutputFile::write_summary(const Table& t) {
  h5::Group g = file_.child("summary");
  t.write(g);
}

void OutputFile::commit() {
  file_.attr("end_utc", utc_now());
  file_.flush();
  file_.close();
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw IoError(fmt::format("cannot move '{}' to '{}': {}", tmp_, path_, std::strerror(errno)));
  committed_ = true;
}

}  // namespace memcap::io
