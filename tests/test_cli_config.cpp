// CLI plumbing: --print-config writes TOML that --config reads back, command-line flags override
// the file, bad flags and user errors map to the documented exit codes.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/app.hpp"
#include "cli/toml_config.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/text.hpp"

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

namespace {
// Writes TEXT to a fresh file in the temp folder and returns its path.
std::string toml_file(const std::string& name, const std::string& text) {
  auto dir = fs::temp_directory_path() / ("memcap_test_cli_toml_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / name) << text;
  return (dir / name).string();
}
}  // namespace

TEST_CASE("--config is strict: unknown keys and sections, bad TOML, wrong types and folders are errors") {
  seen = {};
  CHECK(run({"run", "--config", toml_file("ok.toml", "dim = 12\n[run]\nbeta = 1.5\n[other]\nx = 1\n")}) == kExitUsage);
  CHECK(seen.calls == 0);  // [other] is not a subcommand of testtool
  CHECK(run({"run", "--config", toml_file("sec.toml", "dim = 12\n[run]\nbeta = 1.5\n")}) == 0);
  CHECK(seen.dim == 12);
  CHECK(seen.beta == 1.5);
  CHECK(run({"run", "--config", toml_file("key.toml", "widthz = [1, 2]\n")}) == kExitUsage);
  CHECK(run({"run", "--config", toml_file("trunc.toml", "widths = [1,\n")}) == kExitUsage);
  CHECK(run({"run", "--config", toml_file("type.toml", "dim = \"many\"\n")}) == kExitUsage);
  CHECK(run({"run", "--config", toml_file("arr.toml", "dim = [1, 2]\n")}) == kExitUsage);
  CHECK(run({"run", "--config", toml_file("flag.toml", "fast = \"yes\"\n")}) == kExitUsage);
  CHECK(run({"run", "--config", toml_file("dup.toml", "dim = 1\ndim = 2\n")}) == kExitUsage);
  CHECK(run({"run", "--config", toml_file("flagok.toml", "fast = true\n")}) == 0);
  CHECK(seen.fast);
  CHECK(run({"run", "--config", fs::temp_directory_path().string()}) == kExitIo);
  CHECK(run({"run", "--config", ""}) == kExitUsage);
}

TEST_CASE("read_toml_config names the file and line; config_option checks the key") {
  const std::string p = toml_file("lines.toml", "# comment\ndim = 3\nwidths = [4, 5]\n");
  const auto entries = cli::read_toml_config(p, "run");
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].key == "dim");
  CHECK(entries[0].line == 2);
  CHECK(entries[1].values == std::vector<std::string>{"4", "5"});
  try {
    cli::read_toml_config(toml_file("bad.toml", "a = 1\n[zzz]\nb = 2\n"), "run");
    FAIL("no error");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("bad.toml:2") != std::string::npos);
    CHECK(std::string(e.what()).find("[zzz]") != std::string::npos);
  }
}

TEST_CASE("--seed is a 64-bit unsigned integer, nothing else") {
  CHECK(run({"run", "--seed", "18446744073709551615"}) == 0);
  CHECK(run({"run", "--seed", "-1"}) == kExitUsage);
  CHECK(run({"run", "--seed", "18446744073709551616"}) == kExitUsage);
  CHECK(run({"run", "--seed", "1e3"}) == kExitUsage);
}

TEST_CASE("an unknown subcommand is a usage error") {
  CHECK(run({"frobnicate"}) == kExitUsage);
  CHECK(run({"run", "--quiet", "--dim", "5"}) == 0);
  CHECK(seen.dim == 5);
}

TEST_CASE("split_list: pieces in order, an empty piece is a usage error naming the flag") {
  using memcap::split_list;
  CHECK(split_list("", ',', "--x").empty());
  CHECK(split_list("64", ',', "--x") == std::vector<std::string>{"64"});
  CHECK(split_list("64:4,128:8", ',', "--x") == std::vector<std::string>{"64:4", "128:8"});
  for (const char* bad : {",", "64,", ",64", "64,,128"}) {
    CAPTURE(bad);
    try {
      split_list(bad, ',', "--widths");
      FAIL("accepted an empty piece");
    } catch (const memcap::UserError& e) {
      CHECK(e.exit_code() == memcap::kExitUsage);
      CHECK(std::string(e.what()).find("--widths: empty item in the list") != std::string::npos);
    }
  }
}
