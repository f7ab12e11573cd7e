// A read-only POSIX file driver (HDF5 virtual file layer) for every file we open for reading. It
// reads like HDF5's default sec2 driver, and before HDF5 decodes a global heap collection it
// checks the collection's layout (h5_heap.cpp): HDF5 1.10 trusts those unchecksummed sizes and
// can loop forever or copy past a buffer on a flipped byte.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "io/h5_detail.hpp"

namespace memcap::h5::detail {
namespace {

struct SafeFile {
  H5FD_t pub;  // must come first: HDF5 fills it in
  int fd = -1;
  haddr_t eoa = 0, eof = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  unsigned size_len = 8;  // "size of lengths" from the superblock
};

thread_local std::string g_problem;  // why the driver refused a read (hdf5_reason reports it)

// The superblock's size-of-lengths (8 unless the file says otherwise).
unsigned lengths_size(int fd, haddr_t eof) {
  for (haddr_t at = 0; at + 16 <= eof; at = at ? at * 2 : 512) {
    unsigned char b[16];
    if (pread(fd, b, sizeof b, static_cast<off_t>(at)) != static_cast<ssize_t>(sizeof b)) return 8;
    if (std::memcmp(b, "\x89HDF\r\n\x1a\n", 8) != 0) continue;
    const unsigned n = b[8] <= 1 ? b[14] : b[10];
    return (n == 2 || n == 4 || n == 8) ? n : 8;
  }
  return 8;
}

H5FD_t* safe_open(const char* name, unsigned flags, hid_t, haddr_t maxaddr) {
  if ((flags & H5F_ACC_RDWR) || (flags & H5F_ACC_CREAT) || (flags & H5F_ACC_TRUNC) || maxaddr == 0) return nullptr;
  const int fd = open(name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return nullptr;
  }
  auto* f = static_cast<SafeFile*>(std::calloc(1, sizeof(SafeFile)));
  if (!f) {
    close(fd);
    return nullptr;
  }
  f->fd = fd;
  f->eof = static_cast<haddr_t>(st.st_size);
  f->dev = st.st_dev;
  f->ino = st.st_ino;
  f->size_len = lengths_size(fd, f->eof);
  return &f->pub;
}

herr_t safe_close(H5FD_t* file) {
  auto* f = reinterpret_cast<SafeFile*>(file);
  const int r = close(f->fd);
  std::free(f);
  return r == 0 ? 0 : -1;
}

int safe_cmp(const H5FD_t* a, const H5FD_t* b) {
  const auto* x = reinterpret_cast<const SafeFile*>(a);
  const auto* y = reinterpret_cast<const SafeFile*>(b);
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
  return 0;
}

herr_t safe_query(const H5FD_t*, unsigned long* flags) {
  // No metadata accumulation: each metadata read reaches safe_read as one piece.
  if (flags) *flags = H5FD_FEAT_DATA_SIEVE | H5FD_FEAT_DEFAULT_VFD_COMPATIBLE;
  return 0;
}

haddr_t safe_get_eoa(const H5FD_t* file, H5FD_mem_t) { return reinterpret_cast<const SafeFile*>(file)->eoa; }
herr_t safe_set_eoa(H5FD_t* file, H5FD_mem_t, haddr_t addr) {
  reinterpret_cast<SafeFile*>(file)->eoa = addr;
  return 0;
}
haddr_t safe_get_eof(const H5FD_t* file, H5FD_mem_t) { return reinterpret_cast<const SafeFile*>(file)->eof; }

herr_t safe_get_handle(H5FD_t* file, hid_t, void** handle) {
  if (!handle) return -1;
  *handle = &reinterpret_cast<SafeFile*>(file)->fd;
  return 0;
}

herr_t safe_read(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buf) {
  auto* f = reinterpret_cast<SafeFile*>(file);
  if (addr == HADDR_UNDEF || addr + size < addr || addr + size > f->eoa) {
    g_problem = "an address points past the end of the file's data";
    return -1;
  }
  auto* p = static_cast<unsigned char*>(buf);
  haddr_t at = addr;
  size_t left = size;
  while (left > 0 && at < f->eof) {
    const ssize_t r = pread(f->fd, p, left, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      g_problem = std::string("read failed: ") + std::strerror(errno);
      return -1;
    }
    if (r == 0) break;
    p += r;
    at += static_cast<haddr_t>(r);
    left -= static_cast<size_t>(r);
  }
  if (left > 0) std::memset(p, 0, left);  // past the end of the file reads as zeros (as sec2 does)
  // Global heap reads arrive as raw-data reads; a collection is recognised by its signature.
  if (size >= 16 && std::memcmp(buf, "GCOL", 4) == 0) {
    const std::string why = check_heap_collection(static_cast<const unsigned char*>(buf), size, f->size_len, nullptr);
    if (!why.empty()) {
      g_problem = why;
      return -1;
    }
  }
  return 0;
}

herr_t safe_write(H5FD_t*, H5FD_mem_t, hid_t, haddr_t, size_t, const void*) {
  g_problem = "the file is open read-only";
  return -1;
}

H5FD_class_t make_class() {
  H5FD_class_t c;
  std::memset(&c, 0, sizeof c);
  c.name = "memcap_safe_read";
  c.maxaddr = (static_cast<haddr_t>(1) << (8 * sizeof(off_t) - 1)) - 1;
  c.fc_degree = H5F_CLOSE_WEAK;
  c.open = safe_open;
  c.close = safe_close;
  c.cmp = safe_cmp;
  c.query = safe_query;
  c.get_eoa = safe_get_eoa;
  c.set_eoa = safe_set_eoa;
  c.get_eof = safe_get_eof;
  c.get_handle = safe_get_handle;
  c.read = safe_read;
  c.write = safe_write;
  const H5FD_mem_t map[H5FD_MEM_NTYPES] = H5FD_FLMAP_DICHOTOMY;
  for (int i = 0; i < H5FD_MEM_NTYPES; ++i) c.fl_map[i] = map[i];
  return c;
}

}  // namespace

std::string take_driver_problem() {
  std::string p;
  p.swap(g_problem);
  return p;
}

hid_t safe_read_driver() {
  static const H5FD_class_t cls = make_class();
  static hid_t id = -1;
  static std::once_flag once;
  std::call_once(once, [] { id = H5FDregister(&cls); });
  return id;
}

}  // namespace memcap::h5::detail
