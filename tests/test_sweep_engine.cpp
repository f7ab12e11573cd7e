// Sweep engine: shards partition the plan, reruns are deterministic, merge of shards equals the
// unsharded run, a run interrupted after some jobs resumes to the same summary, and --resume
// refuses a partial run made with another configuration. Hardening: strict --shard / SLURM array
// parsing, duplicate keys and empty shards refused before anything is created, the lock on
// OUT.partial, a finished output under --resume is a no-op, and another split's partial is refused; a dry
// run shows which jobs an interrupted run finished, read-only.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>
#include <stdexcept>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/h5.hpp"
#include "io/table.hpp"
#include "sweep/sweep.hpp"

using namespace memcap;
namespace fs = std::filesystem;

namespace {
std::string temp_dir() {
  auto dir = fs::temp_directory_path() / ("memcap_test_sweep_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir.string();
}

sweep::Plan toy_plan() {
  sweep::Plan p;
  std::int64_t idx = 0;
  for (int w : {8, 16, 32})
    for (int s = 0; s < 3; ++s) {
      sweep::Job j;
      j.index = idx++;
      j.key = "width=" + std::to_string(w) + ",seed=" + std::to_string(s);
      j.params = {{"width", w}, {"seed", s}};
      j.seed = static_cast<std::uint64_t>(s);
      p.jobs.push_back(j);
    }
  p.grid_axes = {"width", "seed"};
  p.grid_values = {"value"};
  return p;
}

sweep::JobOutput toy_job(const sweep::Job& j) {
  sweep::JobOutput o;
  int w = j.params["width"];
  double v = 0;
  for (int i = 0; i < w; ++i) v += rng::normal(j.seed, 99, static_cast<std::uint64_t>(i));
  o.row.set("width", w).set("value", v / w);
  o.write_run = [w, j](h5::Group& g) {
    std::vector<double> arr(static_cast<size_t>(w));
    for (int i = 0; i < w; ++i) arr[static_cast<size_t>(i)] = rng::uniform(j.seed, 7, static_cast<std::uint64_t>(i));
    g.write("per_key", std::span<const double>(arr));
  };
  return o;
}

io::RunContext ctx_for(const std::string& tag) {
  io::RunContext c;
  c.tool = "test";
  c.subcommand = "toy";
  c.config = {{"grid", "toy"}, {"tag", tag}};
  return c;
}

// toy_plan() into out with configuration "a", killed when its fifth job starts: 4 job records stay in out.partial.
void run_killed_after_four(const sweep::Options& o, const std::string& out) {
  int calls = 0;
  auto dying = [&](const sweep::Job& j) {
    if (++calls == 5) throw std::runtime_error("killed");
    return toy_job(j);
  };
  CHECK_THROWS(sweep::run(toy_plan(), o, ctx_for("a"), out, dying));
}

io::Table summary_of(const std::string& path) {
  auto f = h5::File::open_read(path);
  return io::Table::read(f.open_group("summary"));
}

// File names in dir, sorted.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> v;
  for (auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

// What a dry run prints on stdout (captured through a temporary file).
std::string dry_run_output(const sweep::Plan& plan, const sweep::Options& o, const io::RunContext& c,
                           const std::string& out) {
  const std::string cap = temp_dir() + "/dry_stdout.txt";
  std::fflush(stdout);
  const int saved = dup(1);
  const int fd = open(cap.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  dup2(fd, 1);
  close(fd);
  const int rc = sweep::run(plan, o, c, out, toy_job);
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  CHECK(rc == 0);
  std::ifstream in(cap);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void check_same_summary(const io::Table& a, const io::Table& b) {
  REQUIRE(a.names == b.names);
  for (auto& n : a.names) {
    if (n == "wall_s") continue;  // timing differs between runs by nature
    if (std::holds_alternative<std::vector<std::string>>(*a.find(n))) CHECK(a.strings(n) == b.strings(n));
    else CHECK(a.numbers(n) == b.numbers(n));
  }
}
}  // namespace

TEST_CASE("shards partition the plan and the dry run writes nothing") {
  auto d = temp_dir();
  sweep::Options o;
  o.progress = "none";
  o.dry_run = true;
  o.shard = "1/2";
  CHECK(sweep::run(toy_plan(), o, ctx_for("a"), d + "/dry.h5", toy_job) == 0);
  CHECK_FALSE(fs::exists(d + "/dry.shard1of2.h5"));
  CHECK_THROWS_AS(sweep::Shard::parse("2/2"), UserError);
  CHECK_THROWS_AS(sweep::Shard::parse("a/b"), UserError);
  CHECK_THROWS_AS(sweep::Shard::parse("-1/2"), UserError);
  CHECK_THROWS_AS(sweep::Shard::parse("0/0"), UserError);
  CHECK_THROWS_AS(sweep::Shard::parse("1/2x"), UserError);
  // Every job index is owned by exactly one shard i of n, for every n up to 17 (more shards than jobs
  // included), and the shard sizes differ by at most one.
  for (int n = 1; n <= 17; ++n) {
    std::vector<int> size(static_cast<std::size_t>(n), 0);
    for (std::int64_t job = 0; job < 300; ++job) {
      int owners = 0;
      for (int i = 0; i < n; ++i) {
        const sweep::Shard s = sweep::Shard::parse(std::to_string(i) + "/" + std::to_string(n));
        REQUIRE(s.index == i);
        REQUIRE(s.count == n);
        if (s.owns(job)) {
          ++owners;
          ++size[static_cast<std::size_t>(i)];
        }
      }
      CAPTURE(n);
      CAPTURE(job);
      REQUIRE(owners == 1);
    }
    CHECK(*std::max_element(size.begin(), size.end()) - *std::min_element(size.begin(), size.end()) <= 1);
  }
}

TEST_CASE("running every shard of n runs every job exactly once (real runs, n = 1..4 and 11 > jobs)") {
  auto d = temp_dir();
  const sweep::Plan plan = toy_plan();
  for (int n : {1, 2, 3, 4, 11}) {
    std::map<std::string, int> seen;
    for (int i = 0; i < n; ++i) {
      sweep::Options o;
      o.progress = "none";
      o.shard = std::to_string(i) + "/" + std::to_string(n);
      const std::string out = d + "/part" + std::to_string(n) + ".h5";
      if (i >= static_cast<int>(plan.jobs.size())) {  // a shard that owns no job is refused, nothing written
        CHECK_THROWS_AS(sweep::run(plan, o, ctx_for("a"), out, toy_job), UserError);
        continue;
      }
      REQUIRE(sweep::run(plan, o, ctx_for("a"), out, toy_job) == 0);
      const std::string file = n == 1 ? out : d + "/part" + std::to_string(n) + ".shard" + std::to_string(i) + "of" +
                                                  std::to_string(n) + ".h5";
      const io::Table t = summary_of(file);
      for (const std::string& key : t.strings("job")) ++seen[key];
    }
    CAPTURE(n);
    CHECK(seen.size() == plan.jobs.size());
    for (const sweep::Job& j : plan.jobs) CHECK(seen[j.key] == 1);
  }
}

TEST_CASE("same plan twice gives identical datasets; merged shards equal the unsharded run") {
  auto d = temp_dir();
  sweep::Options o;
  o.progress = "none";
  sweep::run(toy_plan(), o, ctx_for("a"), d + "/full.h5", toy_job);
  sweep::run(toy_plan(), o, ctx_for("a"), d + "/full2.h5", toy_job);
  check_same_summary(summary_of(d + "/full.h5"), summary_of(d + "/full2.h5"));
  o.shard = "0/2";
  sweep::run(toy_plan(), o, ctx_for("a"), d + "/sh.h5", toy_job);
  o.shard = "1/2";
  sweep::run(toy_plan(), o, ctx_for("a"), d + "/sh.h5", toy_job);
  CHECK_THROWS_AS(sweep::merge({d + "/sh.shard0of2.h5"}, d + "/partial.h5", ctx_for("a")), UserError);
  sweep::merge({d + "/sh.shard1of2.h5", d + "/sh.shard0of2.h5"}, d + "/merged.h5", ctx_for("a"));
  check_same_summary(summary_of(d + "/full.h5"), summary_of(d + "/merged.h5"));
  auto a = h5::File::open_read(d + "/full.h5");
  auto b = h5::File::open_read(d + "/merged.h5");
  CHECK(a.open_group("grid").read_doubles("value") == b.open_group("grid").read_doubles("value"));
  CHECK(a.open_group("runs/width=16,seed=2").read_doubles("per_key") ==
        b.open_group("runs/width=16,seed=2").read_doubles("per_key"));
  // Shards of different configurations are refused.
  o.shard = "0/2";
  sweep::run(toy_plan(), o, ctx_for("b"), d + "/other.h5", toy_job);
  CHECK_THROWS_AS(sweep::merge({d + "/sh.shard1of2.h5", d + "/other.shard0of2.h5"}, d + "/bad.h5", ctx_for("a")),
                  UserError);
  CHECK_FALSE(fs::exists(d + "/bad.h5"));
}

TEST_CASE("an interrupted sweep resumes to the same summary, skipping finished jobs") {
  auto d = temp_dir();
  sweep::Options o;
  o.progress = "none";
  sweep::run(toy_plan(), o, ctx_for("a"), d + "/ref.h5", toy_job);
  run_killed_after_four(o, d + "/int.h5");
  CHECK_FALSE(fs::exists(d + "/int.h5"));
  CHECK(fs::exists(d + "/int.h5.partial"));
  // Without --resume the partial run is not silently overwritten.
  CHECK_THROWS_AS(sweep::run(toy_plan(), o, ctx_for("a"), d + "/int.h5", toy_job), UserError);
  {  // A dry run reads the partial folder without touching it: 4 jobs "done", then why a resume would refuse.
    const auto before = listing(d + "/int.h5.partial");
    sweep::Options dry = o;
    dry.dry_run = true;
    const std::string same = dry_run_output(toy_plan(), dry, ctx_for("a"), d + "/int.h5");
    std::size_t n_done = 0;
    for (std::size_t p = same.find(" done   width="); p != std::string::npos; p = same.find(" done   width=", p + 1)) ++n_done;
    CHECK(n_done == 4);
    CHECK(same.find("4 of 9 jobs done") != std::string::npos);
    CHECK(same.find("add --resume") != std::string::npos);
    const std::string other = dry_run_output(toy_plan(), dry, ctx_for("b"), d + "/int.h5");
    CHECK(other.find(" done   width=") == std::string::npos);
    CHECK(other.find("different configuration") != std::string::npos);
    CHECK(listing(d + "/int.h5.partial") == before);
  }
  // The jobs a --resume would skip (a command leaves them out of its size checks): none without --resume or
  // under another configuration, else the 4 finished ones, read-only.
  {
    const auto before = listing(d + "/int.h5.partial");
    CHECK(sweep::finished_jobs(toy_plan(), o, ctx_for("a"), d + "/int.h5").empty());
    sweep::Options res = o;
    res.resume = true;
    const std::set<std::int64_t> done = sweep::finished_jobs(toy_plan(), res, ctx_for("a"), d + "/int.h5");
    CHECK(done == std::set<std::int64_t>{0, 1, 2, 3});
    CHECK(sweep::finished_jobs(toy_plan(), res, ctx_for("b"), d + "/int.h5").empty());
    CHECK(sweep::finished_jobs(toy_plan(), res, ctx_for("a"), d + "/other.h5").empty());
    CHECK(listing(d + "/int.h5.partial") == before);
  }
  // With another configuration --resume refuses.
  o.resume = true;
  CHECK_THROWS_AS(sweep::run(toy_plan(), o, ctx_for("b"), d + "/int.h5", toy_job), UserError);
  int resumed_calls = 0;
  auto counting = [&](const sweep::Job& j) {
    ++resumed_calls;
    return toy_job(j);
  };
  sweep::run(toy_plan(), o, ctx_for("a"), d + "/int.h5", counting);
  CHECK(resumed_calls == 9 - 4);
  CHECK_FALSE(fs::exists(d + "/int.h5.partial"));
  check_same_summary(summary_of(d + "/ref.h5"), summary_of(d + "/int.h5"));
}

TEST_CASE("a sweep resumed by a version that writes more columns keeps the old records (missing cells filled)") {
  // Table::from_rows: the union of columns in first-seen order; NaN / -1 / "" where a row lacks one
  io::Row a, b;
  a.set("x", 1.5).set("n", 2);
  b.set("x", 2.5).set("tag", "new").set("n", 3).set("k", 7);
  std::size_t filled = 0;
  const io::Table t = io::Table::from_rows({a, b}, &filled);
  CHECK(filled == 2);
  CHECK(t.names == std::vector<std::string>{"x", "n", "tag", "k"});
  CHECK(t.strings("tag") == std::vector<std::string>{"", "new"});
  CHECK(t.numbers("k") == std::vector<double>{-1, 7});
  CHECK(t.numbers("n") == std::vector<double>{2, 3});
  io::Row c;
  c.set("x", "text");  // a type change is still refused
  CHECK_THROWS_AS(io::Table::from_rows({a, c}), UserError);

  // the sweep: 4 jobs finished by the "old" job function, the rest by one that adds a column
  auto d = temp_dir();
  sweep::Options o;
  o.progress = "none";
  run_killed_after_four(o, d + "/up.h5");
  o.resume = true;
  auto newer = [](const sweep::Job& j) {
    sweep::JobOutput out = toy_job(j);
    out.row.set("extra", 0.25);
    return out;
  };
  sweep::run(toy_plan(), o, ctx_for("a"), d + "/up.h5", newer);
  const io::Table s = summary_of(d + "/up.h5");
  REQUIRE(s.rows() == 9);
  const std::vector<double> extra = s.numbers("extra");
  CHECK(std::count_if(extra.begin(), extra.end(), [](double v) { return std::isnan(v); }) == 4);
  CHECK(std::count(extra.begin(), extra.end(), 0.25) == 5);
  const io::Table ref = [&] {
    sweep::Options r;
    r.progress = "none";
    sweep::run(toy_plan(), r, ctx_for("a"), d + "/up_ref.h5", toy_job);
    return summary_of(d + "/up_ref.h5");
  }();
  CHECK(s.numbers("value") == ref.numbers("value"));
}

namespace {
// Shard from a table of SLURM variables ("" = unset).
sweep::Shard slurm_shard(const std::map<std::string, std::string>& vars, const std::string& spec = "") {
  return sweep::Shard::parse(spec, [&](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}
std::map<std::string, std::string> array_vars(const std::string& id, const std::string& mn, const std::string& mx,
                                              const std::string& step, const std::string& count) {
  return {{"SLURM_ARRAY_TASK_ID", id}, {"SLURM_ARRAY_TASK_MIN", mn}, {"SLURM_ARRAY_TASK_MAX", mx},
          {"SLURM_ARRAY_TASK_STEP", step}, {"SLURM_ARRAY_TASK_COUNT", count}};
}
}  // namespace

TEST_CASE("--shard and the SLURM array variables are parsed strictly") {
  CHECK_THROWS_AS(sweep::Shard::parse("0/99999999999"), UserError);
  CHECK_THROWS_AS(sweep::Shard::parse("0/2 "), UserError);
  CHECK_THROWS_AS(sweep::Shard::parse(" 0/2"), UserError);
  CHECK_THROWS_AS(sweep::Shard::parse("0x1/2"), UserError);
  CHECK_THROWS_AS(sweep::Shard::parse("1/"), UserError);
  CHECK_THROWS_AS(sweep::Shard::parse("/2"), UserError);
  CHECK(sweep::Shard::parse("3/4").index == 3);
  // No array: the whole sweep; an explicit --shard wins over the variables.
  CHECK(slurm_shard({}).str() == "0/1");
  CHECK(slurm_shard({{"SLURM_ARRAY_TASK_COUNT", "4"}}).str() == "0/1");
  CHECK(slurm_shard(array_vars("abc", "0", "3", "1", "4"), "1/2").str() == "1/2");
  struct Case {
    std::map<std::string, std::string> vars;
    const char* want;  // nullptr: UserError
  };
  const std::vector<Case> cases = {
      {array_vars("0", "0", "3", "1", "4"), "0/4"},
      {array_vars("3", "0", "3", "1", "4"), "3/4"},
      {array_vars("5", "2", "9", "1", "8"), "3/8"},            // arrays need not start at 0
      {array_vars("4", "0", "4", "2", "3"), "2/3"},            // stepped 0-4:2 -> tasks 0,2,4
      {array_vars("7", "1", "10", "3", "4"), "2/4"},           // 1-10:3 -> 1,4,7,10
      {array_vars("abc", "0", "3", "1", "4"), nullptr},        // not a number
      {array_vars("2junk", "0", "3", "1", "4"), nullptr},      // trailing junk
      {array_vars("", "0", "3", "1", "4"), nullptr},
      {array_vars("-1", "0", "3", "1", "4"), nullptr},
      {array_vars("99999999999", "0", "3", "1", "4"), nullptr},  // overflow
      {array_vars("1", "0", "4", "2", "3"), nullptr},          // not on the step
      {array_vars("5", "0", "3", "1", "4"), nullptr},          // outside MIN..MAX
      {array_vars("2", "0", "3", "1", "5"), nullptr},          // COUNT disagrees with MIN-MAX:STEP
      {array_vars("1", "1", "1", "1", "1"), nullptr},          // sbatch --array=1: a resubmitted task
      {array_vars("0", "0", "0", "1", "1"), nullptr},          // any one-task array: ask for --shard
      {array_vars("1", "0", "7", "1", "1"), nullptr},          // COUNT=1 but MIN/MAX show a bigger array
      {array_vars("2", "0", "3", "0", "4"), nullptr},          // step 0
      {{{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}, nullptr},  // MIN/MAX missing
      {{{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_MIN", "0"}, {"SLURM_ARRAY_TASK_MAX", "3"},
        {"SLURM_ARRAY_TASK_COUNT", "4"}}, "1/4"},              // STEP missing: 1
  };
  for (const auto& c : cases) {
    std::string shown;
    for (auto& [k, v] : c.vars) shown += k + "=" + v + " ";
    CAPTURE(shown);
    if (c.want) CHECK(slurm_shard(c.vars).str() == c.want);
    else CHECK_THROWS_AS(slurm_shard(c.vars), UserError);
  }
}

TEST_CASE("plan checks: counts, integers, duplicates") {
  CHECK(sweep::job_count({{"widths", 30}, {"seeds", 5}}) == 150);
  CHECK_THROWS_AS(sweep::job_count({{"widths", 30}, {"seeds", 2000000000}}), UserError);
  CHECK_THROWS_AS(sweep::job_count({{"a", INT64_MAX}, {"b", INT64_MAX}}), UserError);
  CHECK(sweep::parse_int("42", "x", 0, 100) == 42);
  CHECK_THROWS_AS(sweep::parse_int("42x", "x", 0, 100), UserError);
  CHECK_THROWS_AS(sweep::parse_int("101", "x", 0, 100), UserError);
  CHECK_THROWS_AS(sweep::parse_int("99999999999999999999", "x", 0, INT64_MAX), UserError);
  CHECK(sweep::to_int(64.0, "w", 2, 1000) == 64);
  CHECK_THROWS_AS(sweep::to_int(1e30, "w", 2, 1000), UserError);
  CHECK_THROWS_AS(sweep::to_int(NAN, "w", 2, 1000), UserError);
  CHECK_THROWS_AS(sweep::to_int(2.5, "w", 2, 1000), UserError);
  CHECK_NOTHROW(sweep::require_distinct({"64", "65"}, "--widths"));
  CHECK_THROWS_WITH_AS(sweep::require_distinct({"64", "64"}, "--widths"), doctest::Contains("--widths lists '64' twice"),
                       UserError);
  CHECK(sweep::available_memory() != 0);
  CHECK_THROWS_AS(sweep::require_memory(1e30, "a job"), UserError);
  CHECK_NOTHROW(sweep::require_memory(1024, "a job"));
}

TEST_CASE("duplicate keys and empty shards are refused before anything is created") {
  const std::string d = temp_dir() + "/refuse";
  fs::create_directories(d);
  sweep::Options o;
  o.progress = "none";
  sweep::Plan dup = toy_plan();
  dup.jobs[4].key = dup.jobs[3].key;
  for (bool dry : {false, true}) {
    o.dry_run = dry;
    CHECK_THROWS_WITH_AS(sweep::run(dup, o, ctx_for("a"), d + "/dup.h5", toy_job), doctest::Contains("twice"), UserError);
  }
  o.dry_run = false;
  o.shard = "9/10";
  CHECK_THROWS_WITH_AS(sweep::run(toy_plan(), o, ctx_for("a"), d + "/empty.h5", toy_job),
                       doctest::Contains("the plan has 9 jobs"), UserError);
  // A job that fails before any record exists leaves no .partial folder behind.
  o.shard = "";
  CHECK_THROWS(sweep::run(toy_plan(), o, ctx_for("a"), d + "/fail.h5",
                          [](const sweep::Job&) -> sweep::JobOutput { throw UserError("bad input"); }));
  CHECK(listing(d).empty());
}

TEST_CASE("lock, stale temporaries, another split, and --resume on a finished output") {
  const std::string d = temp_dir() + "/lock";
  fs::create_directories(d);
  sweep::Options o;
  o.progress = "none";
  // Interrupted run: records of 4 jobs in out.h5.partial.
  run_killed_after_four(o, d + "/out.h5");
  REQUIRE(fs::exists(d + "/out.h5.partial/lock"));
  // Another run holding the lock (flock on a second open file description conflicts, even in-process).
  {
    const int fd = open((d + "/out.h5.partial/lock").c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(flock(fd, LOCK_EX | LOCK_NB) == 0);
    REQUIRE(pwrite(fd, "4242\n", 5, 0) == 5);
    o.resume = true;
    CHECK_THROWS_WITH_AS(sweep::run(toy_plan(), o, ctx_for("a"), d + "/out.h5", toy_job),
                         doctest::Contains("is being written by another run (pid 4242)"), UserError);
    close(fd);
  }
  // Another split of the same output is refused while this partial run exists.
  o.shard = "0/3";
  CHECK_THROWS_WITH_AS(sweep::run(toy_plan(), o, ctx_for("a"), d + "/out.h5", toy_job),
                       doctest::Contains("split into 1 shard"), UserError);
  o.shard = "";
  // A temporary record left by a killed run is removed; the resume reruns only the missing jobs.
  // So are the PATH.tmp-<pid> files of checkpoints a signal interrupted mid-write.
  { std::ofstream(d + "/out.h5.partial/.tmp-job-00000007.h5") << "junk"; }
  { std::ofstream(d + "/out.h5.partial/scratch-pretrain-seed=1.h5.ckpt.tmp-4242") << "junk"; }
  { std::ofstream(d + "/out.h5.partial/scratch-00000007-ckpt.tmp-99") << "junk"; }
  int resumed = 0;
  CHECK(sweep::run(toy_plan(), o, ctx_for("a"), d + "/out.h5", [&](const sweep::Job& j) {
          if (++resumed == 1) {
            CHECK_FALSE(fs::exists(d + "/out.h5.partial/.tmp-job-00000007.h5"));
            CHECK_FALSE(fs::exists(d + "/out.h5.partial/scratch-pretrain-seed=1.h5.ckpt.tmp-4242"));
            CHECK_FALSE(fs::exists(d + "/out.h5.partial/scratch-00000007-ckpt.tmp-99"));
          }
          return toy_job(j);
        }) == 0);
  CHECK(resumed == 5);
  CHECK(listing(d) == std::vector<std::string>{"out.h5"});
  // --resume on the finished output: nothing to do, nothing run, file untouched.
  const auto mtime = fs::last_write_time(d + "/out.h5");
  int again = 0;
  CHECK(sweep::run(toy_plan(), o, ctx_for("a"), d + "/out.h5", [&](const sweep::Job& j) {
          ++again;
          return toy_job(j);
        }) == 0);
  CHECK(again == 0);
  CHECK(fs::last_write_time(d + "/out.h5") == mtime);
}

TEST_CASE("a numerical failure before any job finished leaves no partial folder, checkpoints included") {
  const std::string d = temp_dir() + "/diverged";
  fs::create_directories(d);
  sweep::Options o;
  o.progress = "none";
  CHECK_THROWS_AS(sweep::run(toy_plan(), o, ctx_for("a"), d + "/div.h5",
                             [&](const sweep::Job&) -> sweep::JobOutput {
                               std::ofstream(d + "/div.h5.partial/scratch-00000000-ckpt") << "a checkpoint";
                               throw NumericError("training diverged: non-finite loss at step 1");
                             }),
                  NumericError);
  CHECK(listing(d).empty());
  // another failure (here an I/O error) keeps what a resume could use
  CHECK_THROWS_AS(sweep::run(toy_plan(), o, ctx_for("a"), d + "/io.h5",
                             [&](const sweep::Job&) -> sweep::JobOutput {
                               std::ofstream(d + "/io.h5.partial/scratch-00000000-ckpt") << "a checkpoint";
                               throw IoError("disk full");
                             }),
                  IoError);
  CHECK(fs::exists(d + "/io.h5.partial/scratch-00000000-ckpt"));
}

TEST_CASE("a single run without --resume clears a dead run's partial folder") {
  const std::string d = temp_dir() + "/single";
  fs::create_directories(d);
  sweep::Options o;
  o.progress = "none";
  o.resumable = false;
  o.shard = "0/1";
  int calls = 0;
  CHECK_THROWS(sweep::run(toy_plan(), o, ctx_for("a"), d + "/one.h5", [&](const sweep::Job& j) {
    if (++calls == 3) throw std::runtime_error("killed");
    return toy_job(j);
  }));
  REQUIRE(fs::exists(d + "/one.h5.partial"));
  CHECK(sweep::run(toy_plan(), o, ctx_for("a"), d + "/one.h5", toy_job) == 0);
  CHECK(listing(d) == std::vector<std::string>{"one.h5"});
}
