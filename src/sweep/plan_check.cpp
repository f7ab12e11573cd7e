// Checks that run before a sweep creates anything: the shard split (from --shard or the SLURM array
// variables, parsed strictly), job counts with overflow checks, integer conversions, duplicate grid
// values and the memory one job needs against /proc/meminfo MemAvailable.
#include <fmt/format.h>

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "sweep/sweep.hpp"

namespace memcap::sweep {

std::int64_t parse_int(std::string_view text, const std::string& what, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  if (!text.empty() && *b == '+') ++b;
  const auto [p, ec] = std::from_chars(b, e, v);
  if (text.empty() || ec == std::errc::invalid_argument || p != e)
    throw UserError(fmt::format("{} must be an integer (got '{}')", what, text));
  if (ec == std::errc::result_out_of_range || v < lo || v > hi)
    throw UserError(fmt::format("{} must lie in [{}, {}] (got '{}')", what, lo, hi, text));
  return v;
}

std::int64_t to_int(double v, const std::string& what, std::int64_t lo, std::int64_t hi) {
  if (!std::isfinite(v) || v != std::floor(v) || v < static_cast<double>(lo) || v > static_cast<double>(hi))
    throw UserError(fmt::format("{} must be an integer in [{}, {}] (got {:g})", what, lo, hi, v));
  return static_cast<std::int64_t>(v);
}

std::int64_t job_count(std::initializer_list<std::pair<std::string_view, std::int64_t>> axes) {
  std::int64_t n = 1;
  bool over = false;
  std::string desc;
  for (const auto& [name, size] : axes) {
    desc += fmt::format("{}{} {}", desc.empty() ? "" : " x ", size, name);
    std::int64_t next = 0;
    if (size < 0 || __builtin_mul_overflow(n, size, &next) || next > kMaxJobs) over = true;
    else n = next;
  }
  if (over)
    throw UserError(fmt::format("the plan ({}) has more than the {} jobs a sweep may hold; use smaller grids "
                                "or fewer seeds", desc, kMaxJobs));
  return n;
}

void require_distinct(const std::vector<std::string>& shown, const std::string& flag) {
  std::set<std::string> seen;
  for (const auto& s : shown)
    if (!seen.insert(s).second)
      throw UserError(fmt::format("{} lists '{}' twice (values are compared as printed); give each value once", flag, s));
}

std::int64_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream is(line.substr(13));
    long long kb = -1;
    if (is >> kb && kb >= 0 && kb < (LLONG_MAX >> 10)) return static_cast<std::int64_t>(kb) << 10;
  }
  return -1;
}

void require_memory(double bytes, const std::string& what) {
  const std::int64_t avail = available_memory();
  const double gib = 1024.0 * 1024.0 * 1024.0;
  if (!std::isfinite(bytes) || bytes > 1e18)
    throw UserError(fmt::format("{} needs more memory than any machine has; reduce the sizes", what));
  if (avail > 0 && bytes > static_cast<double>(avail))
    throw UserError(fmt::format("{} needs about {:.3g} GiB of memory, but {:.3g} GiB is available (MemAvailable); "
                                "reduce the sizes",
                                what, bytes / gib, static_cast<double>(avail) / gib));
}

namespace {

Shard from_slurm(const EnvLookup& env) {
  const char* id = env("SLURM_ARRAY_TASK_ID");
  Shard s;
  if (!id) return s;  // not an array task: the whole sweep
  auto var = [&](const char* name, bool required, std::int64_t dflt) -> std::int64_t {
    const char* v = env(name);
    if (!v) {
      if (!required) return dflt;
      throw UserError(fmt::format("SLURM_ARRAY_TASK_ID is set but {} is not, so the shard split cannot be told; "
                                  "pass --shard i/n explicitly",
                                  name));
    }
    try {
      return parse_int(v, name, 0, INT_MAX);
    } catch (const UserError& e) {
      throw UserError(fmt::format("{} (a SLURM array variable); pass --shard i/n explicitly", e.what()));
    }
  };
  const std::int64_t task = var("SLURM_ARRAY_TASK_ID", true, 0), mn = var("SLURM_ARRAY_TASK_MIN", true, 0),
                     mx = var("SLURM_ARRAY_TASK_MAX", true, 0), cnt = var("SLURM_ARRAY_TASK_COUNT", true, 0),
                     step = var("SLURM_ARRAY_TASK_STEP", false, 1);
  const std::string vars = fmt::format("SLURM_ARRAY_TASK_ID={} MIN={} MAX={} STEP={} COUNT={}", task, mn, mx, step, cnt);
  if (step < 1 || mn > mx || task < mn || task > mx || (task - mn) % step != 0 || (mx - mn) % step != 0 ||
      (mx - mn) / step + 1 != cnt)
    throw UserError(fmt::format("the SLURM array variables ({}) do not describe a regular array MIN-MAX:STEP, so the "
                                "shard of this task cannot be told; pass --shard i/n explicitly",
                                vars));
  if (cnt == 1)
    throw UserError(fmt::format("this is a one-task SLURM array ({}), which is what a resubmitted task of a bigger "
                                "array looks like; pass --shard i/n explicitly (--shard 0/1 for the whole sweep)",
                                vars));
  s.index = static_cast<int>((task - mn) / step);
  s.count = static_cast<int>(cnt);
  return s;
}

}  // namespace

Shard Shard::parse(const std::string& spec, const EnvLookup& env) {
  if (spec.empty()) return from_slurm(env ? env : EnvLookup([](const char* n) { return std::getenv(n); }));
  const auto slash = spec.find('/');
  const std::string bad = fmt::format("--shard must be i/n with 0 <= i < n (got '{}')", spec);
  if (slash == std::string::npos) throw UserError(bad);
  Shard s;
  try {
    s.count = static_cast<int>(parse_int(std::string_view(spec).substr(slash + 1), "the n of --shard i/n", 1, INT_MAX));
    s.index = static_cast<int>(parse_int(std::string_view(spec).substr(0, slash), "the i of --shard i/n", 0, INT_MAX));
  } catch (const UserError& e) {
    throw UserError(fmt::format("{}: {}", bad, e.what()));
  }
  if (s.index >= s.count) throw UserError(bad);
  return s;
}

}  // namespace memcap::sweep
