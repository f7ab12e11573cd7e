// hebb: fact-storing MLPs (Hebbian constructions, margins, theory, sweeps). Subcommands live in
// one file each in this folder and register themselves (src/cli/app.hpp).
#include "cli/app.hpp"

int main(int argc, char** argv) {
  return memcap::cli::run_tool("hebb",
                               "hebb: build fact-storing MLPs in closed form, measure their decoding margins, "
                               "and sweep them against the theory of 'MLPs are Hebbians'",
                               argc, argv);
}
