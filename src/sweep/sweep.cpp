// The sweep engine: shards, dry runs, crash-safe per-job records, resume, assembly, merge.
// See sweep.hpp for the on-disk protocol.
#include "sweep/sweep.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <hdf5.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "io/describe.hpp"
#include "io/grid.hpp"
#include "sweep/progress.hpp"

namespace memcap::sweep {
namespace fs = std::filesystem;

std::string run_group_name(const std::string& key) {
  std::string g = key;
  for (auto& ch : g)
    if (ch == '/' || ch == '.') ch = (ch == '/') ? ',' : 'p';
  return g.empty() ? "job" : g;
}


namespace {

std::map<std::string, Finalizer>& finalizers() {
  static std::map<std::string, Finalizer> m;
  return m;
}

// Options that may differ between a run and its resume, or between shards of one sweep.
const std::set<std::string> kVolatileKeys = {"out", "shard", "resume", "progress", "threads", "dry-run",
                                             "print-config", "config", "device", "help", "devices",
                                             "jobs-per-gpu", "jobs", "checkpoint-every", "cpu-max-tflop",
                                             "merged_from"};

nlohmann::json stable_config(const nlohmann::json& c) {
  nlohmann::json s = nlohmann::json::object();
  if (!c.is_object()) return c;
  for (auto it = c.begin(); it != c.end(); ++it)
    if (!kVolatileKeys.count(it.key())) s[it.key()] = it.value();
  return s;
}

std::string shard_path(const std::string& out, const Shard& s) {
  if (s.count <= 1) return out;
  std::string stem = out, ext;
  auto dot = out.rfind('.');
  auto slash = out.rfind('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
    stem = out.substr(0, dot);
    ext = out.substr(dot);
  }
  return fmt::format("{}.shard{}of{}{}", stem, s.index, s.count, ext);
}

std::string record_name(std::int64_t index) { return fmt::format("job-{:08d}.h5", index); }
// Why a record left by an earlier run cannot count as the finished job j (empty: it can): a record is written to
// a temporary name and renamed, so a bad one means damage after the fact (a truncated copy, a full disk on
// another host, an edit by hand). --resume runs such a job again instead of failing at assembly.
std::string record_problem(const fs::path& rec, const Job& j) {
  try {
    h5::File f = h5::File::inspect(rec.string());
    if (!f.exists("summary")) return "it has no /summary";
    if (io::Table::read(f.open_group("summary")).rows() != 1) return "its /summary is not one row";
    const auto key = f.attr_string("job_key");
    if (!key || *key != j.key) return fmt::format("it records job '{}'", key ? *key : std::string("?"));
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (!s.empty() && start <= s.size()) {
    size_t c = s.find(',', start);
    out.push_back(s.substr(start, c == std::string::npos ? std::string::npos : c - start));
    if (c == std::string::npos) break;
    start = c + 1;
  }
  return out;
}

// One finished job as stored in a record file or in an assembled file.
struct Record {
  std::int64_t index;
  std::string key;
  io::Row row;
  std::string source_file;  // where the /run group lives
  std::string run_path;     // path of the run group in source_file ("" = none)
};

void assemble(const std::vector<Record>& recs, const std::string& out, const io::RunContext& ctx,
              const std::vector<std::string>& axes, const std::vector<std::string>& values,
              const std::string& finalizer, std::int64_t jobs_total, const std::string& shard_str,
              const std::function<void(io::OutputFile&)>& extra = {}) {
  // records of another memcap version (a sweep resumed or shards merged across an upgrade) may lack columns added
  // since: they get NaN / -1 / "" there instead of failing the whole assembly after every job ran
  std::vector<io::Row> rows;
  for (auto& r : recs) rows.push_back(r.row);
  std::size_t filled = 0;
  const io::Table table = io::Table::from_rows(rows, &filled);
  if (filled > 0)
    std::fprintf(stderr,
                 "%s %s: note: %zu summary cells absent from job records of another memcap version were filled "
                 "(NaN for numbers, -1 for integers, \"\" for text)\n",
                 ctx.tool.c_str(), ctx.subcommand.c_str(), filled);
  io::OutputFile of(out, ctx);
  of.write_summary(table);
  {
    h5::Group runs = of.root().child("runs");
    std::map<std::string, h5::File> open;
    for (auto& r : recs) {
      if (r.run_path.empty()) continue;
      auto it = open.find(r.source_file);
      if (it == open.end()) it = open.emplace(r.source_file, h5::File::open_read(r.source_file)).first;
      if (it->second.exists(r.run_path)) it->second.copy_to(r.run_path, runs, run_group_name(r.key));
    }
  }
  io::write_grid(of.root(), table, axes, values);
  h5::Group& root = of.root();
  std::string ax, va;
  for (size_t i = 0; i < axes.size(); ++i) ax += (i ? "," : "") + axes[i];
  for (size_t i = 0; i < values.size(); ++i) va += (i ? "," : "") + values[i];
  root.attr("sweep_grid_axes", ax);
  root.attr("sweep_grid_values", va);
  root.attr("sweep_finalizer", finalizer);
  root.attr("sweep_jobs_total", jobs_total);
  root.attr("sweep_shard", shard_str);
  if (!finalizer.empty()) {
    auto it = finalizers().find(finalizer);
    if (it == finalizers().end()) throw UserError(fmt::format("unknown sweep finalizer '{}'", finalizer));
    it->second(of, table, ctx.config);
  }
  if (extra) extra(of);
  of.commit();
}


// The flock on OUT.partial/lock (see run_parallel).
class PartialLock {
 public:
  explicit PartialLock(int fd) : fd_(fd) {}
  PartialLock(PartialLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  PartialLock(const PartialLock&) = delete;
  ~PartialLock() { release(); }
  void release() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Creates (created = true) or opens OUT.partial and takes its lock; UserError naming the holder's
// pid when another live run has it.
PartialLock lock_partial(const fs::path& partial, bool& created) {
  std::error_code ec;
  created = fs::create_directory(partial, ec);
  if (ec) throw IoError(fmt::format("cannot create '{}': {}", partial.string(), ec.message()));
  if (!fs::is_directory(partial))
    throw IoError(fmt::format("'{}' exists and is not a folder; remove it", partial.string()));
  const std::string lp = (partial / "lock").string();
  const int fd = open(lp.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(fmt::format("cannot open '{}': {}", lp, std::strerror(errno)));
  PartialLock lock(fd);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {0};
    const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "?";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    const std::string out = partial.string().substr(0, partial.string().size() - 8);
    throw UserError(fmt::format("'{}' is being written by another run (pid {}); wait for it to finish or stop it",
                                out, pid.empty() ? "?" : pid));
  }
  const std::string me = fmt::format("{}\n", static_cast<long>(getpid()));
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) < 0) {
    // the pid is only for the message of a second run
  }
  return lock;
}

// A temporary a writer renames into place when done: ".tmp-<record>" (job records) or "<file>.tmp-<pid>"
// (checkpoints, pretrained weights). Under the lock, any such file was left by a dead run.
bool is_dead_temporary(const std::string& n) {
  if (n.rfind(".tmp-", 0) == 0 || n == "meta.json.tmp") return true;
  const auto at = n.rfind(".tmp-");
  if (at == std::string::npos || at + 5 >= n.size()) return false;
  return std::all_of(n.begin() + static_cast<std::ptrdiff_t>(at + 5), n.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// Removes everything in OUT.partial but the lock.
void clear_partial(const fs::path& partial) {
  std::error_code ec;
  for (fs::directory_iterator it(partial, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename() != "lock") fs::remove_all(it->path(), ec);
}

// Another shard split (or an unsharded run) of the same --out left a partial folder: refuse.
void check_split(const std::string& out, const Shard& shard) {
  const fs::path p(out);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::string stem = p.filename().string(), ext;
  if (auto dot = stem.rfind('.'); dot != std::string::npos) {
    ext = stem.substr(dot);
    stem = stem.substr(0, dot);
  }
  const std::string pre = stem + ".shard", suf = ext + ".partial";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    int other = 0;
    if (n == p.filename().string() + ".partial") {
      other = 1;
    } else if (n.size() > pre.size() + suf.size() && n.rfind(pre, 0) == 0 &&
               n.compare(n.size() - suf.size(), suf.size(), suf) == 0) {
      const std::string mid = n.substr(pre.size(), n.size() - pre.size() - suf.size());
      const auto of = mid.find("of");
      if (of == std::string::npos) continue;
      try {
        parse_int(mid.substr(0, of), "shard", 0, INT_MAX);
        other = static_cast<int>(parse_int(mid.substr(of + 2), "shard", 1, INT_MAX));
      } catch (const UserError&) {
        continue;
      }
    } else {
      continue;
    }
    if (other != shard.count)
      throw UserError(fmt::format("'{}' holds an interrupted run of this output split into {} shard{}, but this run "
                                  "is shard {}; finish that run with the same split (--shard i/{} --resume), or "
                                  "delete the folder",
                                  (dir / n).string(), other, other == 1 ? "" : "s", shard.str(), other));
  }
}

// OUT exists and is the finished result of this configuration. Read with the HDF5 C API so that
// OUT is not remembered as an input of this run (which would make the output check refuse it).
bool is_complete(const std::string& path, const nlohmann::json& want, std::int64_t total) {
  // Read through the checked HDF5 layer (bounded reads, heap checks): a corrupt OUT is "not
  // complete" here, and the normal output checks report it afterwards.
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  try {
    const h5::File f = h5::File::inspect(path);
    if (f.attr_int("sweep_jobs_total").value_or(-1) != total || !f.exists("config")) return false;
    const auto text = f.open_group("config").attr_string("json");
    return text && !text->empty() && stable_config(nlohmann::json::parse(*text)) == want;
  } catch (const std::exception&) {
    return false;
  }
}

enum class PartialState { none, same, different, malformed };

// What OUT.partial/meta.json says, read only: no meta file (none), this configuration, plan size and shard
// (same), another one (different), or not a meta file (malformed). The dry run reports it; --resume refuses
// anything but `same`.
PartialState inspect_partial(const fs::path& partial, const nlohmann::json& want, std::int64_t total, const Shard& shard) {
  std::error_code ec;
  if (!fs::is_regular_file(partial / "meta.json", ec)) return PartialState::none;
  std::ifstream mf(partial / "meta.json");
  try {
    nlohmann::json meta;
    mf >> meta;
    if (!meta.is_object() || !meta.contains("config") || !meta["jobs_total"].is_number_integer() ||
        !meta["shard"].is_string())
      return PartialState::malformed;
    const bool same = meta["config"] == want && meta["jobs_total"].get<std::int64_t>() == total &&
                      meta["shard"].get<std::string>() == shard.str();
    return same ? PartialState::same : PartialState::different;
  } catch (const std::exception&) {
    return PartialState::malformed;
  }
}

// What differs between the run in OUT.partial/meta.json and this one, for the refusal: up to three options as
// "--name A then, B now", or the shard split / plan size.
std::string partial_difference(const fs::path& partial, const nlohmann::json& want, std::int64_t total,
                               const Shard& shard) {
  try {
    std::ifstream mf(partial / "meta.json");
    nlohmann::json meta;
    mf >> meta;
    const nlohmann::json& had = meta.at("config");
    auto shown = [](const nlohmann::json* v) {
      if (!v) return std::string("(not set)");
      if (v->is_string()) return v->get<std::string>();
      if (v->is_array()) {
        std::string t;
        for (const auto& x : *v) t += (t.empty() ? "" : ",") + (x.is_string() ? x.get<std::string>() : x.dump());
        return t;
      }
      return v->dump();
    };
    std::vector<std::string> diffs;
    std::set<std::string> keys;
    for (const auto& [k, v] : had.items()) keys.insert(k);
    for (const auto& [k, v] : want.items()) keys.insert(k);
    for (const auto& k : keys) {
      const nlohmann::json* a = had.contains(k) ? &had.at(k) : nullptr;
      const nlohmann::json* b = want.contains(k) ? &want.at(k) : nullptr;
      if (a && b && *a == *b) continue;
      diffs.push_back(fmt::format("--{} {} then, {} now", k, shown(a), shown(b)));
    }
    if (meta.value("shard", std::string()) != shard.str())
      diffs.push_back(fmt::format("--shard {} then, {} now", meta.value("shard", std::string("?")), shard.str()));
    if (diffs.empty() && meta.value("jobs_total", std::int64_t{-1}) != total)
      diffs.push_back(fmt::format("{} jobs then, {} now", meta.value("jobs_total", std::int64_t{-1}), total));
    std::string out;
    for (std::size_t n = 0; n < diffs.size() && n < 3; ++n) out += (n ? "; " : "") + diffs[n];
    if (diffs.size() > 3) out += fmt::format("; {} more", diffs.size() - 3);
    return out;
  } catch (const std::exception&) {
    return "";
  }
}

bool record_intact(const fs::path& partial, const Job& j) {
  const fs::path rec = partial / record_name(j.index);
  return fs::exists(rec) && record_problem(rec, j).empty();
}

}  // namespace

void register_finalizer(const std::string& name, Finalizer f) { finalizers()[name] = std::move(f); }

std::set<std::int64_t> finished_jobs(const Plan& plan, const Options& opt, const io::RunContext& ctx,
                                     const std::string& out) {
  std::set<std::int64_t> done;
  if (!opt.resume) return done;
  const Shard shard = Shard::parse(opt.shard);
  const auto total = static_cast<std::int64_t>(plan.jobs.size());
  const fs::path partial = shard_path(out, shard) + ".partial";
  if (inspect_partial(partial, stable_config(ctx.config), total, shard) != PartialState::same) return done;
  for (const auto& j : plan.jobs)
    if (shard.owns(j.index) && record_intact(partial, j)) done.insert(j.index);
  return done;
}

std::string Shard::str() const { return fmt::format("{}/{}", index, count); }

int run(const Plan& plan, const Options& opt, const io::RunContext& ctx, const std::string& out,
        const std::function<JobOutput(const Job&)>& run_job) {
  Options one = opt;
  one.workers = 1;
  return run_parallel(plan, one, ctx, out, [&](const Job& j, const JobContext&) { return run_job(j); });
}

int run_parallel(const Plan& plan, const Options& opt, const io::RunContext& ctx, const std::string& out,
                 const std::function<JobOutput(const Job&, const JobContext&)>& run_job) {
  if (opt.workers < 1) throw UserError(fmt::format("the number of parallel jobs must be >= 1 (got {})", opt.workers));
  const Shard shard = Shard::parse(opt.shard);
  const auto total = static_cast<std::int64_t>(plan.jobs.size());
  if (total > kMaxJobs)
    throw UserError(fmt::format("the plan has {} jobs, more than the {} a sweep may hold; use smaller grids", total, kMaxJobs));
  std::vector<const Job*> mine;
  {
    std::set<std::string> keys;
    for (auto& j : plan.jobs) {
      if (!keys.insert(j.key).second)
        throw UserError(fmt::format("the plan holds job '{}' twice (a grid value given twice?); give each value once", j.key));
      if (shard.owns(j.index)) mine.push_back(&j);
    }
  }
  if (mine.empty())
    throw UserError(fmt::format("shard {} owns no job: the plan has {} job{}, so at most {} shard{} can be used",
                                shard.str(), total, total == 1 ? "" : "s", total, total == 1 ? "" : "s"));
  const std::string path = shard_path(out, shard);
  const fs::path partial = path + ".partial";
  const nlohmann::json want = stable_config(ctx.config);
  if (opt.dry_run) {
    // Read-only look at an interrupted run of this output (no lock taken, nothing created): which jobs a
    // --resume would skip, or why it would refuse.
    const PartialState ps = inspect_partial(partial, want, total, shard);
    std::int64_t done = 0;
    std::printf("%-6s %-6s %s\n", "index", "shard", "job");
    for (auto& j : plan.jobs) {
      const char* state = "-";
      if (shard.owns(j.index)) {
        state = "mine";
        if (ps == PartialState::same && fs::exists(partial / record_name(j.index))) {
          if (record_intact(partial, j)) {
            state = "done";
            ++done;
          } else {
            state = "redo";  // an unreadable record: --resume runs the job again
          }
        }
      }
      std::printf("%-6lld %-6s %s%s%s\n", static_cast<long long>(j.index), state, j.key.c_str(),
                  j.detail.empty() ? "" : "  ", j.detail.c_str());
    }
    std::printf("jobs: %zu in the plan, %zu in shard %s\noutput: %s\n", plan.jobs.size(), mine.size(),
                shard.str().c_str(), path.c_str());
    if (ps == PartialState::same)
      std::printf("interrupted run: %lld of %zu jobs done in %s; %s\n", static_cast<long long>(done), mine.size(),
                  partial.string().c_str(),
                  opt.resume ? "--resume runs the rest" : "add --resume to run the rest (without it the run refuses)");
    else if (ps == PartialState::different)
      std::printf("interrupted run: %s holds a run with a different configuration (%s); the run would refuse it "
                  "(delete the folder to start over)\n", partial.string().c_str(),
                  partial_difference(partial, want, total, shard).c_str());
    else if (ps == PartialState::malformed)
      std::printf("interrupted run: %s/meta.json is unreadable or malformed; the run would refuse it "
                  "(delete the folder to start over)\n", partial.string().c_str());
    return 0;
  }
  check_split(out, shard);
  if (opt.resume && !fs::exists(partial) && is_complete(path, want, total)) {
    std::fprintf(stderr, "%s %s: %s is complete: nothing to do\n", ctx.tool.c_str(), ctx.subcommand.c_str(),
                 path.c_str());
    return 0;
  }
  io::check_output_path(path);
  Progress progress(static_cast<std::int64_t>(mine.size()), opt.progress, ctx.tool + " " + ctx.subcommand);

  // OUT.partial/lock: held (flock) while this run lives; the kernel drops it when the process dies.
  bool created = false;
  PartialLock lock = lock_partial(partial, created);
  const bool have_meta = fs::exists(partial / "meta.json");
  bool has_records = false;
  {
    std::error_code ec;
    for (fs::directory_iterator it(partial, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (is_dead_temporary(n)) fs::remove_all(it->path(), ec);  // left by a dead run
      else if (n.rfind("job-", 0) == 0 || n.rfind("scratch-", 0) == 0) has_records = true;
    }
  }
  if (!created && (have_meta || has_records) && !opt.resumable) {
    std::fprintf(stderr, "%s %s: removing '%s', left by an interrupted run (this command has no --resume)\n",
                 ctx.tool.c_str(), ctx.subcommand.c_str(), partial.string().c_str());
    clear_partial(partial);
  } else if (!created && (have_meta || has_records)) {
    if (!opt.resume)
      throw UserError(fmt::format("'{}' holds an interrupted run of this output: add --resume to continue it, "
                                  "or delete that folder to start over", partial.string()));
    // records without a meta file are as unreadable as a malformed one
    const PartialState ps = inspect_partial(partial, want, total, shard);
    if (ps == PartialState::none || ps == PartialState::malformed)
      throw IoError(fmt::format("'{}' is unreadable or malformed; delete the folder to start over", (partial / "meta.json").string()));
    if (ps == PartialState::different) {
      const std::string diff = partial_difference(partial, want, total, shard);
      throw UserError(fmt::format("--resume: the interrupted run in '{}' used a different configuration{}; "
                                  "rerun with its flags, or delete the folder to start over", partial.string(),
                                  diff.empty() ? "" : " (" + diff + ")"));
    }
  } else if (opt.resume && opt.resumable) {
    std::fprintf(stderr, "%s %s: nothing to resume at %s, starting fresh\n", ctx.tool.c_str(),
                 ctx.subcommand.c_str(), partial.string().c_str());
  }
  if (!have_meta || !opt.resumable) {
    nlohmann::json meta = {{"config", want}, {"jobs_total", plan.jobs.size()}, {"shard", shard.str()},
                           {"started_utc", ctx.started_utc}};
    std::ofstream mf(partial / "meta.json.tmp");
    mf << meta.dump(2);
    mf.close();
    if (!mf) throw IoError(fmt::format("cannot write '{}'", (partial / "meta.json.tmp").string()));
    fs::rename(partial / "meta.json.tmp", partial / "meta.json");
  }

  // Jobs still to run (no record yet), costliest first (Job::cost; ties in plan order); workers take them in turn.
  std::int64_t done = 0;
  std::vector<const Job*> pending;
  for (const Job* j : mine) {
    const fs::path rec = partial / record_name(j->index);
    if (!fs::exists(rec)) {
      pending.push_back(j);
      continue;
    }
    const std::string bad = record_problem(rec, *j);
    if (bad.empty()) {
      ++done;
      continue;
    }
    std::fprintf(stderr, "%s %s: the record of job '%s' (%s) is unreadable: %s; running the job again\n",
                 ctx.tool.c_str(), ctx.subcommand.c_str(), j->key.c_str(), rec.string().c_str(), bad.c_str());
    std::error_code ec;
    fs::remove(rec, ec);
    if (ec) throw IoError(fmt::format("cannot remove the unreadable job record '{}': {}", rec.string(), ec.message()));
    pending.push_back(j);
  }
  std::stable_sort(pending.begin(), pending.end(), [](const Job* a, const Job* b) { return a->cost > b->cost; });
  if (done > 0)
    std::fprintf(stderr, "%s %s: resuming: %lld of %zu jobs done\n", ctx.tool.c_str(), ctx.subcommand.c_str(),
                 static_cast<long long>(done), mine.size());
  progress.start_at(done);
  std::mutex mu;                 // guards done, progress, first_error and the record writes
  std::exception_ptr first_error;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  auto worker = [&](int w) {
    for (;;) {
      if (stop.load()) return;
      const std::size_t k = next.fetch_add(1);
      if (k >= pending.size()) return;
      const Job* j = pending[k];
      const fs::path rec = partial / record_name(j->index);
      JobContext jc;
      jc.worker = w;
      jc.scratch = (partial / fmt::format("scratch-{:08d}", j->index)).string();
      try {
        auto t0 = std::chrono::steady_clock::now();
        JobOutput jo = run_job(*j, jc);
        double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        io::Row row;
        row.set("job", j->key).set("job_index", j->index).set("seed", static_cast<std::int64_t>(j->seed));
        row.set("status", "done").set("wall_s", wall).set("path", to_string(ctx.device.device));
        for (auto& [n, c] : jo.row.cells) row.set(n, c);
        std::lock_guard<std::mutex> lock(mu);
        const std::string tmp = (partial / (".tmp-" + record_name(j->index))).string();
        {
          h5::File f = h5::File::create(tmp);
          io::Table t;
          t.append(row);
          h5::Group s = f.child("summary");
          t.write(s);
          f.attr("job_key", j->key);
          f.attr("job_index", j->index);
          f.attr("params", j->params.dump());
          if (jo.write_run) {
            h5::Group rg = f.child("run");
            jo.write_run(rg);
          }
          f.flush();
        }
        fs::rename(tmp, rec);
        std::error_code ec;
        fs::remove(jc.scratch, ec);
        ++done;
        progress.update(done, j->key);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = std::current_exception();
        stop.store(true);
        return;
      }
    }
  };
  const int nthreads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(opt.workers), pending.size()));
  if (nthreads <= 1) {
    worker(0);
  } else {
    std::vector<std::thread> threads;
    for (int w = 0; w < nthreads; ++w) threads.emplace_back(worker, w);
    for (auto& t : threads) t.join();
  }
  if (first_error) {
    // Nothing worth resuming (no record, no scratch): leave no folder behind. A numerical failure (a diverged
    // training) is deterministic: its checkpoints would only diverge again, so they are not worth resuming either,
    // and the run with a lower --lr must not find them in its way.
    bool numeric = false;
    try {
      std::rethrow_exception(first_error);
    } catch (const NumericError&) {
      numeric = true;
    } catch (...) {
    }
    if (done == 0 && created) {
      bool keep = false;
      std::error_code ec;
      for (fs::directory_iterator it(partial, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string n = it->path().filename().string();
        if (n != "meta.json" && n != "lock" && !numeric) keep = true;
      }
      if (!keep) {
        fs::remove_all(partial, ec);
        lock.release();
      }
    }
    std::rethrow_exception(first_error);
  }
  progress.finish();

  // Assemble every record of this shard into the final file.
  std::vector<Record> recs;
  for (const Job* j : mine) {
    const fs::path rec = partial / record_name(j->index);
    h5::File f = h5::File::open_read(rec.string());
    io::Table t = io::Table::read(f.open_group("summary"));
    if (t.rows() != 1) throw IoError(fmt::format("job record '{}' is malformed; delete it and rerun with --resume", rec.string()));
    recs.push_back({j->index, j->key, t.row(0), rec.string(), f.exists("run") ? "run" : ""});
  }
  assemble(recs, path, ctx, plan.grid_axes, plan.grid_values, plan.finalizer,
           static_cast<std::int64_t>(plan.jobs.size()), shard.str());
  fs::remove_all(partial);
  lock.release();
  std::fprintf(stderr, "%s %s: wrote %s (%zu jobs)\n", ctx.tool.c_str(), ctx.subcommand.c_str(), path.c_str(), mine.size());
  return 0;
}

void merge(const std::vector<std::string>& inputs, const std::string& out, const io::RunContext& ctx,
           bool allow_partial) {
  if (inputs.empty()) throw UserError("merge needs at least one input file");
  io::check_output_path(out);
  std::vector<Record> recs;
  nlohmann::json config;
  std::string axes, values, finalizer;
  std::int64_t total = -1;
  std::set<std::int64_t> seen;
  std::vector<std::vector<std::pair<std::string, io::Cell>>> provenance;  // each input's root attributes
  for (size_t k = 0; k < inputs.size(); ++k) {
    h5::File f = h5::File::open_read(inputs[k]);
    provenance.push_back(io::read_attributes(f));
    if (!f.exists("summary") || !f.has_attr("sweep_jobs_total"))
      throw UserError(fmt::format("'{}' is not a memcap sweep result (no /summary or sweep attributes)", inputs[k]));
    // shards are joined by the tool that wrote them (its finalizer rebuilds /grid and the fits)
    const std::string tool = f.attr_string("tool").value_or("?"), sub = f.attr_string("subcommand").value_or("?");
    if (tool != ctx.tool)
      throw UserError(fmt::format("'{}' was written by '{} {}'; join its shards with '{} merge'", inputs[k], tool, sub,
                                  tool));
    nlohmann::json c = nlohmann::json::parse(f.open_group("config").attr_string("json").value_or("{}"));
    c = stable_config(c);
    auto ax = f.attr_string("sweep_grid_axes").value_or("");
    auto va = f.attr_string("sweep_grid_values").value_or("");
    auto fi = f.attr_string("sweep_finalizer").value_or("");
    auto tt = f.attr_int("sweep_jobs_total").value_or(-1);
    if (k == 0) {
      config = c;
      axes = ax;
      values = va;
      finalizer = fi;
      total = tt;
    } else if (c != config || ax != axes || fi != finalizer || tt != total) {
      throw UserError(fmt::format("'{}' was made with a different configuration than '{}'; only shards of one sweep can be merged",
                                  inputs[k], inputs[0]));
    }
    io::Table t = io::Table::read(f.open_group("summary"));
    auto idx = t.numbers("job_index");
    auto keys = t.strings("job");
    for (size_t r = 0; r < t.rows(); ++r) {
      auto i = static_cast<std::int64_t>(idx[r]);
      if (!seen.insert(i).second)
        throw UserError(fmt::format("job '{}' appears in more than one input (same shard given twice?)", keys[r]));
      std::string rp = "runs/" + run_group_name(keys[r]);
      recs.push_back({i, keys[r], t.row(r), inputs[k], f.exists(rp) ? rp : ""});
    }
  }
  if (!allow_partial && static_cast<std::int64_t>(recs.size()) != total)
    throw UserError(fmt::format("the inputs hold {} of the sweep's {} jobs; pass every shard (or --allow-partial)",
                                recs.size(), total));
  std::sort(recs.begin(), recs.end(), [](const Record& a, const Record& b) { return a.index < b.index; });
  io::RunContext mctx = ctx;
  mctx.config = config;
  mctx.config["merged_from"] = inputs;
  assemble(recs, out, mctx, split_csv(axes), split_csv(values), finalizer, total, "merged", [&](io::OutputFile& of) {
    h5::Group prov = of.root().child("provenance");  // /provenance/shard<k>: input k's provenance
    for (size_t k = 0; k < provenance.size(); ++k) {
      h5::Group g = prov.child(fmt::format("shard{}", k));
      io::write_attributes(g, provenance[k]);
      g.attr("merged_file", inputs[k]);
    }
  });
}

std::vector<double> logspace(double lo, double hi, int n) {
  std::vector<double> v;
  if (n <= 0) return v;
  if (n == 1) return {lo};
  const double a = std::log10(lo), b = std::log10(hi);
  for (int i = 0; i < n; ++i) v.push_back(std::pow(10.0, a + (b - a) * i / (n - 1)));
  return v;
}

std::vector<double> logspace_unique_ints(double lo, double hi, int n) {
  std::vector<double> v;
  for (double x : logspace(lo, hi, n)) {
    double r = std::nearbyint(x);
    if (v.empty() || v.back() != r) v.push_back(r);
  }
  return v;
}

}  // namespace memcap::sweep
