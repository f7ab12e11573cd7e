// Fact sets: generation (tied/untied, maps, spike §1.3 / §8.1.8), validation errors, HDF5 round
// trip and the checks on loaded key/value tables (missing file, not HDF5, NaN, zero row, shapes).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

#include "core/error.hpp"
#include "core/random_fill.hpp"
#include "core/rng.hpp"
#include "io/h5.hpp"
#include "mlp/factset.hpp"
#include "mlp/gated_mlp.hpp"
#include "mlp/model_io.hpp"

using namespace memcap;
using namespace memcap::mlp;

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("memcap_factset_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string error_of(const FactSetSpec& s) {
  try {
    make_factset(s);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

double max_abs_cos(const Eigen::MatrixXd& E) {
  const Eigen::MatrixXd g = E * E.transpose();
  return (g - Eigen::MatrixXd(g.diagonal().asDiagonal())).cwiseAbs().maxCoeff();
}

}  // namespace

TEST_CASE("generated fact sets: unit rows, maps, tied tables") {
  FactSetSpec s;
  s.dim = 16;
  s.facts = 50;
  s.seed = 3;
  const FactSet id = make_factset(s);
  CHECK(id.F() == 50);
  CHECK(id.P() == 50);
  CHECK(id.d() == 16);
  CHECK((id.keys.rowwise().norm().array() - 1).abs().maxCoeff() < 1e-14);
  CHECK((id.values.rowwise().norm().array() - 1).abs().maxCoeff() < 1e-14);
  for (int i = 0; i < 50; ++i) CHECK(id.map[i] == i);
  CHECK_FALSE(id.keys.isApprox(id.values));  // independent tables
  CHECK(id.targets() == id.values);

  s.tied = true;
  s.map = "permutation";
  const FactSet tied = make_factset(s);
  CHECK(tied.keys == tied.values);
  CHECK(tied.keys == id.keys);  // same key stream
  std::vector<int> seen(50, 0);
  for (int i = 0; i < 50; ++i) seen[tied.map[i]]++;
  for (int c : seen) CHECK(c == 1);
  for (int i = 0; i < 50; ++i) CHECK(tied.targets().row(i) == tied.values.row(tied.map[i]));

  s.tied = false;
  s.values = 80;  // F into a larger value table
  const FactSet big = make_factset(s);
  CHECK(big.P() == 80);
  CHECK_NOTHROW(big.validate());
}

TEST_CASE("fact-set spec validation errors") {
  FactSetSpec s;
  s.dim = 0;
  CHECK(error_of(s).find("--dim") != std::string::npos);
  s = {};
  s.facts = -3;
  CHECK(error_of(s).find("--facts") != std::string::npos);
  s = {};
  s.facts = 100;
  s.values = 50;
  CHECK(error_of(s).find("larger than the value table") != std::string::npos);
  s = {};
  s.map = "random";
  CHECK(error_of(s).find("--map") != std::string::npos);
  s = {};
  s.spike_beta = 2;
  CHECK(error_of(s).find("--spike-target") != std::string::npos);
  s = {};
  s.spike_beta = -1;
  s.spike_target = "keys";
  CHECK(error_of(s).find("--spike-beta") != std::string::npos);
  s = {};
  s.tied = true;
  s.spike_beta = 1;
  s.spike_target = "keys";
  CHECK(error_of(s).find("both") != std::string::npos);
  s = {};
  s.values = -1;
  CHECK(error_of(s).find("--values") != std::string::npos);
}

TEST_CASE("8.1.8: spike transform: beta=0 identity, unit rows, coherence grows with beta") {
  const Eigen::MatrixXd E = rng::sphere_rows(100, 20, 5, rng::kKeys);
  const Eigen::VectorXd u = spike_direction(20);
  CHECK(u.norm() == doctest::Approx(1.0));
  CHECK(u == spike_direction(20));  // fixed spike seed
  Eigen::MatrixXd same = E;
  spike_transform(same, u, 0.0);
  CHECK(same == E);
  double prev = max_abs_cos(E);
  for (double beta : {1.0, 4.0, 16.0}) {
    Eigen::MatrixXd t = E;
    spike_transform(t, u, beta);
    CHECK((t.rowwise().norm().array() - 1).abs().maxCoeff() < 1e-14);
    const double c = max_abs_cos(t);
    CHECK(c > prev);
    prev = c;
  }
  // Generated spiked tables use the same u for keys and values.
  FactSetSpec s;
  s.dim = 20;
  s.facts = 100;
  s.spike_beta = 4;
  s.spike_target = "keys";
  const FactSet fs = make_factset(s);
  Eigen::MatrixXd k = rng::sphere_rows(100, 20, 0, rng::kKeys);
  spike_transform(k, u, 4);
  CHECK((fs.keys - k).norm() < 1e-13);
  CHECK(fs.values == rng::sphere_rows(100, 20, 0, rng::kValues));
}

TEST_CASE("fact sets round-trip through HDF5") {
  TempDir tmp;
  FactSetSpec s;
  s.dim = 8;
  s.facts = 20;
  s.values = 30;
  s.map = "permutation";
  const FactSet fs = make_factset(s);
  {
    auto f = h5::File::create(tmp.file("fs.h5"));
    auto g = f.child("facts");
    write_factset(g, fs);
  }
  const auto f = h5::File::open_read(tmp.file("fs.h5"));
  const FactSet back = read_factset(f.open_group("facts"));
  CHECK(back.keys == fs.keys);
  CHECK(back.values == fs.values);
  CHECK(back.codes == fs.codes);
  CHECK(back.map == fs.map);
  CHECK(back.tied == fs.tied);
}

TEST_CASE("loaded tables: paired rows, sampling, and one clear error per defect") {
  TempDir tmp;
  const Eigen::MatrixXd x = 3.0 * rng::normal_matrix(40, 6, 1, rng::kUser);  // raw, not unit
  const Eigen::MatrixXd y = rng::normal_matrix(40, 6, 2, rng::kUser);
  {
    auto f = h5::File::create(tmp.file("xy.h5"));
    f.write("x", x);
    f.write("y", y);
    f.write("flat", std::span<const double>(x.data(), 10));
    Eigen::MatrixXd bad = x;
    bad(7, 2) = std::numeric_limits<double>::quiet_NaN();
    f.write("nan", bad);
    Eigen::MatrixXd zero = x;
    zero.row(11).setZero();
    f.write("zero", zero);
    Eigen::MatrixXd tiny = x;
    tiny.row(13) *= 1e-160;  // not zero, but its squared norm (~1e-320) is below the smallest normal double
    f.write("tiny", tiny);
    f.write("narrow", Eigen::MatrixXd(y.leftCols(5)));
  }
  FactSetSpec s;
  s.dim = 0;
  s.facts = 0;
  s.keys_file = tmp.file("xy.h5");
  s.values_file = tmp.file("xy.h5");
  const FactSet all = make_factset(s);  // defaults: keys <- x, values <- y, every row
  CHECK(all.keys == x);
  CHECK(all.values == y);  // not normalized
  CHECK(all.source == "file");
  s.facts = 25;
  const FactSet some = make_factset(s);
  CHECK(some.F() == 25);
  for (int i = 0; i < 25; ++i) {  // paired sampling: key row r goes with value row r
    Eigen::Index r = -1;
    for (Eigen::Index j = 0; j < 40; ++j)
      if (x.row(j) == some.keys.row(i)) r = j;
    REQUIRE(r >= 0);
    CHECK(some.values.row(i) == y.row(r));
  }

  auto msg = [&](const std::string& keys, const std::string& values, std::int64_t facts = 0) {
    FactSetSpec t = s;
    t.keys_file = keys;
    t.values_file = values;
    t.facts = facts;
    return error_of(t);
  };
  const std::string f = tmp.file("xy.h5");
  CHECK(msg(f, f, 41).find("larger than the value table") != std::string::npos);
  CHECK(msg(f + ":nan", f).find("row 7") != std::string::npos);
  CHECK(msg(f + ":zero", f).find("row 11 is all zeros") != std::string::npos);
  CHECK(msg(f + ":tiny", f).find("row 13 is too small to normalise") != std::string::npos);
  CHECK(msg(f + ":flat", f).find("2-D") != std::string::npos);
  CHECK(msg(f + ":missing", f).find("no dataset 'missing'") != std::string::npos);
  CHECK(msg(f, f + ":narrow").find("columns") != std::string::npos);
  CHECK_THROWS_AS(make_factset([&] { FactSetSpec t = s; t.keys_file = tmp.file("nope.h5"); return t; }()), IoError);
  {
    std::ofstream(tmp.file("text.h5")) << "not an hdf5 file\n";
  }
  try {
    FactSetSpec t = s;
    t.keys_file = tmp.file("text.h5");
    make_factset(t);
    FAIL("no error");
  } catch (const IoError& e) {
    CHECK(std::string(e.what()).find("not an HDF5 file") != std::string::npos);
  }
  FactSetSpec d_mismatch = s;
  d_mismatch.dim = 7;
  CHECK(error_of(d_mismatch).find("--dim 7") != std::string::npos);
  FactSetSpec no_values = s;
  no_values.values_file.clear();
  CHECK(error_of(no_values).find("--values-file") != std::string::npos);
}

TEST_CASE("model files: a params attribute the weights cannot have is refused, a recorded one is kept") {
  TempDir tmp;
  GatedMLP mlp;
  const std::int64_t m = 5, d = 3;
  mlp.A = rng::normal_matrix(m, d, 1, rng::kUser);
  mlp.G = rng::normal_matrix(m, d, 2, rng::kUser);
  mlp.B = rng::normal_matrix(d, m, 3, rng::kUser);
  mlp.method = "hebbian";
  auto round_trip = [&](std::int64_t params) {
    mlp.param_count = params;
    const std::string path = tmp.file("m" + std::to_string(params) + ".h5");
    {
      auto f = h5::File::create(path);
      auto g = f.child("mlp");
      write_mlp(g, mlp, 1);
    }
    auto f = h5::File::open_read(path);
    return read_mlp(f.open_group("mlp"));
  };
  CHECK(round_trip(3 * m * d).param_count == 45);
  CHECK(round_trip(3 * m * d + 2 * m + d).param_count == 58);
  CHECK(round_trip(0).param_count == 0);  // not recorded
  try {
    round_trip(7);
    FAIL("params = 7 was accepted");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("params = 7, which weights of m = 5, d = 3 cannot have") != std::string::npos);
  }
}
