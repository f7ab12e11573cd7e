// HDF5 RAII layer: handles, groups and datasets (see h5.hpp; attributes in h5_attr.cpp, files in
// h5_file.cpp). Every H5* result is checked; every read validates rank, sizes (against the file's
// size) and type before it allocates, so corrupt files give IoError rather than crashes.
#include "io/h5.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "io/h5_detail.hpp"

namespace memcap::h5 {
namespace {

using detail::check_id;
using detail::check_ok;
using detail::checked;
using detail::fail;
using detail::fail_h5;

std::string join(const std::string& path, const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  return path == "/" ? "/" + name : path + "/" + name;
}

Handle make_dcpl(const std::vector<hsize_t>& dims, WriteOptions o, const std::string& file) {
  Handle h = checked(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, file, "cannot create dataset properties");
  detail::keep_attributes_compact(h.get());
  if (!o.compress) return h;
  for (hsize_t d : dims)
    if (d == 0) return h;  // chunking a zero-size dataset is not allowed
  std::vector<hsize_t> chunk = dims;
  // Aim at ~1 MiB chunks: keep trailing dims whole, cut rows.
  hsize_t row_elems = 1;
  for (size_t k = 1; k < dims.size(); ++k) row_elems *= dims[k];
  hsize_t rows = o.chunk_rows > 0 ? static_cast<hsize_t>(o.chunk_rows)
                                  : std::max<hsize_t>(1, (1u << 17) / std::max<hsize_t>(1, row_elems));
  chunk[0] = std::min<hsize_t>(dims[0], rows);
  if (H5Pset_chunk(h.get(), static_cast<int>(chunk.size()), chunk.data()) < 0 || H5Pset_shuffle(h.get()) < 0 ||
      H5Pset_deflate(h.get(), 4) < 0 || H5Pset_fletcher32(h.get()) < 0)
    fail_h5(file, "cannot set up chunking and compression");
  return h;
}

// Type of object `name` below loc: H5O_TYPE_GROUP / _DATASET / ...; IoError if unreadable.
H5O_type_t object_type(hid_t loc, const std::string& name, const std::string& file, const std::string& full) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info;
  const herr_t st = H5Oget_info_by_name3(loc, name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT);
#else
  H5O_info_t info;
  const herr_t st = H5Oget_info_by_name2(loc, name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT);
#endif
  check_ok(st, file, "cannot read the object header of " + full);
  return info.type;
}

}  // namespace

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = -1;
  }
  return *this;
}

void Handle::reset() {
  if (id_ >= 0 && closer_) closer_(id_);
  id_ = -1;
}

bool Group::exists(const std::string& name) const {
  // Check each path component so that nested names ("a/b") never error; a component that is not
  // a group ends the walk (a dataset has no children).
  std::string acc;
  size_t start = 0;
  if (!name.empty() && name[0] == '/') {
    acc = "/";
    start = 1;
  }
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (!part.empty()) {
      acc += (acc.empty() || acc == "/") ? part : "/" + part;
      const htri_t r = H5Lexists(id(), acc.c_str(), H5P_DEFAULT);
      if (r < 0) fail_h5(file_, "cannot look up " + join(path_, acc));
      if (r == 0) return false;
      const bool more = slash != std::string::npos && name.find_first_not_of('/', slash) != std::string::npos;
      if (more && object_type(id(), acc, file_, join(path_, acc)) != H5O_TYPE_GROUP) return false;
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

Group Group::child(const std::string& name) {
  if (exists(name)) return open_group(name);
  // One level at a time, so that every new group gets our creation properties (compact storage).
  if (const auto slash = name.find_last_of('/'); slash != std::string::npos && slash > 0 && name[0] != '/') {
    Group parent = child(name.substr(0, slash));
    Group g = parent.child(name.substr(slash + 1));
    return Group(std::move(g.h_), join(path_, name), file_);
  }
  Handle gcpl = detail::group_create_plist();
  hid_t g = H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, gcpl.valid() ? gcpl.get() : H5P_DEFAULT, H5P_DEFAULT);
  check_id(g, file_, "cannot create group " + join(path_, name));
  return Group(Handle(g, H5Gclose), join(path_, name), file_);
}

Group Group::open_group(const std::string& name) const {
  if (!exists(name)) fail(file_, "no group " + join(path_, name));
  if (object_type(id(), name, file_, join(path_, name)) != H5O_TYPE_GROUP)
    fail(file_, join(path_, name) + " is not a group");
  hid_t g = H5Gopen2(id(), name.c_str(), H5P_DEFAULT);
  check_id(g, file_, "cannot open group " + join(path_, name));
  return Group(Handle(g, H5Gclose), join(path_, name), file_);
}

std::vector<std::string> Group::list() const {
  std::vector<std::string> names;
  H5G_info_t info;
  check_ok(H5Gget_info(id(), &info), file_, "cannot list " + path_);
  // Each link takes bytes in the file; more links than bytes means a corrupt count.
  if (info.nlinks > detail::file_bytes(id(), file_)) fail(file_, "group " + path_ + " claims an impossible number of members");
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t n = H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) fail_h5(file_, "cannot list " + path_);
    if (n > 65535) fail(file_, "a member of " + path_ + " has an impossibly long name");
    std::string s(static_cast<size_t>(n), '\0');
    if (H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size() + 1, H5P_DEFAULT) < 0)
      fail_h5(file_, "cannot list " + path_);
    names.push_back(s);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// ---- writing datasets ----
namespace {
void write_raw(hid_t loc, const std::string& file, const std::string& full, const std::string& name,
               hid_t mem_type, hid_t file_type, const void* data, const std::vector<hsize_t>& dims,
               WriteOptions o) {
  Handle space = checked(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose, file,
                         "cannot create the dataspace of " + full);
  Handle dcpl = make_dcpl(dims, o, file);
  Handle lcpl = checked(H5Pcreate(H5P_LINK_CREATE), H5Pclose, file, "cannot create link properties");
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  hid_t ds = H5Dcreate2(loc, name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT);
  Handle dh(check_id(ds, file, "cannot create dataset " + full + " (does it exist already?)"), H5Dclose);
  hsize_t total = 1;
  for (hsize_t d : dims) total *= d;
  if (total > 0) check_ok(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), file, "cannot write " + full);
}
}  // namespace

void Group::write(const std::string& name, const Eigen::Ref<const Eigen::MatrixXd>& m, WriteOptions o) {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rm = m;
  write_raw(id(), file_, join(path_, name), name, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, rm.data(),
            {static_cast<hsize_t>(m.rows()), static_cast<hsize_t>(m.cols())}, o);
}
void Group::write_f32(const std::string& name, const Eigen::Ref<const Eigen::MatrixXf>& m, WriteOptions o) {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rm = m;
  write_raw(id(), file_, join(path_, name), name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, rm.data(),
            {static_cast<hsize_t>(m.rows()), static_cast<hsize_t>(m.cols())}, o);
}
void Group::write(const std::string& name, std::span<const double> v, WriteOptions o) {
  write_raw(id(), file_, join(path_, name), name, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, v.data(),
            {static_cast<hsize_t>(v.size())}, o);
}
void Group::write(const std::string& name, std::span<const float> v, WriteOptions o) {
  write_raw(id(), file_, join(path_, name), name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, v.data(),
            {static_cast<hsize_t>(v.size())}, o);
}
void Group::write(const std::string& name, std::span<const std::int64_t> v, WriteOptions o) {
  write_raw(id(), file_, join(path_, name), name, H5T_NATIVE_INT64, H5T_STD_I64LE, v.data(),
            {static_cast<hsize_t>(v.size())}, o);
}
void Group::write_nd(const std::string& name, std::span<const double> data,
                     const std::vector<std::int64_t>& shape, WriteOptions o) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hsize_t total = 1;
  for (auto d : dims) total *= d;
  MEMCAP_ASSERT(total == data.size(), "write_nd: shape does not match data size");
  write_raw(id(), file_, join(path_, name), name, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, data.data(), dims, o);
}

void Group::write(const std::string& name, const std::vector<std::string>& v) {
  Handle type = checked(H5Tcopy(H5T_C_S1), H5Tclose, file_, "cannot create a string type");
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  std::vector<const char*> ptrs;
  ptrs.reserve(v.size());
  for (auto& s : v) ptrs.push_back(s.c_str());
  write_raw(id(), file_, join(path_, name), name, type.get(), type.get(), ptrs.data(),
            {static_cast<hsize_t>(v.size())}, {});
}

// ---- reading datasets ----
namespace {

struct OpenDs {
  Handle ds, space, type;  // type: the dataset's file type
  std::vector<hsize_t> dims;
  hsize_t total = 0;
};

// Opens dataset `name` and validates its shape: rank <= 32, no overflow, and (to_read) no more
// bytes than the file could hold (its size, or a deflate ratio of it when the data is filtered or
// not yet allocated), so a corrupt shape fails before anything is allocated.
OpenDs open_ds(const Group& g, const std::string& name, bool to_read = true) {
  const std::string& file = g.filename();
  const std::string full = join(g.path(), name);
  if (!g.is_dataset(name)) fail(file, "no dataset " + full);
  OpenDs o;
  o.ds = checked(H5Dopen2(g.id(), name.c_str(), H5P_DEFAULT), H5Dclose, file, "cannot open dataset " + full);
  o.space = checked(H5Dget_space(o.ds.get()), H5Sclose, file, "cannot read the shape of " + full);
  o.type = checked(H5Dget_type(o.ds.get()), H5Tclose, file, "cannot read the type of " + full);
  const H5S_class_t cls = H5Sget_simple_extent_type(o.space.get());
  if (cls == H5S_NO_CLASS) fail_h5(file, "cannot read the shape of " + full);
  const int rank = H5Sget_simple_extent_ndims(o.space.get());
  if (rank < 0 || rank > detail::kMaxRank) fail(file, fmt::format("{} has an impossible rank {}", full, rank));
  o.dims.resize(static_cast<size_t>(rank));
  if (rank > 0) check_ok(H5Sget_simple_extent_dims(o.space.get(), o.dims.data(), nullptr), file, "cannot read the shape of " + full);
  o.total = cls == H5S_NULL ? 0 : 1;
  for (hsize_t d : o.dims) {
    if (d != 0 && o.total > (hsize_t{1} << 62) / d) fail(file, full + " claims an impossibly large shape (corrupt file?)");
    o.total *= d;
  }
  const size_t elem = H5Tget_size(o.type.get());
  if (elem == 0) fail_h5(file, "cannot read the type of " + full);
  if (o.total == 0 || !to_read) return o;
  const std::uint64_t fsize = detail::file_bytes(o.ds.get(), file);
  Handle dcpl = checked(H5Dget_create_plist(o.ds.get()), H5Pclose, file, "cannot read the storage of " + full);
  const int nfilters = H5Pget_nfilters(dcpl.get());
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
  if (nfilters < 0 || layout < 0 || H5Dget_space_status(o.ds.get(), &status) < 0)
    fail_h5(file, "cannot read the storage of " + full);
  const bool stored_plain = nfilters == 0 && layout != H5D_CHUNKED && status == H5D_SPACE_STATUS_ALLOCATED;
  const long double limit = stored_plain ? static_cast<long double>(fsize)
                                         : static_cast<long double>(fsize) * detail::kMaxCompressionRatio + (1 << 20);
  const long double bytes = static_cast<long double>(o.total) * static_cast<long double>(elem);
  if (bytes > limit)
    fail(file, fmt::format("{} claims {} elements of {} bytes, more than a file of {} bytes can hold (corrupt file?)",
                           full, o.total, elem, fsize));
  return o;
}

bool valid_utf8(const char* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    i += len;
  }
  return true;
}

}  // namespace

std::string detail::checked_text(const char* p, size_t max_len, const std::string& file, const std::string& what) {
  if (!p) return "";
  const size_t n = strnlen(p, std::min<size_t>(max_len, kMaxStringBytes));
  if (!valid_utf8(p, n)) fail(file, what + " holds text that is not valid UTF-8 (corrupt file?)");
  return std::string(p, n);
}

bool Group::is_dataset(const std::string& name) const {
  if (!exists(name)) return false;
  return object_type(id(), name, file_, join(path_, name)) == H5O_TYPE_DATASET;
}

std::vector<std::int64_t> Group::shape(const std::string& name) const {
  auto o = open_ds(*this, name, false);
  return {o.dims.begin(), o.dims.end()};
}

char Group::dataset_kind(const std::string& name) const {
  auto o = open_ds(*this, name, false);
  switch (H5Tget_class(o.type.get())) {
    case H5T_FLOAT: return 'f';
    case H5T_INTEGER: return 'i';
    case H5T_STRING: return 's';
    default: return '?';
  }
}

namespace {
void read_numbers(const Group& g, const std::string& name, hid_t mem_type, void* out, const OpenDs& o) {
  const std::string full = join(g.path(), name);
  const auto cls = H5Tget_class(o.type.get());
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) fail(g.filename(), full + " is not numeric");
  if (H5Tget_size(o.type.get()) > 16) fail(g.filename(), full + " has an unsupported number size");
  check_ok(H5Dread(o.ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), g.filename(), "cannot read " + full);
}
}  // namespace

std::vector<double> Group::read_doubles(const std::string& name) const {
  auto o = open_ds(*this, name);
  std::vector<double> v(o.total);
  if (o.total > 0) read_numbers(*this, name, H5T_NATIVE_DOUBLE, v.data(), o);
  return v;
}

Eigen::MatrixXd Group::read_matrix(const std::string& name) const {
  auto dims = shape(name);
  if (dims.size() > 2) fail(file_, join(path_, name) + " has rank > 2, expected a matrix");
  const auto rows = dims.empty() ? 1 : dims[0];
  const auto cols = dims.size() == 2 ? dims[1] : 1;
  auto v = read_doubles(name);
  if (static_cast<std::int64_t>(v.size()) != rows * cols) fail(file_, join(path_, name) + " changed shape while read");
  Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> m(v.data(), rows, cols);
  return m;
}

std::vector<std::int64_t> Group::read_int64s(const std::string& name) const {
  auto o = open_ds(*this, name);
  std::vector<std::int64_t> v(o.total);
  if (o.total > 0) read_numbers(*this, name, H5T_NATIVE_INT64, v.data(), o);
  return v;
}

std::vector<std::string> Group::read_strings(const std::string& name) const {
  const std::string full = join(path_, name);
  auto o = open_ds(*this, name);
  if (H5Tget_class(o.type.get()) != H5T_STRING) fail(file_, full + " is not a string dataset");
  std::vector<std::string> out(o.total);
  if (o.total == 0) return out;
  const htri_t vlen = H5Tis_variable_str(o.type.get());
  if (vlen < 0) fail_h5(file_, "cannot read the type of " + full);
  if (vlen > 0) {
    if (auto raw = detail::read_vlen_strings_raw(o.ds.get(), o.total, file_, full)) return std::move(*raw);
    Handle mtype = checked(H5Tcopy(H5T_C_S1), H5Tclose, file_, "cannot create a string type");
    H5Tset_size(mtype.get(), H5T_VARIABLE);
    H5Tset_cset(mtype.get(), H5Tget_cset(o.type.get()) == H5T_CSET_UTF8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
    std::vector<char*> ptrs(o.total, nullptr);
    check_ok(H5Dread(o.ds.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), file_, "cannot read " + full);
    try {
      for (hsize_t i = 0; i < o.total; ++i) out[i] = detail::checked_text(ptrs[i], detail::kMaxStringBytes, file_, full);
    } catch (...) {
      H5Dvlen_reclaim(mtype.get(), o.space.get(), H5P_DEFAULT, ptrs.data());
      throw;
    }
    H5Dvlen_reclaim(mtype.get(), o.space.get(), H5P_DEFAULT, ptrs.data());
  } else {
    const size_t sz = H5Tget_size(o.type.get());
    if (sz > detail::kMaxStringBytes) fail(file_, full + " has an impossibly long string type (corrupt file?)");
    std::vector<char> buf(o.total * sz);
    check_ok(H5Dread(o.ds.get(), o.type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), file_, "cannot read " + full);
    for (hsize_t i = 0; i < o.total; ++i) {
      const char* p = buf.data() + i * sz;
      const size_t n = strnlen(p, sz);
      if (!valid_utf8(p, n)) fail(file_, full + " holds text that is not valid UTF-8 (corrupt file?)");
      out[i] = std::string(p, n);
    }
  }
  return out;
}

}  // namespace memcap::h5
