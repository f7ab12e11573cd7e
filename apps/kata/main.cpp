// kata: kernelized linear attention with symmetric-cone feature maps (dictionaries, bounds,
// pSNR, capacity, GPU kernels). Subcommands live in one file each and register themselves.
#include "cli/app.hpp"

int main(int argc, char** argv) {
  return memcap::cli::run_tool("kata",
                               "kata: symmetric-cone feature maps for linear attention: dictionaries, packing "
                               "bounds, pSNR ladders, associative-recall capacity and CUDA kernels",
                               argc, argv);
}
