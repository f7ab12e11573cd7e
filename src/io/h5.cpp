// HDF5 RAII layer implementation (see h5.hpp). HDF5's own error stack printing is silenced;
// every failure is rethrown as IoError with the file and object named.
#include "io/h5.hpp"

#include <hdf5_hl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>

#include "core/error.hpp"

namespace memcap::h5 {
namespace {

void silence_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

std::string join(const std::string& path, const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  return path == "/" ? "/" + name : path + "/" + name;
}

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw IoError(fmt::format("HDF5 file '{}': {}", file, what));
}

hid_t check(hid_t id, const std::string& file, const std::string& what) {
  if (id < 0) fail(file, what);
  return id;
}
void check(herr_t st, const std::string& file, const std::string& what, int) {
  if (st < 0) fail(file, what);
}

Handle make_dcpl(const std::vector<hsize_t>& dims, WriteOptions o) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  Handle h(dcpl, H5Pclose);
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
  H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  H5Pset_shuffle(dcpl);
  H5Pset_deflate(dcpl, 4);
  return h;
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
  // Check each path component so that nested names ("a/b") never error.
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
      if (H5Lexists(id(), acc.c_str(), H5P_DEFAULT) <= 0) return false;
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

Group Group::child(const std::string& name) {
  if (exists(name)) return open_group(name);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  hid_t g = H5Gcreate2(id(), name.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT);
  check(g, file_, "cannot create group " + join(path_, name));
  return Group(Handle(g, H5Gclose), join(path_, name), file_);
}

Group Group::open_group(const std::string& name) const {
  if (!exists(name)) fail(file_, "no group " + join(path_, name));
  hid_t g = H5Gopen2(id(), name.c_str(), H5P_DEFAULT);
  check(g, file_, join(path_, name) + " is not a group");
  return Group(Handle(g, H5Gclose), join(path_, name), file_);
}

std::vector<std::string> Group::list() const {
  std::vector<std::string> names;
  H5G_info_t info;
  check(H5Gget_info(id(), &info), file_, "cannot list " + path_, 0);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t n = H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) fail(file_, "cannot list " + path_);
    std::string s(static_cast<size_t>(n), '\0');
    H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size() + 1, H5P_DEFAULT);
    names.push_back(s);
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {
void write_raw(hid_t loc, const std::string& file, const std::string& full, const std::string& name,
               hid_t mem_type, hid_t file_type, const void* data, const std::vector<hsize_t>& dims,
               WriteOptions o) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle dcpl = make_dcpl(dims, o);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  hid_t ds = H5Dcreate2(loc, name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT);
  Handle dh(check(ds, file, "cannot create dataset " + full + " (does it exist already?)"), H5Dclose);
  hsize_t total = 1;
  for (hsize_t d : dims) total *= d;
  if (total > 0)
    check(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), file, "cannot write " + full, 0);
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
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  std::vector<const char*> ptrs;
  ptrs.reserve(v.size());
  for (auto& s : v) ptrs.push_back(s.c_str());
  write_raw(id(), file_, join(path_, name), name, type.get(), type.get(), ptrs.data(),
            {static_cast<hsize_t>(v.size())}, {});
}

namespace {
struct OpenDs {
  Handle ds, space;
  std::vector<hsize_t> dims;
};
OpenDs open_ds(hid_t loc, const std::string& file, const std::string& full, const std::string& name,
               bool exists) {
  if (!exists) fail(file, "no dataset " + full);
  OpenDs o;
  hid_t ds = H5Dopen2(loc, name.c_str(), H5P_DEFAULT);
  o.ds = Handle(check(ds, file, full + " is not a dataset"), H5Dclose);
  o.space = Handle(H5Dget_space(ds), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(o.space.get());
  o.dims.resize(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(o.space.get(), o.dims.data(), nullptr);
  return o;
}
}  // namespace

bool Group::is_dataset(const std::string& name) const {
  if (!exists(name)) return false;
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info;
  if (H5Oget_info_by_name3(id(), name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return false;
#else
  H5O_info_t info;
  if (H5Oget_info_by_name2(id(), name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) return false;
#endif
  return info.type == H5O_TYPE_DATASET;
}

std::vector<std::int64_t> Group::shape(const std::string& name) const {
  auto o = open_ds(id(), file_, join(path_, name), name, is_dataset(name));
  return {o.dims.begin(), o.dims.end()};
}

char Group::dataset_kind(const std::string& name) const {
  auto o = open_ds(id(), file_, join(path_, name), name, is_dataset(name));
  Handle t(H5Dget_type(o.ds.get()), H5Tclose);
  switch (H5Tget_class(t.get())) {
    case H5T_FLOAT: return 'f';
    case H5T_INTEGER: return 'i';
    case H5T_STRING: return 's';
    default: return '?';
  }
}

std::vector<double> Group::read_doubles(const std::string& name) const {
  const std::string full = join(path_, name);
  auto o = open_ds(id(), file_, full, name, is_dataset(name));
  Handle t(H5Dget_type(o.ds.get()), H5Tclose);
  auto cls = H5Tget_class(t.get());
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) fail(file_, full + " is not numeric");
  hsize_t total = 1;
  for (auto d : o.dims) total *= d;
  std::vector<double> v(total);
  if (total > 0)
    check(H5Dread(o.ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), file_,
          "cannot read " + full, 0);
  return v;
}

Eigen::MatrixXd Group::read_matrix(const std::string& name) const {
  auto dims = shape(name);
  if (dims.size() > 2) fail(file_, join(path_, name) + " has rank > 2, expected a matrix");
  const auto rows = dims.empty() ? 1 : dims[0];
  const auto cols = dims.size() == 2 ? dims[1] : 1;
  auto v = read_doubles(name);
  Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> m(v.data(), rows, cols);
  return m;
}

std::vector<std::int64_t> Group::read_int64s(const std::string& name) const {
  const std::string full = join(path_, name);
  auto o = open_ds(id(), file_, full, name, is_dataset(name));
  hsize_t total = 1;
  for (auto d : o.dims) total *= d;
  std::vector<std::int64_t> v(total);
  if (total > 0)
    check(H5Dread(o.ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), file_,
          "cannot read " + full + " as integers", 0);
  return v;
}

std::vector<std::string> Group::read_strings(const std::string& name) const {
  const std::string full = join(path_, name);
  auto o = open_ds(id(), file_, full, name, is_dataset(name));
  Handle ftype(H5Dget_type(o.ds.get()), H5Tclose);
  if (H5Tget_class(ftype.get()) != H5T_STRING) fail(file_, full + " is not a string dataset");
  hsize_t total = 1;
  for (auto d : o.dims) total *= d;
  std::vector<std::string> out(total);
  if (total == 0) return out;
  if (H5Tis_variable_str(ftype.get()) > 0) {
    Handle mtype(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mtype.get(), H5T_VARIABLE);
    H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get()));
    std::vector<char*> ptrs(total, nullptr);
    check(H5Dread(o.ds.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), file_,
          "cannot read " + full, 0);
    for (hsize_t i = 0; i < total; ++i) out[i] = ptrs[i] ? ptrs[i] : "";
    H5Dvlen_reclaim(mtype.get(), o.space.get(), H5P_DEFAULT, ptrs.data());
  } else {
    size_t sz = H5Tget_size(ftype.get());
    std::vector<char> buf(total * sz);
    check(H5Dread(o.ds.get(), ftype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), file_,
          "cannot read " + full, 0);
    for (hsize_t i = 0; i < total; ++i) {
      const char* p = buf.data() + i * sz;
      out[i] = std::string(p, strnlen(p, sz));
    }
  }
  return out;
}

// ---- attributes ----
namespace {
void write_attr(hid_t obj, const std::string& file, const std::string& name, hid_t type, hid_t space,
                const void* data) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  hid_t a = H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  Handle ah(check(a, file, "cannot create attribute " + name), H5Aclose);
  check(H5Awrite(a, type, data), file, "cannot write attribute " + name, 0);
}
}  // namespace

void Group::attr(const std::string& name, double v) {
  Handle s(H5Screate(H5S_SCALAR), H5Sclose);
  write_attr(id(), file_, name, H5T_NATIVE_DOUBLE, s.get(), &v);
}
void Group::attr(const std::string& name, std::int64_t v) {
  Handle s(H5Screate(H5S_SCALAR), H5Sclose);
  write_attr(id(), file_, name, H5T_NATIVE_INT64, s.get(), &v);
}
void Group::attr(const std::string& name, const std::string& v) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle s(H5Screate(H5S_SCALAR), H5Sclose);
  const char* p = v.c_str();
  write_attr(id(), file_, name, type.get(), s.get(), &p);
}
void Group::attr(const std::string& name, std::span<const double> v) {
  hsize_t n = v.size();
  Handle s(H5Screate_simple(1, &n, nullptr), H5Sclose);
  write_attr(id(), file_, name, H5T_NATIVE_DOUBLE, s.get(), v.data());
}
bool Group::has_attr(const std::string& name) const { return H5Aexists(id(), name.c_str()) > 0; }

std::optional<std::string> Group::attr_string(const std::string& name) const {
  if (!has_attr(name)) return std::nullopt;
  Handle a(H5Aopen(id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  Handle ft(H5Aget_type(a.get()), H5Tclose);
  if (H5Tget_class(ft.get()) != H5T_STRING) return std::nullopt;
  if (H5Tis_variable_str(ft.get()) > 0) {
    Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.get(), H5T_VARIABLE);
    H5Tset_cset(mt.get(), H5Tget_cset(ft.get()));
    char* p = nullptr;
    if (H5Aread(a.get(), mt.get(), &p) < 0) return std::nullopt;
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  size_t sz = H5Tget_size(ft.get());
  std::string s(sz, '\0');
  if (H5Aread(a.get(), ft.get(), s.data()) < 0) return std::nullopt;
  s.resize(strnlen(s.c_str(), sz));
  return s;
}
std::optional<double> Group::attr_double(const std::string& name) const {
  if (!has_attr(name)) return std::nullopt;
  Handle a(H5Aopen(id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  double v = NAN;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) return std::nullopt;
  return v;
}
std::optional<std::int64_t> Group::attr_int(const std::string& name) const {
  if (!has_attr(name)) return std::nullopt;
  Handle a(H5Aopen(id(), name.c_str(), H5P_DEFAULT), H5Aclose);
  std::int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0) return std::nullopt;
  return v;
}

void Group::attach_scales(const std::string& name, const std::vector<std::string>& scales) {
  auto target = open_ds(id(), file_, join(path_, name), name, is_dataset(name));
  for (size_t k = 0; k < scales.size(); ++k) {
    const std::string& sname = scales[k];
    if (!is_dataset(sname)) fail(file_, "dimension scale " + sname + " does not exist");
    Handle sds(H5Dopen2(id(), sname.c_str(), H5P_DEFAULT), H5Dclose);
    if (H5DSis_scale(sds.get()) <= 0) {
      std::string label = sname.substr(sname.find_last_of('/') + 1);
      check(H5DSset_scale(sds.get(), label.c_str()), file_, "cannot make " + sname + " a scale", 0);
    }
    check(H5DSattach_scale(target.ds.get(), sds.get(), static_cast<unsigned>(k)), file_,
          "cannot attach scale " + sname + " to " + name, 0);
    std::string label = sname.substr(sname.find_last_of('/') + 1);
    H5DSset_label(target.ds.get(), static_cast<unsigned>(k), label.c_str());
  }
}

void Group::copy_to(const std::string& name, Group& dst, const std::string& dst_name) const {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  check(H5Ocopy(id(), name.c_str(), dst.id(), dst_name.c_str(), H5P_DEFAULT, lcpl.get()), file_,
        "cannot copy " + join(path_, name) + " to " + dst.filename(), 0);
}

// ---- files ----
bool is_hdf5(const std::string& path) {
  silence_hdf5();
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
#if H5_VERSION_GE(1, 12, 0)
  return H5Fis_accessible(path.c_str(), H5P_DEFAULT) > 0;
#else
  return H5Fis_hdf5(path.c_str()) > 0;
#endif
}

File File::create(const std::string& path) {
  silence_hdf5();
  // Default (earliest) file format on purpose: attributes stay in the object header. With the
  // 1.8+ format, groups with more than 8 attributes switch to dense storage, and HDF5 1.10's
  // H5Ocopy crashes copying dense variable-length string attributes (seen on Debian 12).
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) throw IoError(fmt::format("cannot create HDF5 file '{}' (does the folder exist and is it writable?)", path));
  File file;
  file.h_ = Handle(f, H5Fclose);
  file.path_ = "/";
  file.file_ = path;
  return file;
}

File File::open_read(const std::string& path) {
  silence_hdf5();
  if (access(path.c_str(), R_OK) != 0) throw IoError(fmt::format("cannot read '{}': no such file or not readable", path));
  if (!is_hdf5(path)) throw IoError(fmt::format("'{}' is not an HDF5 file", path));
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw IoError(fmt::format("cannot open HDF5 file '{}' (corrupt or locked? on cluster file systems set HDF5_USE_FILE_LOCKING=FALSE)", path));
  File file;
  file.h_ = Handle(f, H5Fclose);
  file.path_ = "/";
  file.file_ = path;
  return file;
}

File File::open_rw(const std::string& path) {
  silence_hdf5();
  if (!is_hdf5(path)) throw IoError(fmt::format("'{}' is missing or not an HDF5 file", path));
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) throw IoError(fmt::format("cannot open HDF5 file '{}' for writing", path));
  File file;
  file.h_ = Handle(f, H5Fclose);
  file.path_ = "/";
  file.file_ = path;
  return file;
}

void File::flush() {
  if (h_.valid()) check(H5Fflush(id(), H5F_SCOPE_GLOBAL), file_, "flush failed", 0);
}
void File::close() { h_.reset(); }

}  // namespace memcap::h5
