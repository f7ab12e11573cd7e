// Dataset descriptions (src/io/describe.*): the registry, the units/long_name attributes and the
// /summary row dimension scale an OutputFile writes, provenance attribute round trips, and a
// coverage report of the column/dataset names the commands write that have no description yet.
#include <doctest/doctest.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "io/describe.hpp"
#include "io/output_file.hpp"

using namespace memcap;
namespace fs = std::filesystem;

namespace {
std::string temp_path(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("memcap_test_describe_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

// Literal names passed to Row::set("...") and Group::write*("...") in apps/ and src/.
std::set<std::string> names_written_by_commands() {
  const fs::path root = fs::path(__FILE__).parent_path().parent_path();
  const std::regex re(R"rx((?:\.set|\.write|\.write_nd|\.write_f32)\("([A-Za-z_][A-Za-z0-9_]*)")rx");
  std::set<std::string> out;
  for (const char* dir : {"apps", "src"}) {
    if (!fs::exists(root / dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      if (e.path().extension() != ".cpp") continue;
      std::ifstream in(e.path());
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) out.insert((*it)[1]);
    }
  }
  return out;
}
}  // namespace

TEST_CASE("describe: known names have units and text, unknown names a generic text") {
  bool known = false;
  auto d = io::describe("wall_s", "", &known);
  CHECK(known);
  CHECK(d.unit == "s");
  CHECK(!d.text.empty());
  d = io::describe("m", "probes", &known);  // context entry
  CHECK(known);
  CHECK(d.unit == "count");
  d = io::describe("no_such_column_xyz", "", &known);
  CHECK(!known);
  CHECK(d.unit.empty());
  CHECK(d.text.find("no_such_column_xyz") != std::string::npos);
}

TEST_CASE("describe: the summary columns of the main commands are all described") {
  for (const char* n : {"job", "job_index", "seed", "status", "wall_s", "path", "width", "dim", "facts", "min_margin",
                        "accuracy", "m_star", "params_star", "k_star_psnr", "k_star_acc", "map", "keys", "map_id",
                        "keys_id", "loss", "per_key", "K", "acc", "row"}) {
    bool known = false;
    io::describe(n, "", &known);
    CHECK_MESSAGE(known, n);
  }
}

TEST_CASE("describe: coverage of the names the commands write (report, grows over time)") {
  const auto written = names_written_by_commands();
  REQUIRE(!written.empty());
  std::string missing;
  int n_missing = 0;
  for (const auto& n : written) {
    bool known = false;
    io::describe(n, "", &known);
    if (!known) {
      missing += " " + n;
      ++n_missing;
    }
  }
  MESSAGE(written.size() << " names written by the commands, " << n_missing
                         << " without a description in src/io/describe.cpp:" << missing);
  // Most are described; a new command column without an entry only shows up in the message above.
  CHECK(n_missing * 4 < static_cast<int>(written.size()));
}

TEST_CASE("OutputFile: units/long_name on every dataset, /summary/row scale, library versions") {
  const std::string p = temp_path("described.h5");
  io::RunContext ctx;
  ctx.tool = "test";
  {
    io::OutputFile of(p, ctx);
    io::Table t;
    io::Row r;
    r.set("seed", 3).set("wall_s", 0.5).set("map", "m1").set("mystery", 1.0);
    t.append(r);
    r.set("seed", 4);
    t.append(r);
    of.write_summary(t);
    h5::Group runs = of.root().child("runs").child("a");
    std::vector<double> v{1, 2, 3};
    runs.write("loss", std::span<const double>(v));
    of.commit();
  }
  h5::File f = h5::File::open_read(p);
  for (const char* k : {"hdf5_version", "eigen_version", "openblas_version", "compiler"}) {
    CHECK_MESSAGE(f.attr_string(k).has_value(), k);
    if (auto s = f.attr_string(k)) CHECK(!s->empty());
  }
  h5::Group s = f.open_group("summary");
  CHECK(s.read_int64s("row") == std::vector<std::int64_t>{0, 1});
  hid_t row = H5Dopen2(s.id(), "row", H5P_DEFAULT);
  CHECK(H5DSis_scale(row) > 0);
  for (const char* c : {"seed", "wall_s", "map", "mystery"}) {
    hid_t ds = H5Dopen2(s.id(), c, H5P_DEFAULT);
    CHECK_MESSAGE(H5DSis_attached(ds, row, 0) > 0, c);
    H5Dclose(ds);
    h5::Group d(h5::Handle(H5Oopen(s.id(), c, H5P_DEFAULT), H5Oclose), c, p);
    CHECK_MESSAGE(d.attr_string("units").has_value(), c);
    CHECK_MESSAGE(d.attr_string("long_name").has_value(), c);
  }
  H5Dclose(row);
  h5::Group d(h5::Handle(H5Oopen(s.id(), "wall_s", H5P_DEFAULT), H5Oclose), "wall_s", p);
  CHECK(d.attr_string("units").value() == "s");
  h5::Group l(h5::Handle(H5Oopen(f.id(), "runs/a/loss", H5P_DEFAULT), H5Oclose), "loss", p);
  CHECK(l.attr_string("units").has_value());
  // the table still reads back without the scale as a column
  const io::Table t = io::Table::read(s);
  CHECK(t.names == std::vector<std::string>{"seed", "wall_s", "map", "mystery"});
  fs::remove_all(fs::path(p).parent_path());
}

TEST_CASE("read_attributes / write_attributes round trip scalar attributes") {
  const std::string p = temp_path("attrs.h5");
  {
    h5::File f = h5::File::create(p);
    f.attr("host", "node1");
    f.attr("threads", 8);
    f.attr("x", 1.5);
    std::vector<double> arr{1, 2};
    f.attr("arr", std::span<const double>(arr));  // arrays are left out
    auto attrs = io::read_attributes(f);
    CHECK(attrs.size() == 3);
    h5::Group g = f.child("copy");
    io::write_attributes(g, attrs);
    CHECK(g.attr_string("host").value() == "node1");
    CHECK(g.attr_int("threads").value() == 8);
    CHECK(g.attr_double("x").value() == 1.5);
    f.close();
  }
  fs::remove_all(fs::path(p).parent_path());
}
