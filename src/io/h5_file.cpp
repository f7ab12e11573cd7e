// HDF5 files (see h5.hpp): library set-up, error-stack messages, the checksummed 1.10 format for
// files we create, readable-file checks with precise messages, and the registry of opened inputs.
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "io/h5_detail.hpp"

namespace memcap::h5 {
namespace detail {
namespace {
// Before main, so that it precedes any H5* call, ours or direct ones elsewhere (see init_library).
[[maybe_unused]] const bool g_no_atexit = (H5dont_atexit(), true);
}  // namespace

void init_library() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Must precede every other H5* call (the first one initialises the library and would register
    // H5close with atexit). HDF5 1.10 keeps the id of a file whose H5Fclose failed (disk full) with
    // the file half torn down, and H5close at exit then crashes on it. We close every object
    // through RAII before main returns, so nothing is left for H5close to do.
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

namespace {
herr_t innermost(unsigned n, const H5E_error2_t* e, void* data) {
  if (n == 0 && e && e->desc) *static_cast<std::string*>(data) = e->desc;
  return 0;
}
}  // namespace

std::string hdf5_reason() {
  std::string r = take_driver_problem();  // our driver's own finding beats HDF5's "read failed"
  if (r.empty()) H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &r);
  H5Eclear2(H5E_DEFAULT);
  std::string out;
  for (char c : r) {
    if (out.size() >= 160) break;
    out += (c >= 32 && c < 127) ? c : ' ';
  }
  return out;
}

void fail(const std::string& file, const std::string& what) {
  throw IoError(fmt::format("HDF5 file '{}': {}", file, what));
}

namespace {
// The operating-system error inside an HDF5 message ("... errno = 28, ..."), as strerror text.
std::string os_error(const std::string& why) {
  const auto at = why.find("errno = ");
  if (at == std::string::npos) return "";
  const int e = std::atoi(why.c_str() + at + 8);
  return e > 0 ? std::strerror(e) : "";
}
}  // namespace

void fail_h5(const std::string& file, const std::string& what) {
  const std::string why = hdf5_reason();
  if (why.empty()) fail(file, what);
  if (const std::string os = os_error(why); !os.empty())  // disk full, I/O error, file too large
    throw IoError(fmt::format("HDF5 file '{}': {}: {}", file, what, os));
  throw IoError(fmt::format("HDF5 file '{}': {} (HDF5: {}; is the file corrupt?)", file, what, why));
}

std::uint64_t file_bytes(hid_t obj, const std::string& file) {
  Handle f = checked(H5Iget_file_id(obj), H5Fclose, file, "cannot get the file of an object");
  hsize_t n = 0;
  check_ok(H5Fget_filesize(f.get(), &n), file, "cannot get the file size");
  return n;
}

void keep_attributes_compact(hid_t plist) {
  // Compact (object-header) attribute storage for any count: HDF5 1.10's H5Ocopy crashes copying
  // dense variable-length string attributes (seen on Debian 12), and merges copy /runs groups.
  H5Pset_attr_phase_change(plist, 65535, 0);
}

void keep_links_compact(hid_t plist) {
  // Links in the (checksummed) object header up to 65535 per group. Dense link storage (a fractal
  // heap) is where HDF5 1.10 crashes on a corrupt byte: H5G__dense_iterate frees a half-built
  // link table when reading a heap block fails.
  H5Pset_link_phase_change(plist, 65535, 0);
}

Handle group_create_plist() {
  Handle gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  if (gcpl.valid()) {
    keep_attributes_compact(gcpl.get());
    keep_links_compact(gcpl.get());
  }
  return gcpl;
}

}  // namespace detail

using detail::fail_h5;

// ---- readable files and the input registry ----
namespace {

struct Input {
  dev_t dev;
  ino_t ino;
  std::string path;
};
std::mutex g_inputs_mu;
std::vector<Input> g_inputs;

void remember_input(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return;
  std::lock_guard<std::mutex> lock(g_inputs_mu);
  for (auto& in : g_inputs)
    if (in.dev == st.st_dev && in.ino == st.st_ino) return;
  g_inputs.push_back({st.st_dev, st.st_ino, path});
}

// "" when path can be opened for reading, else why not (errno-based, user-facing).
std::string unreadable_reason(const std::string& path, bool* missing = nullptr) {
  if (missing) *missing = false;
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) {
      if (missing) *missing = true;
      return "does not exist";
    }
    if (e == ENAMETOOLONG) return "has a name that is too long for the file system";
    if (e == EACCES) return "cannot be reached: permission denied on a folder of its path";
    return std::string("cannot be read: ") + std::strerror(e);
  }
  if (S_ISDIR(st.st_mode)) return "is a directory";
  if (!S_ISREG(st.st_mode)) return "is not a regular file (a device, FIFO or socket)";
  if (access(path.c_str(), R_OK) != 0) {
    const int e = errno;
    return e == EACCES ? "cannot be read: permission denied" : std::string("cannot be read: ") + std::strerror(e);
  }
  return "";
}

}  // namespace

void require_readable_file(const std::string& path, const std::string& role) {
  if (path.empty()) throw IoError(fmt::format("{}: no file name given", role));
  const std::string why = unreadable_reason(path);
  if (!why.empty()) throw IoError(fmt::format("{} '{}' {}", role, path, why));
}

std::string opened_input_same_as(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return "";
  std::lock_guard<std::mutex> lock(g_inputs_mu);
  for (auto& in : g_inputs)
    if (in.dev == st.st_dev && in.ino == st.st_ino) return in.path;
  return "";
}

bool is_hdf5(const std::string& path) {
  detail::init_library();
  bool missing = false;
  const std::string why = unreadable_reason(path, &missing);
  if (missing || why == "is a directory" || why.rfind("is not a regular", 0) == 0) return false;
  if (!why.empty()) throw IoError(fmt::format("'{}' {}", path, why));
  const htri_t r = H5Fis_hdf5(path.c_str());
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

// ---- File ----
File::File(hid_t id, const std::string& path, bool created)
    : Group(Handle(id, H5Fclose), "/", path), created_(created), exceptions_at_open_(std::uncaught_exceptions()) {}

File File::create(const std::string& path) {
  detail::init_library();
  // HDF5 1.10 format (the newest 1.10 reads and h5py >= 2.8 opens): checksummed superblock, object
  // headers, link and chunk indexes, so a flipped metadata byte is an error, not a crash or a hang.
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  if (!fapl.valid() || !fcpl.valid() || H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST) < 0)
    fail_h5(path, "cannot set up file properties");
  detail::keep_attributes_compact(fcpl.get());  // the root group: ~25 provenance attributes
  detail::keep_links_compact(fcpl.get());
  struct stat before{};
  const bool existed = lstat(path.c_str(), &before) == 0;
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
  if (f < 0) {
    const std::string why = detail::hdf5_reason();
    if (!existed) unlink(path.c_str());  // HDF5 may leave an empty file behind (e.g. disk full)
    if (const std::string os = detail::os_error(why); !os.empty())
      throw IoError(fmt::format("cannot create HDF5 file '{}': {}", path, os));
    throw IoError(fmt::format("cannot create HDF5 file '{}' (does the folder exist and is it writable?{})", path,
                              why.empty() ? "" : " HDF5: " + why));
  }
  return File(f, path, true);
}

File File::open_read(const std::string& path) {
  File f = inspect(path);
  remember_input(path);
  return f;
}

File File::inspect(const std::string& path) {
  detail::init_library();
  require_readable_file(path, "file");
  if (!is_hdf5(path)) throw IoError(fmt::format("'{}' is not an HDF5 file", path));
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  const hid_t driver = detail::safe_read_driver();
  if (!fapl.valid() || driver < 0 || H5Pset_driver(fapl.get(), driver, nullptr) < 0)
    fail_h5(path, "cannot set up the read-only file driver");
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (f < 0) {
    const std::string why = detail::hdf5_reason();
    throw IoError(fmt::format("cannot open HDF5 file '{}' ({}; on cluster file systems set "
                              "HDF5_USE_FILE_LOCKING=FALSE)",
                              path, why.empty() ? "corrupt or locked?" : "corrupt? HDF5: " + why));
  }
  return File(f, path, false);
}

File File::open_rw(const std::string& path) {
  detail::init_library();
  require_readable_file(path, "file");
  if (!is_hdf5(path)) throw IoError(fmt::format("'{}' is not an HDF5 file", path));
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) fail_h5(path, "cannot open for writing");
  remember_input(path);
  return File(f, path, false);
}

void File::flush() {
  if (h_.valid()) detail::check_ok(H5Fflush(id(), H5F_SCOPE_GLOBAL), file_, "cannot write it to disk");
}

void File::close() {
  if (!h_.valid()) return;
  if (H5Fclose(h_.release()) < 0) {
    if (created_) unlink(file_.c_str());
    detail::fail_h5(file_, "cannot finish writing it");
  }
}

void File::discard() noexcept {
  if (!h_.valid()) return;
  H5Fclose(h_.release());
  H5Eclear2(H5E_DEFAULT);
  if (created_) unlink(file_.c_str());
}

void File::finish() noexcept {
  if (!h_.valid()) return;
  const bool unwinding = std::uncaught_exceptions() > exceptions_at_open_;
  const herr_t st = H5Fclose(h_.release());
  H5Eclear2(H5E_DEFAULT);
  // A created file destroyed by an exception, or one whose close failed, is incomplete.
  if (created_ && (unwinding || st < 0)) unlink(file_.c_str());
}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    finish();
    Group::operator=(std::move(o));
    created_ = o.created_;
    exceptions_at_open_ = o.exceptions_at_open_;
  }
  return *this;
}

File::~File() { finish(); }

}  // namespace memcap::h5
