// Internal helpers shared by the h5*.cpp files of the HDF5 layer (not for other code): library
// set-up, turning HDF5's error stack into IoError messages, and the limits every read obeys so
// that a corrupt size field fails cleanly instead of exhausting memory or crashing.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/h5.hpp"

namespace memcap::h5::detail {

// Once per process, before any other H5* call: no error printing, no exit-time H5close (see
// h5_file.cpp: HDF5 1.10 crashes at exit after a failed H5Fclose, e.g. on a full disk).
void init_library();

// The innermost message of HDF5's error stack ("incorrect metadata checksum ...", "addr overflow
// ..."), shortened to one printable line; "" when the stack is empty. Clears the stack.
std::string hdf5_reason();

// IoError "HDF5 file 'FILE': WHAT". fail_h5 appends HDF5's own reason; call it right after the
// failing H5* call (any other H5* call clears the stack).
[[noreturn]] void fail(const std::string& file, const std::string& what);
[[noreturn]] void fail_h5(const std::string& file, const std::string& what);
inline hid_t check_id(hid_t id, const std::string& file, const std::string& what) {
  if (id < 0) fail_h5(file, what);
  return id;
}
inline void check_ok(herr_t st, const std::string& file, const std::string& what) {
  if (st < 0) fail_h5(file, what);
}
// A Handle for id, or IoError when the call that produced id failed.
inline Handle checked(hid_t id, herr_t (*closer)(hid_t), const std::string& file, const std::string& what) {
  return Handle(check_id(id, file, what), closer);
}

// ---- read limits ----
inline constexpr int kMaxRank = 32;                          // H5S_MAX_RANK
inline constexpr std::uint64_t kMaxStringBytes = 256u << 20;  // one string (attribute or element)
// Largest factor by which a filtered (deflate) dataset may exceed its file: zlib's limit is ~1032.
inline constexpr std::uint64_t kMaxCompressionRatio = 1100;

// The NUL-terminated text at p (at most max_len bytes) as a string; IoError naming `what` unless
// it is valid UTF-8 (corrupt string data). nullptr gives "".
std::string checked_text(const char* p, std::size_t max_len, const std::string& file, const std::string& what);

// Size in bytes of the file that holds obj (IoError if HDF5 cannot say).
std::uint64_t file_bytes(hid_t obj, const std::string& file);

// ---- global heap collections (h5_heap.cpp) and the read-only driver (h5_vfd.cpp) ----
struct HeapObject {
  std::uint64_t offset, size;  // of the object's bytes within the collection image
};
// "" when the collection image p[0, n) is well formed (or is not a whole collection: a speculative
// read, no signature), else what is wrong. size_len: the file's size-of-lengths. Fills objects.
std::string check_heap_collection(const unsigned char* p, std::size_t n, unsigned size_len,
                                  std::map<unsigned, HeapObject>* objects);
// The n variable-length strings of dataset ds decoded from the file bytes with every reference
// checked (IoError naming `what` when corrupt); nullopt when the storage is not contiguous.
std::optional<std::vector<std::string>> read_vlen_strings_raw(hid_t ds, std::uint64_t n, const std::string& file,
                                                              const std::string& what);
// The driver id of the read-only driver that checks global heap collections (registered once).
hid_t safe_read_driver();
// Why the driver last refused a read ("" if it did not); clears it.
std::string take_driver_problem();

// Create-property lists of our files (h5_file.cpp): attributes and links (up to 65535 per group)
// stay in the checksummed object header, never in dense storage (see h5_file.cpp for why).
Handle group_create_plist();
void keep_attributes_compact(hid_t plist);
void keep_links_compact(hid_t plist);

}  // namespace memcap::h5::detail
