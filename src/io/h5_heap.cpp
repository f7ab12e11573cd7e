// Global heap collections (where HDF5 keeps variable-length strings) checked and decoded by us.
// HDF5 1.10 trusts their unchecksummed object sizes and string references: a flipped byte there
// loops forever or copies past its buffer. The read-only driver (h5_vfd.cpp) checks each
// collection HDF5 loads; string datasets are decoded here from the file bytes instead.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "io/h5_detail.hpp"

namespace memcap::h5::detail {
namespace {

std::uint64_t decode_le(const unsigned char* p, unsigned n) {
  std::uint64_t v = 0;
  for (unsigned k = 0; k < n; ++k) v |= static_cast<std::uint64_t>(p[k]) << (8 * k);
  return v;
}

// pread exactly n bytes at off (false on a short read or an error).
bool read_at(int fd, std::uint64_t off, void* buf, std::size_t n) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    const ssize_t r = pread(fd, p, n, static_cast<off_t>(off));
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    p += r;
    off += static_cast<std::uint64_t>(r);
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

struct Fd {
  int fd;
  explicit Fd(const std::string& path) : fd(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

std::string check_heap_collection(const unsigned char* p, std::size_t n, unsigned size_len,
                                  std::map<unsigned, HeapObject>* objects) {
  const std::size_t hdr = 8 + size_len, objhdr = 8 + size_len;
  if (n < hdr || std::memcmp(p, "GCOL", 4) != 0 || p[4] != 1) return "";  // not (all of) a collection: HDF5 judges
  const std::uint64_t size = decode_le(p + 8, size_len);
  if (size > n) return "";  // a speculative first read; the whole collection is read (and checked) next
  if (size < hdr) return "a global heap collection declares a size smaller than its header";
  std::vector<bool> seen(65536, false);
  std::uint64_t at = hdr;
  while (at < size) {
    if (at + objhdr > size) break;  // tail too small for an object header: free space
    const unsigned idx = static_cast<unsigned>(decode_le(p + at, 2));
    const std::uint64_t osize = decode_le(p + at + 8, size_len);
    if (osize > size) return fmt::format("global heap object {} claims {} bytes in a {}-byte collection", idx, osize, size);
    const std::uint64_t need = idx > 0 ? objhdr + ((osize + 7) / 8) * 8 : osize;
    if (need == 0 || need > size - at)
      return fmt::format("global heap object {} at offset {} overruns its {}-byte collection", idx, at, size);
    if (idx > 0) {
      if (seen[idx]) return fmt::format("global heap object {} appears twice in one collection", idx);
      seen[idx] = true;
      if (objects) (*objects)[idx] = {at + objhdr, osize};
    }
    at += need;
  }
  return "";
}

std::optional<std::vector<std::string>> read_vlen_strings_raw(hid_t ds, std::uint64_t n, const std::string& file,
                                                              const std::string& what) {
  // Only contiguous, allocated storage is read here; anything else goes through HDF5.
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl.get()) != 0) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  const haddr_t addr = H5Dget_offset(ds);
  if (addr == HADDR_UNDEF) {
    H5Eclear2(H5E_DEFAULT);
    return std::nullopt;
  }
  Handle f = checked(H5Iget_file_id(ds), H5Fclose, file, "cannot get the file of " + what);
  Handle fcpl = checked(H5Fget_create_plist(f.get()), H5Pclose, file, "cannot read the file properties");
  std::size_t sizeof_addr = 8, sizeof_size = 8;
  hsize_t userblock = 0;
  check_ok(H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size), file, "cannot read the file properties");
  check_ok(H5Pget_userblock(fcpl.get(), &userblock), file, "cannot read the file properties");
  if (sizeof_addr > 8 || sizeof_size > 8 || sizeof_addr == 0 || sizeof_size == 0) return std::nullopt;
  const std::uint64_t fsize = file_bytes(ds, file);
  const std::size_t elem = 4 + sizeof_addr + 4;  // sequence length, collection address, object index
  if (n > fsize / elem) fail(file, what + " claims more strings than the file can hold (corrupt file?)");
  Fd fd(file);
  if (fd.fd < 0) fail(file, fmt::format("cannot read {}: {}", what, std::strerror(errno)));
  std::vector<unsigned char> raw(n * elem);
  if (!read_at(fd.fd, userblock + addr, raw.data(), raw.size()))
    fail(file, what + " lies beyond the end of the file (truncated or corrupt?)");

  struct Collection {
    std::vector<unsigned char> bytes;
    std::map<unsigned, HeapObject> objects;
  };
  std::map<std::uint64_t, Collection> heaps;
  std::vector<std::string> out(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    const unsigned char* e = raw.data() + i * elem;
    const std::uint64_t len = decode_le(e, 4);
    const std::uint64_t haddr = decode_le(e + 4, static_cast<unsigned>(sizeof_addr));
    const unsigned idx = static_cast<unsigned>(decode_le(e + 4 + sizeof_addr, 4));
    if (haddr == 0) continue;  // a NULL string reads as ""
    auto it = heaps.find(haddr);
    if (it == heaps.end()) {
      unsigned char head[16];
      const std::size_t hlen = 8 + sizeof_size;
      if (haddr >= fsize || !read_at(fd.fd, userblock + haddr, head, hlen) || std::memcmp(head, "GCOL", 4) != 0)
        fail(file, fmt::format("string {} of {} points outside any global heap collection (corrupt file?)", i, what));
      const std::uint64_t csize = decode_le(head + 8, static_cast<unsigned>(sizeof_size));
      if (csize < hlen || csize > fsize - haddr)
        fail(file, fmt::format("the global heap collection of {} has an impossible size (corrupt file?)", what));
      Collection c;
      c.bytes.resize(csize);
      if (!read_at(fd.fd, userblock + haddr, c.bytes.data(), csize)) fail(file, what + ": short read of a global heap");
      const std::string why = check_heap_collection(c.bytes.data(), csize, static_cast<unsigned>(sizeof_size), &c.objects);
      if (!why.empty()) fail(file, fmt::format("{}: {} (corrupt file?)", what, why));
      it = heaps.emplace(haddr, std::move(c)).first;
    }
    const auto obj = it->second.objects.find(idx);
    if (obj == it->second.objects.end() || obj->second.size != len)
      fail(file, fmt::format("string {} of {} does not match its global heap object (corrupt file?)", i, what));
    const char* s = reinterpret_cast<const char*>(it->second.bytes.data() + obj->second.offset);
    out[i] = checked_text(s, obj->second.size, file, what);
  }
  return out;
}

}  // namespace memcap::h5::detail
