// HDF5 layer: round trips of matrices, vectors, strings, attributes, tables, grids with scales,
// the crash-safe OutputFile (no file under the final name unless committed), and hardening:
// the checksummed format, bounded and checked reads of corrupt files, output-path rules.
#include <doctest/doctest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>

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

// ---- hardening: file format, bounded reads, corrupt files, output paths ----
namespace {
std::vector<char> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const std::string& p, const std::vector<char>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}
// Offset of the first global heap collection ("GCOL") in a file image.
std::size_t find_gcol(const std::vector<char>& b) {
  const std::string img(b.begin(), b.end());
  return img.find("GCOL");
}
}  // namespace

TEST_CASE("created files use the checksummed HDF5 1.10 format and keep attributes compact") {
  const std::string p = temp_path("format.h5");
  {
    auto f = h5::File::create(p);
    for (int i = 0; i < 30; ++i) f.attr(fmt::format("a{}", i), fmt::format("value {}", i));
  }
  const auto b = slurp(p);
  REQUIRE(b.size() > 9);
  CHECK(std::string(b.data(), 8) == "\x89HDF\r\n\x1a\n");
  CHECK(static_cast<int>(b[8]) == 3);  // superblock version 3: checksummed, 1.10 object headers
  auto f = h5::File::open_read(p);
  CHECK(*f.attr_string("a29") == "value 29");
}

TEST_CASE("attribute readers refuse arrays and the wrong kind instead of overflowing") {
  const std::string p = temp_path("attr_kinds.h5");
  {
    auto f = h5::File::create(p);
    const std::vector<double> three = {1, 2, 3};
    f.attr("three", std::span<const double>(three));
    f.attr("x", 2.0);
    f.attr("s", "text");
  }
  auto f = h5::File::open_read(p);
  CHECK_THROWS_AS(f.attr_double("three"), IoError);  // 3 values into one double: was a stack overflow
  CHECK_THROWS_AS(f.attr_int("three"), IoError);
  CHECK_THROWS_AS(f.attr_string("x"), IoError);
  CHECK_THROWS_AS(f.attr_double("s"), IoError);
  CHECK(*f.attr_double("x") == 2.0);
  CHECK_FALSE(f.attr_double("absent").has_value());
}

TEST_CASE("many and long variable-length strings are decoded from the file bytes") {
  const std::string p = temp_path("strings.h5");
  std::vector<std::string> v;
  for (int i = 0; i < 500; ++i) v.push_back(std::string(static_cast<std::size_t>(i % 37), 'a' + i % 26) + "é" + std::to_string(i));
  v.push_back(std::string(10000, 'z'));  // needs a collection larger than 4096 bytes
  v.push_back("");
  {
    auto f = h5::File::create(p);
    f.write("v", v);
    f.attr("long", std::string(9000, 'q'));
  }
  auto f = h5::File::open_read(p);
  CHECK(f.read_strings("v") == v);
  CHECK(f.attr_string("long")->size() == 9000);
}

TEST_CASE("a corrupt global heap is an IoError, not a hang or a crash") {
  const std::string p = temp_path("heap_ok.h5"), q = temp_path("heap_bad.h5");
  {
    auto f = h5::File::create(p);
    f.attr("s", "some text");
    f.write("v", std::vector<std::string>{"alpha", "beta"});
  }
  auto b = slurp(p);
  const std::size_t g = find_gcol(b);
  REQUIRE(g != std::string::npos);
  // First object: index (2 bytes), refcount (2), reserved (4), size (8) right after the 16-byte header.
  SUBCASE("an object size beyond the collection") {
    b[g + 16 + 8 + 6] = static_cast<char>(0x7f);
  }
  SUBCASE("a zero-size free-space object (HDF5 1.10 loops forever on it)") {
    const std::string img(b.begin(), b.end());
    // Walk to the free-space object (index 0) and zero its size.
    std::size_t at = g + 16;
    const std::uint64_t csize = *reinterpret_cast<const std::uint64_t*>(img.data() + g + 8);
    while (at + 16 <= g + csize) {
      const unsigned idx = static_cast<unsigned char>(img[at]) | (static_cast<unsigned char>(img[at + 1]) << 8);
      const std::uint64_t sz = *reinterpret_cast<const std::uint64_t*>(img.data() + at + 8);
      if (idx == 0) break;
      at += 16 + (sz + 7) / 8 * 8;
    }
    REQUIRE(at + 16 <= g + csize);
    for (int k = 0; k < 8; ++k) b[at + 8 + k] = 0;
  }
  spit(q, b);
  auto f = h5::File::open_read(q);
  CHECK_THROWS_AS(f.attr_string("s"), IoError);
  CHECK_THROWS_AS(f.read_strings("v"), IoError);
}

TEST_CASE("a dataset whose shape claims more than the file holds is refused before allocating") {
  const std::string p = temp_path("huge_claim.h5");
  // A dataset created but never written (no storage): its shape is not limited by written bytes.
  hid_t fid = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t dims[2] = {hsize_t{1} << 20, hsize_t{1} << 20};
  hid_t space = H5Screate_simple(2, dims, nullptr);
  hid_t ds = H5Dcreate2(fid, "big", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(ds);
  H5Sclose(space);
  H5Fclose(fid);
  auto f = h5::File::open_read(p);
  CHECK(f.shape("big") == std::vector<std::int64_t>{1 << 20, 1 << 20});
  CHECK_THROWS_AS(f.read_doubles("big"), IoError);  // 8 TiB
}

TEST_CASE("files in HDF5's default (1.0) format still read, through the checking driver") {
  const std::string p = temp_path("old_format.h5");
  hid_t fid = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t n = 3;
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t ds = H5Dcreate2(fid, "x", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const double x[3] = {1.5, -2, 3};
  H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
  hid_t st = H5Tcopy(H5T_C_S1);
  H5Tset_size(st, H5T_VARIABLE);
  hid_t scalar = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(fid, "note", st, scalar, H5P_DEFAULT, H5P_DEFAULT);
  const char* text = "written by plain HDF5";
  H5Awrite(a, st, &text);
  H5Aclose(a);
  H5Sclose(scalar);
  H5Tclose(st);
  H5Dclose(ds);
  H5Sclose(space);
  H5Fclose(fid);
  auto f = h5::File::open_read(p);
  CHECK(f.read_doubles("x") == std::vector<double>{1.5, -2, 3});
  CHECK(*f.attr_string("note") == "written by plain HDF5");
}

TEST_CASE("a created file that fails (exception or file-size limit) is deleted") {
  const std::string p = temp_path("unwound.h5");
  try {
    auto f = h5::File::create(p);
    f.attr("x", 1.0);
    throw std::runtime_error("job failed");
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(fs::exists(p));
  // A write beyond RLIMIT_FSIZE fails like a full disk (EFBIG): IoError, and no file is left.
  const std::string q = temp_path("too_big.h5");
  struct rlimit old{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 64 * 1024;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  std::vector<double> big(100000, 1.0);
  bool threw = false;
  try {
    auto f = h5::File::create(q);
    f.write("big", std::span<const double>(big));
    f.flush();
    f.close();
  } catch (const IoError& e) {
    threw = true;
    CHECK(std::string(e.what()).find("File too large") != std::string::npos);
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  CHECK(threw);
  CHECK_FALSE(fs::exists(q));
}

TEST_CASE("tables whose columns differ in length are an IoError") {
  const std::string p = temp_path("ragged.h5");
  {
    auto f = h5::File::create(p);
    auto g = f.child("summary");
    const std::vector<double> a = {1, 2, 3}, b = {1, 2};
    g.write("a", std::span<const double>(a));
    g.write("b", std::span<const double>(b));
    g.attr("columns", "a,b");
  }
  auto f = h5::File::open_read(p);
  CHECK_THROWS_AS(io::Table::read(f.open_group("summary")), IoError);
}

TEST_CASE("output paths: devices, inputs, existing results, long names, stale temporaries") {
  CHECK_THROWS_AS(io::check_output_path("/dev/null"), IoError);
  const std::string in = temp_path("input.h5");
  { auto f = h5::File::create(in); }
  { auto f = h5::File::open_read(in); }  // now an input of this process
  CHECK_THROWS_AS(io::check_output_path(in), IoError);
  const std::string out = temp_path("result.h5");
  { auto f = h5::File::create(out); }
  CHECK_NOTHROW(io::check_output_path(out));  // not the run's --out: may exist (e.g. a checkpoint)
  io::set_out_policy(out, false);
  CHECK_THROWS_AS(io::check_output_path(out), IoError);
  const std::string shard = temp_path("result.shard1of4.h5");
  { auto f = h5::File::create(shard); }
  CHECK_THROWS_AS(io::check_output_path(shard), IoError);
  io::set_out_policy(out, true);
  CHECK_NOTHROW(io::check_output_path(out));
  io::set_out_policy("", false);
  CHECK_THROWS_AS(io::check_output_path(temp_path(std::string(300, 'n') + ".h5")), IoError);
  CHECK_THROWS_AS(io::check_output_path(temp_path("no/such/dir/x.h5")), IoError);

  // Temporaries: a dead process's are removed, a live one's are kept.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  const std::string dead = io::temporary_name(out);
  const std::string stale = dead.substr(0, dead.rfind('-') + 1) + std::to_string(child);
  const std::string live = dead.substr(0, dead.rfind('-') + 1) + std::to_string(getppid());
  { std::ofstream(stale) << "x"; }
  { std::ofstream(live) << "x"; }
  CHECK(io::remove_stale_temporaries(out) == 1);
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(live));
  fs::remove(live);
}

TEST_CASE("is_hdf5 does not block on a FIFO and says when a file cannot be read") {
  const std::string fifo = temp_path("pipe.h5");
  fs::remove(fifo);
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_FALSE(h5::is_hdf5(fifo));
  CHECK_THROWS_AS(h5::File::open_read(fifo), IoError);
  CHECK_FALSE(h5::is_hdf5(temp_path("")));  // a directory
  if (geteuid() != 0) {
    const std::string locked = temp_path("locked.h5");
    { auto f = h5::File::create(locked); }
    chmod(locked.c_str(), 0);
    CHECK_THROWS_WITH_AS(h5::is_hdf5(locked), doctest::Contains("permission denied"), IoError);
    chmod(locked.c_str(), 0600);
  }
}

TEST_CASE("groups keep their links and attributes in the object header however many there are") {
  const std::string p = temp_path("compact.h5");
  {
    auto f = h5::File::create(p);
    auto g = f.child("a/b");
    for (int i = 0; i < 40; ++i) g.child(fmt::format("g{}", i));
    for (int i = 0; i < 40; ++i) f.child(fmt::format("r{}", i));
  }
  auto f = h5::File::open_read(p);
  for (const char* path : {"/", "/a", "/a/b"}) {
    H5G_info_t info;
    REQUIRE(H5Gget_info_by_name(f.id(), path, &info, H5P_DEFAULT) >= 0);
    CHECK(info.storage_type == H5G_STORAGE_TYPE_COMPACT);
  }
  CHECK(f.open_group("a/b").list().size() == 40);
}
