// The shared TOML reader (see toml_config.hpp): toml++ parses, we map keys onto CLI11 options.
#include "cli/toml_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <toml++/toml.h>

#include "core/error.hpp"

namespace memcap::cli {
namespace {
namespace fs = std::filesystem;

int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "a value";
  }
}

// A scalar as command-line text; false for types an option cannot take.
bool scalar_text(const toml::node& n, std::string& out) {
  if (auto s = n.as_string()) out = s->get();
  else if (auto i = n.as_integer()) out = fmt::format("{}", i->get());
  else if (auto d = n.as_floating_point()) out = fmt::format("{}", d->get());
  else if (auto b = n.as_boolean()) out = b->get() ? "true" : "false";
  else return false;
  return true;
}

void add_entry(const toml::key& k, const toml::node& node, const std::string& path, std::vector<ConfigEntry>& out) {
  {
    ConfigEntry e;
    e.key = std::string(k.str());
    e.line = line_of(node);
    const std::string where = fmt::format("{}:{}", path, e.line);
    if (auto arr = node.as_array()) {
      e.is_array = true;
      for (const auto& el : *arr) {
        std::string v;
        if (!scalar_text(el, v))
          throw UserError(fmt::format("{}: key '{}': array elements must be numbers, strings or booleans (got {})",
                                      where, e.key, type_name(el)));
        e.values.push_back(v);
      }
    } else {
      std::string v;
      if (!scalar_text(node, v))
        throw UserError(fmt::format("{}: key '{}': expected a number, string, boolean or array (got {})", where, e.key,
                                    type_name(node)));
      e.is_bool = node.is_boolean();
      e.values.push_back(v);
    }
    out.push_back(std::move(e));
  }
}

void add_entries(const toml::table& t, const std::string& path, std::vector<ConfigEntry>& out) {
  for (const auto& [k, node] : t) add_entry(k, node, path, out);
}

}  // namespace

std::string config_where(const std::string& path, const ConfigEntry& e) {
  return e.line > 0 ? fmt::format("{}:{}: key '{}'", path, e.line, e.key) : fmt::format("{}: key '{}'", path, e.key);
}

std::vector<ConfigEntry> read_toml_config(const std::string& path, const std::string& section,
                                          const std::vector<std::string>& skip_sections) {
  if (path.empty()) throw UserError("the config file name is empty; give a TOML file");
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!fs::exists(st)) throw IoError(fmt::format("config file '{}' does not exist", path));
  if (fs::is_directory(st)) throw IoError(fmt::format("config file '{}' is a folder; give a TOML file", path));
  if (!fs::is_regular_file(st)) throw IoError(fmt::format("config file '{}' is not a regular file", path));
  {
    std::ifstream probe(path);
    if (!probe) throw IoError(fmt::format("cannot read config file '{}': {}", path, std::strerror(errno)));
  }
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw UserError(fmt::format("{}:{}:{}: not valid TOML: {}", path, e.source().begin.line, e.source().begin.column,
                                e.description()));
  }
  std::vector<ConfigEntry> out;
  std::vector<ConfigEntry> top_entries;
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    if (auto t = node.as_table()) {
      if (key == section) {
        for (const auto& [k2, n2] : *t)
          if (n2.is_table() || n2.is_array_of_tables())
            throw UserError(fmt::format("{}:{}: [{}.{}]: nested tables are not options", path, line_of(n2), key,
                                        std::string(k2.str())));
        add_entries(*t, path, out);
      } else if (std::find(skip_sections.begin(), skip_sections.end(), key) == skip_sections.end()) {
        throw UserError(fmt::format("{}:{}: unknown section [{}] (only [{}]{} may appear)", path, line_of(node), key,
                                    section, skip_sections.empty() ? "" : " or another subcommand's name"));
      }
    } else if (node.is_array_of_tables()) {
      throw UserError(fmt::format("{}:{}: [[{}]]: arrays of tables are not options", path, line_of(node), key));
    } else {
      add_entry(k, node, path, top_entries);
    }
  }
  // toml::table iterates in key order: report in file order, top level first.
  auto by_line = [](const ConfigEntry& a, const ConfigEntry& b) { return a.line < b.line; };
  std::stable_sort(top_entries.begin(), top_entries.end(), by_line);
  std::stable_sort(out.begin(), out.end(), by_line);
  top_entries.insert(top_entries.end(), out.begin(), out.end());
  for (std::size_t i = 0; i < top_entries.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (top_entries[i].key == top_entries[j].key)
        throw UserError(fmt::format("{}: given twice (also line {})", config_where(path, top_entries[i]),
                                    top_entries[j].line));
  return top_entries;
}

CLI::Option* config_option(CLI::App* sub, const ConfigEntry& e, const std::string& path) {
  const std::string cmd = fmt::format("{}{}", sub->get_parent() ? sub->get_parent()->get_name() + " " : "",
                                      sub->get_name());
  CLI::Option* opt = e.key.empty() ? nullptr : sub->get_option_no_throw("--" + e.key);
  if (!opt || e.key == "help" || e.key == "help-all")
    throw UserError(fmt::format("{}: unknown key '{}' ('{} --help' lists the options)", path +
                                    (e.line > 0 ? fmt::format(":{}", e.line) : std::string()),
                                e.key, cmd));
  if (!opt->get_configurable())
    throw UserError(fmt::format("{}: '{}' cannot be set from a file; give --{} on the command line",
                                config_where(path, e), e.key, e.key));
  if (opt->get_expected_max() == 0 && !e.is_bool)
    throw UserError(fmt::format("{}: '{}' is a flag: write {} = true or false", config_where(path, e), e.key, e.key));
  if (opt->get_expected_max() != 0 && opt->get_items_expected_max() <= 1 && e.values.size() != 1)
    throw UserError(fmt::format("{}: takes one value, not an array of {}", config_where(path, e), e.values.size()));
  if (e.is_array && e.values.empty())
    throw UserError(fmt::format("{}: the array is empty", config_where(path, e)));
  for (const auto& v : e.values)
    if (v.empty()) throw UserError(fmt::format("{}: the value is an empty string", config_where(path, e)));
  return opt;
}

std::vector<std::string> sibling_names(const CLI::App* sub) {
  std::vector<std::string> names;
  if (const CLI::App* parent = sub->get_parent())
    for (const CLI::App* s : parent->get_subcommands({})) names.push_back(s->get_name());
  return names;
}

}  // namespace memcap::cli
