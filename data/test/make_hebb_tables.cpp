// One-off generator of the tiny HDF5 key/value tables under data/test/ used by
// tests/cli/test_hebb_errors.sh (not built by CMake; the .h5 files are committed). Rebuild with:
//   g++ -std=c++20 -O1 -DEIGEN_USE_BLAS -Isrc -Ibuild-X/generated -I.deps/include -I/usr/include/eigen3 \
//       -I/usr/include/hdf5/serial data/test/make_hebb_tables.cpp build-X/libmemcap_base.a \
//       -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5_hl -lhdf5 -lfmt -lopenblas -fopenmp -o /tmp/mk && /tmp/mk data/test
#include <Eigen/Dense>
#include <limits>
#include <string>

#include "io/h5.hpp"

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "data/test";
  Eigen::MatrixXd x(8, 4), y(8, 4);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) {
      x(i, j) = 0.25 * (i + 1) - 0.5 * j + 0.125 * ((i * j) % 3);  // arbitrary, no zero row
      y(i, j) = 1.0 + 0.5 * i - 0.25 * j * j;
    }
  {
    auto f = memcap::h5::File::create(dir + "/hebb_tables_ok.h5");
    f.write("x", x);
    f.write("y", y);
  }
  {
    Eigen::MatrixXd bad = x;
    bad(2, 1) = std::numeric_limits<double>::quiet_NaN();
    auto f = memcap::h5::File::create(dir + "/hebb_keys_nan.h5");
    f.write("keys", bad);
  }
  {
    Eigen::MatrixXd bad = x;
    bad.row(5).setZero();
    auto f = memcap::h5::File::create(dir + "/hebb_keys_zero_row.h5");
    f.write("keys", bad);
  }
  return 0;
}
