// Shared CLI plumbing (see app.hpp): registry, common flags, config round-trip, exit codes.
#include "cli/app.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <cstdio>
#include <fstream>
#include <new>
#include <vector>

#include "core/device.hpp"
#include "core/error.hpp"
#include "core/threads.hpp"
#include "core/version.hpp"

namespace memcap::cli {
namespace {

struct Entry {
  std::string tool;
  int order;
  std::function<void(CLI::App&)> setup;
};
std::vector<Entry>& registry() {
  static std::vector<Entry> r;
  return r;
}
int g_argc = 0;
char** g_argv = nullptr;

const CLI::App* active_leaf(const CLI::App* app) {
  for (const CLI::App* s : app->get_subcommands())
    if (s->parsed()) return active_leaf(s);
  return app;
}

bool looks_numeric(const std::string& v) {
  if (v.empty()) return false;
  char* end = nullptr;
  std::strtod(v.c_str(), &end);
  return end && *end == '\0';
}

std::string toml_value(const std::string& v) {
  if (looks_numeric(v) || v == "true" || v == "false") return v;
  std::string q = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

// The resolved options of `sub` as TOML lines that --config reads back.
std::string config_text(const CLI::App* sub) {
  std::string text = fmt::format("# {} {} options (read back with --config FILE)\n",
                                 sub->get_parent() ? sub->get_parent()->get_name() : "", sub->get_name());
  for (const CLI::Option* opt : sub->get_options()) {
    if (opt->get_lnames().empty() || !opt->get_configurable()) continue;
    const std::string name = opt->get_lnames()[0];
    if (name == "help" || name == "help-all") continue;
    if (opt->get_type_size() == 0) {
      text += fmt::format("{} = {}\n", name, opt->count() > 0 ? "true" : "false");
      continue;
    }
    std::vector<std::string> vals = opt->count() > 0 ? opt->results() : std::vector<std::string>{};
    if (vals.empty()) {
      std::string d = opt->get_default_str();
      if (d.empty()) continue;
      vals.push_back(d);
    }
    if (opt->get_items_expected_max() > 1) {
      std::string arr;
      for (size_t i = 0; i < vals.size(); ++i) arr += (i ? ", " : "") + toml_value(vals[i]);
      text += fmt::format("{} = [{}]\n", name, arr);
    } else {
      text += fmt::format("{} = {}\n", name, toml_value(vals.back()));
    }
  }
  return text;
}

// --config FILE: read the TOML items and append them as flags for every option the command line
// does not set itself (so flags override the file). Sections other than the subcommand's are ignored.
std::vector<std::string> expand_config(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  std::string path;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) {
      path = args[++i];
    } else if (args[i].rfind("--config=", 0) == 0) {
      path = args[i].substr(9);
    } else {
      out.push_back(args[i]);
    }
  }
  if (path.empty()) return args;
  std::set<std::string> given;
  std::string subcommand;
  for (size_t i = 1; i < out.size(); ++i) {
    const std::string& a = out[i];
    if (a.rfind("--", 0) == 0) given.insert(a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2));
    else if (subcommand.empty() && a[0] != '-') subcommand = a;
  }
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    throw IoError(fmt::format("cannot read config file '{}': {}", path, e.what()));
  }
  for (auto& it : items) {
    if (it.name == "++" || it.name == "--") continue;
    if (!it.parents.empty() && !(it.parents.size() == 1 && it.parents[0] == subcommand)) continue;
    if (given.count(it.name)) continue;
    if (it.inputs.size() == 1 && (it.inputs[0] == "true" || it.inputs[0] == "false")) {
      if (it.inputs[0] == "true") out.push_back("--" + it.name);
      continue;
    }
    std::vector<std::string> vals;
    for (auto& v : it.inputs)
      if (!v.empty()) vals.push_back(v);
    if (vals.empty()) continue;
    out.push_back("--" + it.name);
    for (auto& v : vals) out.push_back(v);
  }
  return out;
}

}  // namespace

Register::Register(const char* tool, int order, std::function<void(CLI::App&)> setup) {
  registry().push_back({tool, order, std::move(setup)});
}

int saved_argc() { return g_argc; }
char** saved_argv() { return g_argv; }

void add_common(CLI::App* sub, CommonOptions& o, const std::string& default_out) {
  if (!default_out.empty() && o.out.empty()) o.out = default_out;
  sub->add_option("--seed", o.seed, "Base random seed; every random draw is a pure function of (seed, stream, index)")
      ->capture_default_str();
  auto* out = sub->add_option("--out,-o", o.out, "Result file (HDF5). Written to a temporary name and renamed when complete");
  if (!default_out.empty()) out->capture_default_str();
  sub->add_option("--device", o.device, "Compute path: auto (GPU when usable), cpu, or cuda (error if no GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub->add_option("--threads", o.threads, "CPU threads for OpenMP and OpenBLAS (0 = library default)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--config", o.config,
                  "Read options from a TOML file ('name = value' lines, arrays as [a, b]; e.g. a preset or a file "
                  "written by --print-config); flags given on the command line override it")
      ->configurable(false);
  sub->add_option("--print-config", o.print_config,
                  "Write the resolved options as a TOML file that --config reads back ('-' = stdout), then exit")
      ->configurable(false);
}

void add_sweep(CLI::App* sub, sweep::Options& o) {
  sub->add_flag("--dry-run", o.dry_run, "Print the expanded grid, job count, shard split and output path, then exit");
  sub->add_option("--shard", o.shard,
                  "Run only shard i of n (i/n; jobs with index % n == i). Default: SLURM_ARRAY_TASK_ID/"
                  "SLURM_ARRAY_TASK_COUNT when set. Each shard writes OUT with .shard<i>of<n> before the extension");
  sub->add_flag("--resume", o.resume, "Continue an interrupted run from OUT.partial/, skipping finished jobs");
  sub->add_option("--progress", o.progress, "Progress on stderr: auto (bar on a terminal, else a line every 5 s), bar, lines, none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
}

nlohmann::json options_json(const CLI::App* sub) {
  nlohmann::json j = nlohmann::json::object();
  for (const CLI::Option* opt : sub->get_options()) {
    std::string name = opt->get_lnames().empty() ? opt->get_name() : opt->get_lnames()[0];
    if (name.empty() || name == "help") continue;
    std::vector<std::string> vals = opt->count() > 0 ? opt->results() : std::vector<std::string>{};
    if (vals.empty()) {
      std::string d = opt->get_default_str();
      if (!d.empty()) vals.push_back(d);
    }
    if (opt->get_type_size() == 0) {  // a flag
      j[name] = opt->count() > 0;
    } else if (vals.size() == 1) {
      j[name] = vals[0];
    } else {
      j[name] = vals;
    }
  }
  return j;
}

Prepared prepare(CLI::App* sub, const CommonOptions& o) {
  Prepared p;
  if (!o.print_config.empty()) {
    std::string text = config_text(sub);
    if (o.print_config == "-") {
      std::fputs(text.c_str(), stdout);
    } else {
      std::ofstream f(o.print_config);
      if (!f) throw IoError(fmt::format("cannot write config file '{}'", o.print_config));
      f << text;
    }
    p.done = true;
    return p;
  }
  set_threads(o.threads);
  std::string tool = sub->get_parent() ? sub->get_parent()->get_name() : "memcap";
  p.ctx = io::make_context(tool, sub->get_name(), g_argc, g_argv);
  p.ctx.device = resolve_device(o.device);
  if (o.device == "auto") std::fprintf(stderr, "%s %s: device %s\n", tool.c_str(), sub->get_name().c_str(), p.ctx.device.reason.c_str());
  p.ctx.threads = o.threads;
  p.ctx.config = options_json(sub);
  return p;
}

int run_tool(const char* tool, const char* description, int argc, char** argv) {
  g_argc = argc;
  g_argv = argv;
  CLI::App app{description, tool};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  app.set_version_flag("--version", fmt::format("{} (memcap {}, git {}{})", tool, build::kVersion, build::kGitHash,
                                                build::kGitDirty ? "-dirty" : ""));
  app.footer(fmt::format("Run '{} <subcommand> --help' for a subcommand's manual. Exit codes: 0 ok, 1 internal error, "
                         "2 bad usage or input, 3 file error, 4 numerical failure, 5 GPU/device error.", tool));
  auto& reg = registry();
  std::stable_sort(reg.begin(), reg.end(), [](const Entry& a, const Entry& b) { return a.order < b.order; });
  for (auto& e : reg)
    if (e.tool == tool) e.setup(app);
  try {
    std::vector<std::string> args(argv, argv + argc);
    args = expand_config(args);
    std::vector<std::string> rev(args.rbegin(), args.rend() - 1);  // CLI11 takes reversed args without argv[0]
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    if (argc <= 1) {  // bare tool name: show what it can do
      std::fputs(app.help().c_str(), stderr);
      return kExitUsage;
    }
    const CLI::App* leaf = active_leaf(&app);
    std::string where = leaf == &app ? tool : fmt::format("{} {}", tool, leaf->get_name());
    std::fprintf(stderr, "%s: error: %s (see '%s --help')\n", where.c_str(), e.what(), where.c_str());
    return kExitUsage;
  } catch (const UserError& e) {
    const CLI::App* leaf = active_leaf(&app);
    std::fprintf(stderr, "%s: error: %s\n", leaf == &app ? tool : fmt::format("{} {}", tool, leaf->get_name()).c_str(), e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory; reduce the problem size (or use a tile/shard option)\n", tool);
    return kExitNumeric;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return kExitInternal;
  }
  return kExitOk;
}

}  // namespace memcap::cli
