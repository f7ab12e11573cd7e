// One result file, written crash-safe: everything goes to PATH.tmp-<host>-<pid>, commit() renames
// it to PATH. If the run fails (exception, bad input, disk full, SIGTERM/SIGINT/SIGHUP), the
// temporary is deleted, so no half-written result ever appears under PATH; temporaries of runs
// that died (SIGKILL) are removed by the next run. Root attributes carry the provenance.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/device.hpp"
#include "io/h5.hpp"
#include "io/table.hpp"

namespace memcap::io {

// What ran, where and how: written as root attributes of every result file.
struct RunContext {
  std::string tool;          // "hebb", "kata"
  std::string subcommand;    // "margin-sweep"
  std::string command_line;  // argv joined
  std::string started_utc;   // ISO-8601
  DeviceInfo device;
  int threads = 0;
  nlohmann::json config = nlohmann::json::object();  // resolved configuration
};

RunContext make_context(const std::string& tool, const std::string& subcommand, int argc, char** argv);
std::string utc_now();

// Fails early (IoError, exit 3; UserError when empty) when the output path cannot or may not be
// written: name too long, missing or unwritable folder, a directory, a device/FIFO/socket (never
// replaced, even with --force), a file this run opened as an input, or — for the run's --out
// (see set_out_policy) — an existing file without --force. Call before doing expensive work.
void check_output_path(const std::string& path);

// The run's --out and whether --force was given (cli::prepare and merge set it). An existing file
// at that path, or at a shard name derived from it (STEM.shard<i>of<n>.EXT), is replaced only with
// --force. Other paths given to check_output_path (e.g. a checkpoint that is read back) may exist.
void set_out_policy(const std::string& out, bool force);

// The temporary name OutputFile writes before renaming: PATH.tmp-<host>-<pid>.
std::string temporary_name(const std::string& path);

// Deletes PATH.tmp-<host>-<pid> (and older PATH.tmp-<pid>) files of this host whose process no
// longer exists, saying so on stderr. Returns how many were removed.
int remove_stale_temporaries(const std::string& path);

class OutputFile {
 public:
  OutputFile(const std::string& path, const RunContext& ctx);
  OutputFile(const OutputFile&) = delete;
  ~OutputFile();

  OutputFile& operator=(const OutputFile&) = delete;

  h5::File& file() { return file_; }
  h5::Group& root() { return file_; }
  const std::string& path() const { return path_; }
  void write_summary(const Table& t);   // /summary
  void commit();                        // end time, flush, close, atomic rename

 private:
  // Registers the temporary for deletion on SIGTERM/SIGINT/SIGHUP while it exists.
  struct SignalGuard {
    int slot = -1;
    explicit SignalGuard(const std::string& tmp);
    ~SignalGuard();
  };
  std::string path_, tmp_;
  SignalGuard guard_;
  h5::File file_;
  bool committed_ = false;
};

// Write the provenance attributes of ctx to the root group (used by OutputFile and merge).
void write_provenance(h5::Group& root, const RunContext& ctx);

}  // namespace memcap::io
