// Progress on stderr: one redrawn line on a tty (done/total, rate, eta), otherwise one plain
// line every few seconds so SLURM logs stay readable. Mode: auto|bar|lines|none.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace memcap::sweep {

class Progress {
 public:
  // unit names what is counted in the line ("jobs", "epochs").
  Progress(std::int64_t total, const std::string& mode, std::string label, std::string unit = "jobs");
  ~Progress();
  // Work already done when this run started (resumed jobs): counted in done/total, not in the rate.
  void start_at(std::int64_t done);
  void update(std::int64_t done, const std::string& note = "");
  void finish();

 private:
  void draw(bool final);
  std::int64_t total_, done_ = 0, base_ = 0;
  std::string label_, note_, unit_;
  enum class Mode { bar, lines, none } mode_;
  std::chrono::steady_clock::time_point start_, last_;
  bool finished_ = false;
};

}  // namespace memcap::sweep
