// Sweep engine: shards partition the plan, reruns are deterministic, merge of shards equals the
// unsharded run, a run interrupted after some jobs resumes to the same summary, and --resume
// refuses a partial run made with another configuration.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
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

io::Table summary_of(const std::string& path) {
  auto f = h5::File::open_read(path);
  return io::Table::read(f.open_group("summary"));
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
      REQUIRE(sweep::run(plan, o, ctx_for("a"), out, toy_job) == 0);
      const std::string file = n == 1 ? out : d + "/part" + std::to_string(n) + ".shard" + std::to_string(i) + "of" +
                                                  std::to_string(n) + ".h5";
      const io::Table t = summary_of(file);
      if (t.rows() == 0) continue;  // n > jobs: some shards own nothing and write an empty summary
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
  int calls = 0;
  auto dying = [&](const sweep::Job& j) {
    if (++calls == 5) throw std::runtime_error("killed");
    return toy_job(j);
  };
  CHECK_THROWS(sweep::run(toy_plan(), o, ctx_for("a"), d + "/int.h5", dying));
  CHECK_FALSE(fs::exists(d + "/int.h5"));
  CHECK(fs::exists(d + "/int.h5.partial"));
  // Without --resume the partial run is not silently overwritten.
  CHECK_THROWS_AS(sweep::run(toy_plan(), o, ctx_for("a"), d + "/int.h5", toy_job), UserError);
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
