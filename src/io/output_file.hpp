// One result file, written crash-safe: everything goes to PATH.tmp-<pid>, commit() renames it
// to PATH. If the run fails (exception, bad input), the destructor deletes the temporary, so
// no half-written result ever appears under PATH. Root attributes carry the provenance.
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

// Fails early (UserError) when the output path cannot be written: missing folder, a directory,
// not writable, wrong extension is fine. Call before doing expensive work.
void check_output_path(const std::string& path);

class OutputFile {
 public:
  OutputFile(const std::string& path, const RunContext& ctx);
  OutputFile(const OutputFile&) = delete;
  ~OutputFile();

  h5::File& file() { return file_; }
  h5::Group& root() { return file_; }
  const std::string& path() const { return path_; }
  void write_summary(const Table& t);   // /summary
  void commit();                        // end time, flush, close, atomic rename

 private:
  std::string path_, tmp_;
  h5::File file_;
  bool committed_ = false;
};

// Write the provenance attributes of ctx to the root group (used by OutputFile and merge).
void write_provenance(h5::Group& root, const RunContext& ctx);

}  // namespace memcap::io
