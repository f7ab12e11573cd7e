// Where results may be written (see output_file.hpp): output path checks (name length, folder,
// never a device or an input, --force for an existing --out), temporary names, removal of
// temporaries left by dead runs, and deletion of live temporaries on SIGTERM/SIGINT/SIGHUP.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "core/error.hpp"
#include "io/output_file.hpp"

namespace memcap::io {
namespace {
namespace fs = std::filesystem;

std::mutex g_policy_mu;
std::string g_out;     // the run's --out ("" = no policy)
bool g_force = false;  // --force given

// "stem", ".ext" of a path as the sweep's shard names use them.
std::pair<std::string, std::string> split_ext(const std::string& path) {
  const auto dot = path.rfind('.');
  const auto slash = path.rfind('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) return {path.substr(0, dot), path.substr(dot)};
  return {path, ""};
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// path is the run's --out, or a shard file STEM.shard<i>of<n>.EXT of it.
bool is_out_path(const std::string& path, const std::string& out) {
  if (out.empty()) return false;
  if (path == out) return true;
  const auto [stem, ext] = split_ext(out);
  const std::string pre = stem + ".shard";
  if (path.size() < pre.size() + ext.size() || path.compare(0, pre.size(), pre) != 0 ||
      path.compare(path.size() - ext.size(), ext.size(), ext) != 0)
    return false;
  const std::string mid = path.substr(pre.size(), path.size() - pre.size() - ext.size());
  const auto of = mid.find("of");
  return of != std::string::npos && all_digits(mid.substr(0, of)) && all_digits(mid.substr(of + 2));
}

std::string short_host() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  std::string h;
  for (const char* p = buf; *p && *p != '.' && h.size() < 32; ++p)
    h += (std::isalnum(static_cast<unsigned char>(*p)) || *p == '-' || *p == '_') ? *p : '_';
  return h.empty() ? "host" : h;
}

std::string shorten(const std::string& s) { return s.size() <= 60 ? s : s.substr(0, 40) + "..." + s.substr(s.size() - 12); }

// Refuses replacing an existing `path`: never a non-regular file or an input; the --out only with --force.
void check_existing_target(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode))
    throw IoError(fmt::format("--out '{}' is a directory; give a file name such as {}/result.h5", path, path));
  if (!S_ISREG(st.st_mode))
    throw IoError(fmt::format("refusing to write '{}': it is not a regular file (a device, FIFO or socket), and "
                              "results are written to a temporary file that is renamed over the target; give a file path",
                              path));
  if (const std::string in = h5::opened_input_same_as(path); !in.empty())
    throw IoError(fmt::format("'{}' is an input of this run ('{}'); write the result to another file", path, in));
  std::lock_guard<std::mutex> lock(g_policy_mu);
  if (!g_force && is_out_path(path, g_out))
    throw IoError(fmt::format("'{}' exists; pass --force to replace it, or choose another --out", path));
}

}  // namespace

void set_out_policy(const std::string& out, bool force) {
  std::lock_guard<std::mutex> lock(g_policy_mu);
  g_out = out;
  g_force = force;
}

std::string temporary_name(const std::string& path) {
  return fmt::format("{}.tmp-{}-{}", path, short_host(), static_cast<long>(getpid()));
}

void check_output_path(const std::string& path) {
  if (path.empty()) throw UserError("no output file given: pass --out FILE.h5");
  const fs::path p(path);
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw IoError(fmt::format("--out '{}' names a folder; give a file name such as {}/result.h5", path, path));
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  // Name lengths, counting the temporary suffix (PATH.tmp-<host>-<pid>) and sweeps' '.partial'.
  const std::size_t extra = std::max<std::size_t>(temporary_name(path).size() - path.size(), 8);
  long name_max = pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max <= 0) name_max = NAME_MAX;
  if (name.size() + extra > static_cast<std::size_t>(name_max))
    throw IoError(fmt::format("output file name '{}' is too long: {} characters, and this file system allows {} "
                              "including the {} that memcap adds for its temporary file; choose a shorter name",
                              shorten(name), name.size(), name_max, extra));
  if (path.size() + extra >= PATH_MAX)
    throw IoError(fmt::format("output path '{}' is too long ({} characters); choose a shorter one", shorten(path), path.size()));
  check_existing_target(path);
  struct stat ds{};
  if (stat(dir.c_str(), &ds) != 0 || !S_ISDIR(ds.st_mode)) {
    const int e = errno;
    if (e == EACCES)
      throw IoError(fmt::format("output folder '{}' cannot be reached: permission denied", dir));
    throw IoError(fmt::format("output folder '{}' does not exist (create it first: mkdir -p {})", dir, dir));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw IoError(fmt::format("output folder '{}' is not writable", dir));
  // access() says yes to root everywhere (/proc, a read-only mount): create and remove the temporary file the
  // write will use, so an unwritable place is found before the work, not after it
  const std::string probe = temporary_name(path);
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    if (e != EEXIST)
      throw IoError(fmt::format("cannot create files in output folder '{}': {}", dir, std::strerror(e)));
  } else {
    close(fd);
    unlink(probe.c_str());
  }
}

int remove_stale_temporaries(const std::string& path) {
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string prefix = p.filename().string() + ".tmp-";
  const std::string host = short_host();
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.size() <= prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = n.substr(prefix.size());
    const auto dash = rest.rfind('-');
    const std::string h = dash == std::string::npos ? "" : rest.substr(0, dash);  // "" = older PATH.tmp-<pid>
    const std::string pid_text = dash == std::string::npos ? rest : rest.substr(dash + 1);
    if ((!h.empty() && h != host) || !all_digits(pid_text) || pid_text.size() > 9) continue;
    const long pid = std::stol(pid_text);
    if (pid <= 0 || pid == static_cast<long>(getpid())) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code rec;
    if (!fs::is_regular_file(fs::symlink_status(it->path(), rec))) continue;
    if (fs::remove(it->path(), rec)) {
      const std::string shown = p.has_parent_path() ? it->path().string() : n;
      std::fprintf(stderr, "note: removed '%s', left by an interrupted run (process %ld no longer exists)\n",
                   shown.c_str(), pid);
      ++removed;
    }
  }
  return removed;
}

// ---- temporaries deleted on SIGTERM / SIGINT / SIGHUP ----
namespace {
constexpr int kSlots = 16;
char g_tmp[kSlots][PATH_MAX];
std::atomic<bool> g_claimed[kSlots];
std::atomic<bool> g_live[kSlots];

extern "C" void remove_temporaries_and_die(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (g_live[i].load()) unlink(g_tmp[i]);
  struct sigaction sa{};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
  raise(sig);
}

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
      struct sigaction old{};
      if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;  // keep SIG_IGN / others
      struct sigaction sa{};
      sa.sa_handler = remove_temporaries_and_die;
      sigemptyset(&sa.sa_mask);
      sigaction(sig, &sa, nullptr);
    }
  });
}
}  // namespace

OutputFile::SignalGuard::SignalGuard(const std::string& tmp) {
  if (tmp.size() >= PATH_MAX) return;  // left to remove_stale_temporaries
  install_handlers();
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_claimed[i].compare_exchange_strong(expected, true)) continue;
    std::memcpy(g_tmp[i], tmp.c_str(), tmp.size() + 1);
    g_live[i].store(true);
    slot = i;
    return;
  }
}

OutputFile::SignalGuard::~SignalGuard() {
  if (slot < 0) return;
  g_live[slot].store(false);
  g_claimed[slot].store(false);
}

}  // namespace memcap::io
