// Main for gpu-labelled tests: exits 77 (ctest: skipped) with a message when no CUDA GPU is usable.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "core/device.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (!memcap::cuda_available(&why)) {
    std::fprintf(stderr, "SKIP: no usable CUDA GPU (%s)\n", why.c_str());
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
