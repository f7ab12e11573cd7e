// ramnet: the restricted RAM-Net address-overlap memory (circular codebooks, product softmax, Top-K,
// gated sparse update): kernel and bounds, attention comparisons, recall capacity, CAPE/RoPE, adapters.
// Subcommands live in one file each and register themselves.
#include "cli/app.hpp"

int main(int argc, char** argv) {
  return memcap::cli::run_tool("ramnet",
                               "ramnet: address-overlap memories of RAM-Net (spec ramnet.md): the kernel κ_A and "
                               "its bounds, Top-K, GSU memories, attention against a softmax teacher, recall capacity",
                               argc, argv);
}
