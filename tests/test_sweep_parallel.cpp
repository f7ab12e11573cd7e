// Sweep engine, parallel jobs (run_parallel): the assembled file does not depend on the worker
// count; every worker index is used; a throwing job stops the run with its exception, keeps the
// finished records, and --resume completes to the same summary; the per-job scratch file survives
// the failure, is there again on resume, and is gone at the end.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/threads.hpp"
#include "io/h5.hpp"
#include "io/table.hpp"
#include "sweep/sweep.hpp"

using namespace memcap;
namespace fs = std::filesystem;

namespace {

std::string temp_dir() {
  auto dir = fs::temp_directory_path() / ("memcap_test_sweep_par_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir.string();
}

sweep::Plan plan_of(int n) {
  sweep::Plan p;
  for (int i = 0; i < n; ++i) {
    sweep::Job j;
    j.index = i;
    j.key = "job=" + std::to_string(i);
    j.params = {{"x", i}};
    j.seed = static_cast<std::uint64_t>(i);
    p.jobs.push_back(j);
  }
  p.grid_axes = {"x"};
  p.grid_values = {"y"};
  return p;
}

// Deterministic output; later jobs finish first (sleep decreases with the index).
sweep::JobOutput job_output(const sweep::Job& j) {
  const int x = j.params["x"];
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * (12 - x)));
  sweep::JobOutput o;
  o.row.set("x", x).set("y", 0.5 * x * x);
  o.write_run = [x](h5::Group& g) {
    std::vector<double> v(static_cast<std::size_t>(x + 1), static_cast<double>(x));
    g.write("v", std::span<const double>(v));
  };
  return o;
}

io::RunContext ctx_for() {
  io::RunContext c;
  c.tool = "test";
  c.subcommand = "par";
  c.config = {{"grid", "par"}};
  return c;
}

io::Table summary_of(const std::string& path) {
  auto f = h5::File::open_read(path);
  return io::Table::read(f.open_group("summary"));
}

void check_same(const io::Table& a, const io::Table& b) {
  REQUIRE(a.names == b.names);
  for (auto& n : a.names) {
    if (n == "wall_s") continue;
    if (std::holds_alternative<std::vector<std::string>>(*a.find(n))) CHECK(a.strings(n) == b.strings(n));
    else CHECK(a.numbers(n) == b.numbers(n));
  }
}

}  // namespace

TEST_CASE("run_parallel: the result does not depend on the worker count") {
  const std::string dir = temp_dir();
  const auto plan = plan_of(12);
  sweep::Options opt;
  opt.progress = "none";
  const std::string one = dir + "/one.h5", four = dir + "/four.h5";
  REQUIRE(sweep::run(plan, opt, ctx_for(), one, job_output) == 0);
  opt.workers = 4;
  std::mutex mu;
  std::set<int> workers;
  REQUIRE(sweep::run_parallel(plan, opt, ctx_for(), four, [&](const sweep::Job& j, const sweep::JobContext& jc) {
            {
              std::lock_guard<std::mutex> lock(mu);
              workers.insert(jc.worker);
            }
            CHECK(jc.scratch.find(".partial") != std::string::npos);
            return job_output(j);
          }) == 0);
  CHECK(workers == std::set<int>{0, 1, 2, 3});
  check_same(summary_of(one), summary_of(four));
  auto f = h5::File::open_read(four);
  CHECK(f.open_group("runs").list().size() == 12);
  CHECK(f.open_group("grid").read_doubles("y") == summary_of(one).numbers("y"));
  CHECK(!fs::exists(four + ".partial"));
  fs::remove_all(dir);
}

TEST_CASE("run_parallel: costliest jobs start first (Job::cost, ties in plan order); the file is the same") {
  const std::string dir = temp_dir();
  auto plan = plan_of(8);
  const double costs[8] = {1, 5, 0, 5, 9, 2, 0, 7};
  for (std::size_t i = 0; i < plan.jobs.size(); ++i) plan.jobs[i].cost = costs[i];
  sweep::Options opt;
  opt.progress = "none";
  const std::string plain = dir + "/plain.h5", costed = dir + "/costed.h5";
  REQUIRE(sweep::run(plan_of(8), opt, ctx_for(), plain, job_output) == 0);
  std::vector<int> started;
  REQUIRE(sweep::run_parallel(plan, opt, ctx_for(), costed, [&](const sweep::Job& j, const sweep::JobContext&) {
            started.push_back(j.params["x"]);  // one worker: jobs run one after another on this thread
            return job_output(j);
          }) == 0);
  CHECK(started == std::vector<int>{4, 7, 1, 3, 5, 0, 2, 6});
  check_same(summary_of(plain), summary_of(costed));  // records assembled in plan order
  fs::remove_all(dir);
}

TEST_CASE("run_parallel: a failing job stops the run; --resume completes it, scratch files carry over") {
  const std::string dir = temp_dir();
  const auto plan = plan_of(10);
  const std::string out = dir + "/fail.h5";
  sweep::Options opt;
  opt.progress = "none";
  opt.workers = 3;
  std::atomic<bool> fail{true};
  auto body = [&](const sweep::Job& j, const sweep::JobContext& jc) {
    if (j.index == 6) {
      if (fail.load()) {
        std::ofstream(jc.scratch) << "half done";
        throw NumericError("job 6 diverged");
      }
      std::ifstream in(jc.scratch);
      std::string s;
      std::getline(in, s);
      CHECK(s == "half done");  // the scratch file of the killed attempt is there again
    }
    return job_output(j);
  };
  CHECK_THROWS_AS(sweep::run_parallel(plan, opt, ctx_for(), out, body), NumericError);
  CHECK(!fs::exists(out));
  REQUIRE(fs::exists(out + ".partial"));
  int records = 0;
  for (auto& e : fs::directory_iterator(out + ".partial"))
    records += e.path().filename().string().rfind("job-", 0) == 0;
  CHECK(records >= 1);
  CHECK(records <= 9);
  CHECK(fs::exists(out + ".partial/scratch-00000006"));

  fail = false;
  opt.resume = true;
  std::atomic<int> reran{0};
  REQUIRE(sweep::run_parallel(plan, opt, ctx_for(), out, [&](const sweep::Job& j, const sweep::JobContext& jc) {
            ++reran;
            return body(j, jc);
          }) == 0);
  CHECK(reran.load() == 10 - records);
  CHECK(!fs::exists(out + ".partial"));
  sweep::Options seq;
  seq.progress = "none";
  REQUIRE(sweep::run(plan, seq, ctx_for(), dir + "/seq.h5", job_output) == 0);
  check_same(summary_of(out), summary_of(dir + "/seq.h5"));
  fs::remove_all(dir);
}

TEST_CASE("run_parallel refuses a worker count below 1") {
  sweep::Options opt;
  opt.workers = 0;
  CHECK_THROWS_AS(sweep::run_parallel(plan_of(2), opt, ctx_for(), temp_dir() + "/x.h5",
                                      [](const sweep::Job& j, const sweep::JobContext&) { return job_output(j); }),
                  UserError);
}

TEST_CASE("parallel_for_rethrow: a body's exception leaves the loop as the smallest index's, at any thread count") {
  const int before = memcap::max_threads();
  for (int threads : {1, 2, 4}) {
    memcap::set_threads(threads);
    std::vector<int> seen(64, 0);
    memcap::parallel_for_rethrow(64, [&](std::int64_t i) { seen[static_cast<std::size_t>(i)] = 1; });
    CHECK(std::count(seen.begin(), seen.end(), 1) == 64);
    // every index still runs; the error reported is index 5's, whichever thread threw first
    std::atomic<int> ran{0};
    CHECK_THROWS_WITH_AS(memcap::parallel_for_rethrow(64,
                                                      [&](std::int64_t i) {
                                                        ++ran;
                                                        if (i % 5 == 0 && i > 0)
                                                          throw memcap::UserError("bad index " + std::to_string(i));
                                                      }),
                         "bad index 5", memcap::UserError);
    CHECK(ran.load() == 64);
    memcap::parallel_for_rethrow(0, [&](std::int64_t) { FAIL("no index"); });
  }
  memcap::set_threads(before);
}
