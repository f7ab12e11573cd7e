// HDF5 layer: round trips of matrices, vectors, strings, attributes, tables, grids with scales,
// and the crash-safe OutputFile (no file under the final name unless committed).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/error.hpp"
#include "io/grid.hpp"
#include "io/h5.hpp"
#include "io/output_file.hpp"
#include "io/table.hpp"

using namespace memcap;
namespace fs = std::filesystem;

namespace {
std::string temp_path(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("memcap_test_io_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}
}  // namespace

TEST_CASE("matrices, vectors, strings and attributes round-trip exactly") {
  const std::string p = temp_path("rt.h5");
  Eigen::MatrixXd m(3, 2);
  m << 1, 2, 3, 4, 5, 6.5;
  std::vector<double> v = {0.1, -2.0, 1e300};
  std::vector<std::int64_t> iv = {-1, 0, 1LL << 40};
  std::vector<std::string> sv = {"alpha", "", "gamma=3,seed=1"};
  {
    auto f = h5::File::create(p);
    auto g = f.child("a/b");
    g.write("m", m, {.compress = true});
    g.write("v", std::span<const double>(v));
    g.write("iv", std::span<const std::int64_t>(iv));
    g.write("sv", sv);
    g.attr("x", 2.5);
    g.attr("n", std::int64_t{7});
    g.attr("s", "text");
  }
  auto f = h5::File::open_read(p);
  auto g = f.open_group("a/b");
  CHECK(g.read_matrix("m") == m);
  CHECK(g.shape("m") == std::vector<std::int64_t>{3, 2});
  CHECK(g.read_doubles("v") == v);
  CHECK(g.read_int64s("iv") == iv);
  CHECK(g.read_strings("sv") == sv);
  CHECK(*g.attr_double("x") == 2.5);
  CHECK(*g.attr_int("n") == 7);
  CHECK(*g.attr_string("s") == "text");
  CHECK_FALSE(g.attr_string("missing").has_value());
  CHECK(f.exists("a/b/m"));
  CHECK_FALSE(f.exists("a/zz/m"));
  CHECK_THROWS_AS(g.read_matrix("nope"), IoError);
}

TEST_CASE("opening a missing or non-HDF5 file is an IoError") {
  CHECK_THROWS_AS(h5::File::open_read(temp_path("does-not-exist.h5")), IoError);
  const std::string p = temp_path("text.h5");
  { FILE* fp = std::fopen(p.c_str(), "w"); std::fputs("not hdf5\n", fp); std::fclose(fp); }
  CHECK_FALSE(h5::is_hdf5(p));
  CHECK_THROWS_AS(h5::File::open_read(p), IoError);
}

TEST_CASE("tables keep column order and types; mismatched rows are rejected") {
  io::Table t;
  io::Row r1;
  r1.set("job", "a").set("width", 64).set("margin", 0.25);
  io::Row r2;
  r2.set("job", "b").set("width", 70).set("margin", -0.5);
  t.append(r1);
  t.append(r2);
  CHECK(t.rows() == 2);
  CHECK(t.numbers("width") == std::vector<double>{64, 70});
  io::Row bad;
  bad.set("job", "c").set("width", "x").set("margin", 1.0);
  CHECK_THROWS_AS(t.append(bad), UserError);
  const std::string p = temp_path("table.h5");
  {
    auto f = h5::File::create(p);
    auto g = f.child("summary");
    t.write(g);
  }
  auto f = h5::File::open_read(p);
  auto back = io::Table::read(f.open_group("summary"));
  CHECK(back.names == t.names);
  CHECK(back.strings("job") == std::vector<std::string>{"a", "b"});
  CHECK(back.numbers("margin") == std::vector<double>{0.25, -0.5});
}

TEST_CASE("grids are indexed by sorted axis values with NaN for missing cells") {
  io::Table t;
  for (int w : {128, 64})
    for (int s : {0, 1}) {
      if (w == 128 && s == 1) continue;
      io::Row r;
      r.set("width", w).set("seed", s).set("min_margin", w * 10.0 + s);
      t.append(r);
    }
  const std::string p = temp_path("grid.h5");
  {
    auto f = h5::File::create(p);
    io::write_grid(f, t, {"width", "seed"}, {"min_margin"});
  }
  auto f = h5::File::open_read(p);
  auto g = f.open_group("grid");
  CHECK(g.read_doubles("width") == std::vector<double>{64, 128});
  auto a = g.read_doubles("min_margin");
  REQUIRE(a.size() == 4);
  CHECK(a[0] == 640);
  CHECK(a[1] == 641);
  CHECK(a[2] == 1280);
  CHECK(std::isnan(a[3]));
}

TEST_CASE("OutputFile leaves nothing under the final name unless committed") {
  const std::string p = temp_path("out.h5");
  fs::remove(p);
  io::RunContext ctx;
  ctx.tool = "test";
  {
    io::OutputFile of(p, ctx);
    of.root().attr("x", 1.0);
  }  // destroyed without commit (as when an exception unwinds)
  CHECK_FALSE(fs::exists(p));
  for (auto& e : fs::directory_iterator(fs::path(p).parent_path()))
    CHECK(e.path().filename().string().find("out.h5.tmp") == std::string::npos);
  {
    io::OutputFile of(p, ctx);
    of.commit();
  }
  CHECK(fs::exists(p));
  auto f = h5::File::open_read(p);
  CHECK(f.attr_string("tool") == std::optional<std::string>("test"));
  CHECK(f.exists("config"));
  CHECK_THROWS_AS(io::check_output_path(temp_path("no/such/dir/x.h5")), UserError);
}

TEST_CASE("groups with many string attributes copy between files (HDF5 1.10 dense-attribute crash)") {
  const std::string a = temp_path("many_attrs_src.h5"), b = temp_path("many_attrs_dst.h5");
  {
    auto f = h5::File::create(a);
    auto g = f.child("run");
    for (int i = 0; i < 20; ++i) g.attr("s" + std::to_string(i), std::string(40, static_cast<char>('a' + i)));
    for (int i = 0; i < 20; ++i) g.attr("x" + std::to_string(i), i * 1.5);
    std::vector<double> v = {1, 2, 3};
    g.write("v", std::span<const double>(v));
  }
  {
    auto src = h5::File::open_read(a);
    auto dst = h5::File::create(b);
    auto runs = dst.child("runs");
    src.copy_to("run", runs, "job0");
  }
  auto f = h5::File::open_read(b);
  auto g = f.open_group("runs/job0");
  CHECK(*g.attr_string("s19") == std::string(40, 't'));
  CHECK(*g.attr_double("x19") == 28.5);
  CHECK(g.read_doubles("v") == std::vector<double>{1, 2, 3});
}
