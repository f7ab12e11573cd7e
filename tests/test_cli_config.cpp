// CLI plumbing: --print-config writes TOML that --config reads back, command-line flags override
// the file, bad flags and user errors map to the documented exit codes.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/app.hpp"
#include "core/device.hpp"
#include "core/error.hpp"

using namespace memcap;
namespace fs = std::filesystem;

namespace {
struct Seen {
  int dim = 0;
  std::vector<int> widths;
  double beta = 0;
  bool fast = false;
  std::string label;
  int calls = 0;
} seen;

cli::Register reg("testtool", 1, [](CLI::App& tool) {
  struct Opts {
    cli::CommonOptions common;
    int dim = 64;
    std::vector<int> widths{10, 20};
    double beta = 0.5;
    bool fast = false;
    std::string label = "a b";
  };
  auto o = std::make_shared<Opts>();
  auto* sub = tool.add_subcommand("run", "test subcommand");
  cli::add_common(sub, o->common);
  sub->add_option("--dim", o->dim)->capture_default_str();
  sub->add_option("--widths", o->widths)->capture_default_str();
  sub->add_option("--beta", o->beta)->capture_default_str();
  sub->add_option("--label", o->label)->capture_default_str();
  sub->add_flag("--fast", o->fast);
  sub->callback([sub, o] {
    auto p = cli::prepare(sub, o->common);
    if (p.done) return;
    if (o->dim <= 0) throw UserError("--dim must be positive");
    seen = {o->dim, o->widths, o->beta, o->fast, o->label, seen.calls + 1};
  });
});

int run(std::vector<std::string> args) {
  args.insert(args.begin(), "testtool");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return cli::run_tool("testtool", "test", static_cast<int>(argv.size()), argv.data());
}
}  // namespace

TEST_CASE("--print-config round-trips through --config, and flags override the file") {
  auto dir = fs::temp_directory_path() / ("memcap_test_cli_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string cfg = (dir / "c.toml").string();
  CHECK(run({"run", "--dim", "32", "--widths", "5", "6", "7", "--fast", "--label", "x \"y\"", "--print-config", cfg}) == 0);
  CHECK(seen.calls == 0);  // printing the config does not run the work
  CHECK(run({"run", "--config", cfg}) == 0);
  CHECK(seen.dim == 32);
  CHECK(seen.widths == std::vector<int>{5, 6, 7});
  CHECK(seen.fast);
  CHECK(seen.label == "x \"y\"");
  CHECK(seen.beta == 0.5);
  CHECK(run({"run", "--config", cfg, "--dim", "8", "--widths", "1"}) == 0);
  CHECK(seen.dim == 8);
  CHECK(seen.widths == std::vector<int>{1});
  {
    std::ofstream f(dir / "preset.toml");
    f << "# a preset\ndim = 16\nwidths = [3, 4]\nbeta = 2.5\n";
  }
  CHECK(run({"run", "--config", (dir / "preset.toml").string()}) == 0);
  CHECK(seen.dim == 16);
  CHECK(seen.widths == std::vector<int>{3, 4});
  CHECK(seen.beta == 2.5);
  CHECK_FALSE(seen.fast);
}

TEST_CASE("errors map to exit codes") {
  CHECK(run({"run", "--dim", "0"}) == kExitUsage);
  CHECK(run({"run", "--dim", "abc"}) == kExitUsage);
  CHECK(run({"run", "--no-such-flag"}) == kExitUsage);
  CHECK(run({"run", "--config", "/nonexistent/c.toml"}) == kExitIo);
  CHECK(run({"run", "--device", "gpu"}) == kExitUsage);
  if (!cuda_available()) CHECK(run({"run", "--device", "cuda"}) == kExitDevice);
  CHECK(run({}) == kExitUsage);
}
