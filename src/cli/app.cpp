// Shared CLI plumbing (see app.hpp): registry, common flags, config round-trip, exit codes.
#include "cli/app.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <vector>

#include "cli/toml_config.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
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
bool g_verbosity_quiet = false;
bool g_verbosity_verbose = false;

const CLI::App* active_leaf(const CLI::App* app) {
  for (const CLI::App* s : app->get_subcommands())
    if (s->parsed()) return active_leaf(s);
  return app;
}

// The names below the tool down to `app`: "train", or "ssfr train" for a nested subcommand.
std::string command_path(const CLI::App* app) {
  std::string path;
  for (const CLI::App* a = app; a && a->get_parent(); a = a->get_parent())
    path = path.empty() ? a->get_name() : a->get_name() + " " + path;
  return path;
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
    if (opt->get_expected_max() == 0) {
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

// Where each option set by --config came from ("FILE:LINE: key 'K'"), to name it in parse errors.
std::vector<std::pair<std::string, std::string>> g_config_origin;

// --config FILE: read the TOML file (cli/toml_config) and append its items as flags for every option
// the command line does not set itself (so flags override the file). Keys and [sections] are checked
// against the subcommand: an unknown one is an error naming the file, line and key.
std::vector<std::string> expand_config(CLI::App& app, const std::vector<std::string>& args) {
  g_config_origin.clear();
  std::vector<std::string> out;
  std::string path;
  int config_count = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0 && args[i] == "--config") {
      if (i + 1 >= args.size()) throw UserError("--config needs a TOML file name");
      path = args[++i];
      ++config_count;
    } else if (i > 0 && args[i].rfind("--config=", 0) == 0) {
      path = args[i].substr(9);
      ++config_count;
    } else {
      out.push_back(args[i]);
    }
  }
  if (config_count == 0) return args;
  if (config_count > 1) throw UserError("--config given more than once; give one TOML file");
  if (path.empty()) throw UserError("--config needs a TOML file name (got an empty string)");
  CLI::App* sub = nullptr;
  size_t sub_at = 0;
  for (size_t i = 1; i < out.size() && !sub; ++i)
    if (!out[i].empty() && out[i][0] != '-')
      for (CLI::App* s : app.get_subcommands(std::function<bool(CLI::App*)>()))
        if (s->check_name(out[i])) {
          sub = s;
          sub_at = i;
        }
  if (!sub) return out;  // no subcommand: the parser reports it
  // A nested subcommand (hebb ssfr train): descend while the next word names a child.
  for (size_t i = sub_at + 1; i < out.size() && !sub->get_subcommands(std::function<bool(CLI::App*)>()).empty(); ++i) {
    if (out[i].empty() || out[i][0] == '-') continue;
    for (CLI::App* s : sub->get_subcommands(std::function<bool(CLI::App*)>()))
      if (s->check_name(out[i])) {
        sub = s;
        break;
      }
  }
  // A file may hold a [section] per subcommand: first-level ones by name ([margin-sweep]), nested
  // ones by their path joined with '-' ([ssfr-train]). Every other command's section is skipped.
  auto dashed = [](std::string n) {
    std::replace(n.begin(), n.end(), ' ', '-');
    return n;
  };
  const std::string section = dashed(command_path(sub));
  std::vector<std::string> siblings;
  std::function<void(const CLI::App*)> collect = [&](const CLI::App* a) {
    for (const CLI::App* s : a->get_subcommands({})) {
      if (s != sub) siblings.push_back(dashed(command_path(s)));
      collect(s);
    }
  };
  collect(&app);
  std::set<std::string> given;
  for (size_t i = 1; i < out.size(); ++i) {
    const std::string& a = out[i];
    if (a.size() < 2 || a[0] != '-') continue;
    std::string name = a.substr(0, a.find('='));
    if (name.size() > 2 && name[1] != '-') name = name.substr(0, 2);  // -oFILE
    if (const CLI::Option* opt = sub->get_option_no_throw(name))
      if (!opt->get_lnames().empty()) given.insert(opt->get_lnames()[0]);
  }
  for (const ConfigEntry& e : read_toml_config(path, section, siblings)) {
    const CLI::Option* opt = config_option(sub, e, path);
    const std::string name = opt->get_lnames()[0];
    if (given.count(name)) continue;
    if (opt->get_expected_max() == 0) {
      if (e.values[0] == "true") out.push_back("--" + name);
      continue;
    }
    out.push_back("--" + name);
    for (const auto& v : e.values) out.push_back(v);
    g_config_origin.emplace_back("--" + name, config_where(path, e));
  }
  return out;
}

// A CLI11 parse error about an option that --config set: "FILE:LINE: key 'K': message".
std::string config_error_origin(const std::string& what) {
  for (const auto& [flag, where] : g_config_origin)
    if (what.find(flag + ":") != std::string::npos || what.find(flag + " ") != std::string::npos ||
        what.rfind(flag, 0) == 0)
      return where;
  return {};
}

}  // namespace

const CLI::Validator Uint64(
    [](std::string& v) -> std::string {
      errno = 0;
      char* end = nullptr;
      const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
      if (digits) std::strtoull(v.c_str(), &end, 10);
      if (!digits || errno == ERANGE)
        return fmt::format("must be an integer from 0 to 18446744073709551615 (got '{}')", v);
      return {};
    },
    "UINT64");

CLI::Validator FiniteRange(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || !end || *end || !std::isfinite(x) || x < lo || x > hi)
          return fmt::format("must be a finite number in [{}, {}] (got '{}')", lo, hi, v);
        return {};
      },
      fmt::format("FLOAT in [{}, {}]", lo, hi));
}

const CLI::Validator NonNegative(
    [](std::string& v) -> std::string {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || !end || *end || !(x >= 0)) return fmt::format("must be >= 0 (got '{}')", v);
      return {};
    },
    "NUMBER >= 0");

int verbosity() { return g_verbosity_quiet ? -1 : g_verbosity_verbose ? 1 : 0; }

Register::Register(const char* tool, int order, std::function<void(CLI::App&)> setup) {
  registry().push_back({tool, order, std::move(setup)});
}

int saved_argc() { return g_argc; }
char** saved_argv() { return g_argv; }

void add_common(CLI::App* sub, CommonOptions& o, const std::string& default_out) {
  if (!default_out.empty() && o.out.empty()) o.out = default_out;
  sub->add_option("--seed", o.seed, "Base random seed; every random draw is a pure function of (seed, stream, index)")
      ->capture_default_str()
      ->check(Uint64);
  // A subcommand whose data flag is `--q` (ramnet kernel/cape: one query) adds it before this call and
  // keeps `--quiet` without the `-q` alias: newer CLI11 releases treat `-q` and `--q` as one name.
  const bool q_taken = sub->get_option_no_throw("--q") != nullptr;
  sub->add_flag(q_taken ? "--quiet" : "--quiet,-q", g_verbosity_quiet,
                "Print only errors on stderr (no device line, no progress)")
      ->configurable(false);
  sub->add_flag("--verbose,-v", g_verbosity_verbose, "More diagnostics on stderr (the device choice in full)")
      ->configurable(false);
  auto* out = sub->add_option("--out,-o", o.out, "Result file (HDF5). Written to a temporary name and renamed when complete");
  if (!default_out.empty()) out->capture_default_str();
  sub->add_flag("--force", o.force,
                "Replace --out if it exists (never a device, FIFO or an input file of this run; without --force an "
                "existing result is an error, exit 3)")
      ->configurable(false);
  sub->add_option("--device", o.device, "Compute path: auto (GPU when usable), cpu, or cuda (error if no GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub->add_option("--threads", o.threads, "CPU threads for the OpenMP loops (0 = OpenMP default); BLAS runs single-threaded, so results do not depend on it")
      ->capture_default_str()
      ->check(NonNegative);
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
    // --force only says how to treat an existing file: not part of the configuration (so resume and
    // merge compare equal configurations whether or not it was given).
    if (name.empty() || name == "help" || name == "force" || name == "quiet" || name == "verbose") continue;
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

namespace {
// --out naming a file that another option of the run reads (--in, --keys FILE:dataset, ...): an
// error before any work, even with --force (the rename would replace the input).
void refuse_out_among_inputs(const CLI::App* sub, const std::string& out) {
  struct stat so{};
  if (out.empty() || stat(out.c_str(), &so) != 0) return;
  for (const CLI::Option* opt : sub->get_options()) {
    const std::string name = opt->get_lnames().empty() ? opt->get_name() : opt->get_lnames()[0];
    if (name == "out" || opt->count() == 0) continue;
    for (const std::string& v : opt->results()) {
      std::string path = v;
      struct stat si{};
      if (stat(path.c_str(), &si) != 0) {  // FILE:dataset
        const auto colon = v.rfind(':');
        if (colon == std::string::npos || colon == 0) continue;
        path = v.substr(0, colon);
        if (stat(path.c_str(), &si) != 0) continue;
      }
      if (S_ISREG(si.st_mode) && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        throw IoError(fmt::format("--out '{}' is the file given to --{} ('{}'); write the result to another file", out,
                                  name, path));
    }
  }
}
}  // namespace

Prepared prepare(CLI::App* sub, const CommonOptions& o) {
  Prepared p;
  if (!o.print_config.empty()) {
    std::string text = config_text(sub);
    // Check every step of the write (a full disk shows up at fflush/fclose): exit 3, no half file.
    if (o.print_config == "-") {
      if (std::fputs(text.c_str(), stdout) < 0 || std::fflush(stdout) != 0)
        throw IoError(fmt::format("cannot write the config to stdout: {}", std::strerror(errno)));
    } else {
      if (std::filesystem::is_directory(o.print_config))
        throw IoError(fmt::format("--print-config '{}' is a folder; give a file name", o.print_config));
      // an existing file is replaced only with --force, as --out (a result file is not lost to a config)
      std::error_code ec;
      const auto st = std::filesystem::status(o.print_config, ec);
      if (!ec && std::filesystem::exists(st)) {
        if (!std::filesystem::is_regular_file(st))
          throw IoError(fmt::format("--print-config '{}' is not a regular file; give a file name", o.print_config));
        if (!o.force)
          throw IoError(fmt::format("--print-config '{}' exists; pass --force to replace it", o.print_config));
      }
      std::FILE* f = std::fopen(o.print_config.c_str(), "w");
      if (!f) throw IoError(fmt::format("cannot write config file '{}': {}", o.print_config, std::strerror(errno)));
      const bool ok = std::fputs(text.c_str(), f) >= 0 && std::fflush(f) == 0;
      const int err = errno;
      if (std::fclose(f) != 0 || !ok) {
        const int e = ok ? errno : err;
        std::remove(o.print_config.c_str());
        throw IoError(fmt::format("cannot write config file '{}': {}", o.print_config, std::strerror(e)));
      }
    }
    p.done = true;
    return p;
  }
  io::set_out_policy(o.out, o.force);
  refuse_out_among_inputs(sub, o.out);
  set_threads(o.threads);
  const CLI::App* root = sub;
  while (root->get_parent()) root = root->get_parent();
  const std::string tool = root != sub ? root->get_name() : "memcap";
  p.ctx = io::make_context(tool, command_path(sub), g_argc, g_argv);
  p.ctx.device = resolve_device(o.device);
  // One short device line (not with --quiet): "device: cuda (NVIDIA H200, cc 9.0)" / "device: cpu (auto: no GPU)".
  if (verbosity() > 0 || (verbosity() == 0 && o.device == "auto")) {
    const DeviceInfo& d = p.ctx.device;
    std::string why = d.device == Device::cuda ? fmt::format("{}, cc {}", d.name, d.compute_capability)
                      : o.device == "auto"     ? std::string("auto: no GPU")
                                               : std::string("requested");
    if (verbosity() > 0 && d.device == Device::cpu && o.device == "auto") why = d.reason;
    std::fprintf(stderr, "device: %s (%s)\n", to_string(d.device), why.c_str());
  }
  if (verbosity() < 0) {  // --quiet: no progress either, unless --progress was given
    if (CLI::Option* prog = sub->get_option_no_throw("--progress"); prog && prog->count() == 0) {
      prog->add_result(std::string("none"));
      prog->run_callback();
    }
  }
  p.ctx.threads = o.threads;
  p.ctx.config = options_json(sub);
  return p;
}

namespace {

// CLI11 drops the empty pieces of a comma list ("--widths 64,128," runs two widths), so a typo would silently shrink
// a grid. Scans the arguments before parsing: for every option with the ',' delimiter of the subcommand in force
// (or a parent), a value with an empty piece (leading, trailing or doubled comma) is an error. Returns the message,
// or "" when every list is whole. Only values of list options are looked at: free text (templates) may hold commas.
std::string empty_list_item(const CLI::App& app, const std::vector<std::string>& args, std::string& where) {
  const CLI::App* cur = &app;
  where = app.get_name();
  auto problem = [](const std::string& name, const std::string& value) -> std::string {
    try {
      split_list(value, ',', name);  // the message of the lists parsed by hand
      return "";
    } catch (const UserError& e) {
      return e.what();
    }
  };
  auto list_option = [&](const std::string& name) -> const CLI::Option* {
    for (const CLI::App* a = cur; a; a = a->get_parent())
      if (const CLI::Option* o = a->get_option_no_throw(name)) return o->get_delimiter() == ',' ? o : nullptr;
    return nullptr;
  };
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& t = args[i];
    if (t == "--") break;
    if (t.rfind("--", 0) == 0) {
      const std::size_t eq = t.find('=');
      const std::string name = t.substr(0, eq);
      const CLI::Option* o = list_option(name);
      if (!o) continue;
      if (eq != std::string::npos) {
        if (std::string why = problem(name, t.substr(eq + 1)); !why.empty()) return why;
        continue;
      }
      for (std::size_t j = i + 1; j < args.size() && args[j].rfind("--", 0) != 0; ++j) {
        if (std::string why = problem(name, args[j]); !why.empty()) return why;
        if (o->get_expected_max() <= 1) break;
      }
      continue;
    }
    if (t.empty() || t[0] == '-') continue;
    for (const CLI::App* s : cur->get_subcommands({}))
      if (s->check_name(t)) {
        cur = s;
        where += " " + s->get_name();
        break;
      }
  }
  return "";
}

}  // namespace

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
    args = expand_config(app, args);
    std::string where;
    if (const std::string bad = empty_list_item(app, args, where); !bad.empty()) {
      std::fprintf(stderr, "%s: error: %s (see '%s --help')\n", where.c_str(), bad.c_str(), where.c_str());
      return kExitUsage;
    }
    std::vector<std::string> rev(args.rbegin(), args.rend() - 1);  // CLI11 takes reversed args without argv[0]
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    if (argc <= 1) {  // bare tool name: show what it can do
      std::fputs(app.help().c_str(), stderr);
      return kExitUsage;
    }
    const CLI::App* leaf = active_leaf(&app);
    std::string where = leaf == &app ? tool : fmt::format("{} {}", tool, command_path(leaf));
    if (leaf == &app) {  // no subcommand recognised: name the word and list the commands
      std::string first;
      for (int i = 1; i < argc && first.empty(); ++i)
        if (argv[i][0] != '-') first = argv[i];
      std::string names;
      for (const CLI::App* s : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + s->get_name();
      if (!first.empty())
        std::fprintf(stderr, "%s: error: unknown command '%s'; commands: %s (see '%s --help')\n", tool, first.c_str(),
                     names.c_str(), tool);
      else
        std::fprintf(stderr, "%s: error: %s; commands: %s (see '%s --help')\n", tool, e.what(), names.c_str(), tool);
      return kExitUsage;
    }
    const std::string origin = config_error_origin(e.what());
    if (!origin.empty())
      std::fprintf(stderr, "%s: error: %s: %s\n", where.c_str(), origin.c_str(), e.what());
    else
      std::fprintf(stderr, "%s: error: %s (see '%s --help')\n", where.c_str(), e.what(), where.c_str());
    return kExitUsage;
  } catch (const UserError& e) {
    const CLI::App* leaf = active_leaf(&app);
    std::fprintf(stderr, "%s: error: %s\n", leaf == &app ? tool : fmt::format("{} {}", tool, command_path(leaf)).c_str(), e.what());
    return e.exit_code();
  } catch (const std::filesystem::filesystem_error& e) {
    // Creating, renaming or listing files and folders (name too long, permission denied, disk full).
    const CLI::App* leaf = active_leaf(&app);
    std::fprintf(stderr, "%s: error: %s\n", leaf == &app ? tool : fmt::format("{} {}", tool, command_path(leaf)).c_str(),
                 e.what());
    return kExitIo;
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
