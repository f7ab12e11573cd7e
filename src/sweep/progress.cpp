// Progress reporting on stderr (see progress.hpp).
#include "sweep/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "core/error.hpp"

namespace memcap::sweep {

namespace {
std::string fmt_duration(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  int t = static_cast<int>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}
}  // namespace

Progress::Progress(std::int64_t total, const std::string& mode, std::string label, std::string unit)
    : total_(total), label_(std::move(label)), unit_(std::move(unit)) {
  if (mode == "auto") mode_ = isatty(STDERR_FILENO) ? Mode::bar : Mode::lines;
  else if (mode == "bar") mode_ = Mode::bar;
  else if (mode == "lines") mode_ = Mode::lines;
  else if (mode == "none") mode_ = Mode::none;
  else throw UserError(fmt::format("--progress must be auto, bar, lines or none (got '{}')", mode));
  start_ = last_ = std::chrono::steady_clock::now();
}

Progress::~Progress() {
  if (!finished_ && mode_ == Mode::bar && done_ > 0) std::fputc('\n', stderr);
}

void Progress::start_at(std::int64_t done) {
  done_ = base_ = done;
  start_ = last_ = std::chrono::steady_clock::now();
}

void Progress::update(std::int64_t done, const std::string& note) {
  done_ = done;
  note_ = note;
  if (done_ >= total_) return;  // finish() draws the final line once
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_).count();
  if (mode_ == Mode::bar && since < 0.1) return;
  if (mode_ == Mode::lines && since < 5.0) return;
  last_ = now;
  draw(false);
}

void Progress::draw(bool final) {
  if (mode_ == Mode::none) return;
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = el > 0 ? static_cast<double>(done_ - base_) / el : 0;  // this run's work only
  double eta = rate > 0 ? (total_ - done_) / rate : -1;
  std::string line = fmt::format("{}: {}/{} {}  {:.2f} {}/s  elapsed {}  eta {}{}{}", label_, done_, total_, unit_,
                                 rate, unit_, fmt_duration(el), final ? "0s" : fmt_duration(eta),
                                 note_.empty() ? "" : "  ", note_);
  if (mode_ == Mode::bar) {
    int width = 24;
    int filled = total_ > 0 ? static_cast<int>(width * done_ / total_) : width;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(static_cast<size_t>(width), '.');
    std::fprintf(stderr, "\r[%s] %s\033[K", bar.c_str(), line.c_str());
    if (final) std::fputc('\n', stderr);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  draw(true);
}

}  // namespace memcap::sweep
