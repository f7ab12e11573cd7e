// HDF5 RAII layer: attributes, dimension scales and object copies (see h5.hpp). Attribute reads
// check that the attribute holds exactly one value of the asked kind before reading into it.
#include <hdf5_hl.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <vector>

#include "core/error.hpp"
#include "io/h5_detail.hpp"

namespace memcap::h5 {
namespace {

using detail::check_id;
using detail::check_ok;
using detail::checked;
using detail::fail;
using detail::fail_h5;

std::string where(const Group& g, const std::string& name) {
  return fmt::format("attribute '{}' of {}", name, g.path());
}

void write_attr(const Group& g, const std::string& name, hid_t type, hid_t space, const void* data) {
  const htri_t ex = H5Aexists(g.id(), name.c_str());
  if (ex < 0) fail_h5(g.filename(), "cannot look up " + where(g, name));
  if (ex > 0) check_ok(H5Adelete(g.id(), name.c_str()), g.filename(), "cannot replace " + where(g, name));
  Handle a = checked(H5Acreate2(g.id(), name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                     g.filename(), "cannot create " + where(g, name));
  check_ok(H5Awrite(a.get(), type, data), g.filename(), "cannot write " + where(g, name));
}

Handle scalar_space(const Group& g) {
  return checked(H5Screate(H5S_SCALAR), H5Sclose, g.filename(), "cannot create a dataspace");
}

// An attribute opened for reading exactly one value (IoError when it holds more or none).
struct OneValue {
  Handle attr, type;
};
OneValue open_one(const Group& g, const std::string& name) {
  OneValue o;
  o.attr = checked(H5Aopen(g.id(), name.c_str(), H5P_DEFAULT), H5Aclose, g.filename(), "cannot open " + where(g, name));
  Handle space = checked(H5Aget_space(o.attr.get()), H5Sclose, g.filename(), "cannot read the shape of " + where(g, name));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) fail_h5(g.filename(), "cannot read the shape of " + where(g, name));
  if (n != 1) fail(g.filename(), fmt::format("{} holds {} values, expected one (corrupt file?)", where(g, name), n));
  o.type = checked(H5Aget_type(o.attr.get()), H5Tclose, g.filename(), "cannot read the type of " + where(g, name));
  return o;
}

template <typename T>
std::optional<T> read_number(const Group& g, const std::string& name, hid_t mem_type) {
  if (!g.has_attr(name)) return std::nullopt;
  const OneValue o = open_one(g, name);
  const auto cls = H5Tget_class(o.type.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) fail(g.filename(), where(g, name) + " is not a number");
  T v{};
  check_ok(H5Aread(o.attr.get(), mem_type, &v), g.filename(), "cannot read " + where(g, name));
  return v;
}

}  // namespace

void Group::attr(const std::string& name, double v) {
  Handle s = scalar_space(*this);
  write_attr(*this, name, H5T_NATIVE_DOUBLE, s.get(), &v);
}
void Group::attr(const std::string& name, std::int64_t v) {
  Handle s = scalar_space(*this);
  write_attr(*this, name, H5T_NATIVE_INT64, s.get(), &v);
}
void Group::attr(const std::string& name, const std::string& v) {
  Handle type = checked(H5Tcopy(H5T_C_S1), H5Tclose, file_, "cannot create a string type");
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle s = scalar_space(*this);
  const char* p = v.c_str();
  write_attr(*this, name, type.get(), s.get(), &p);
}
void Group::attr(const std::string& name, std::span<const double> v) {
  hsize_t n = v.size();
  Handle s = checked(H5Screate_simple(1, &n, nullptr), H5Sclose, file_, "cannot create a dataspace");
  write_attr(*this, name, H5T_NATIVE_DOUBLE, s.get(), v.data());
}

bool Group::has_attr(const std::string& name) const {
  const htri_t r = H5Aexists(id(), name.c_str());
  if (r < 0) fail_h5(file_, "cannot look up " + where(*this, name));
  return r > 0;
}

std::optional<std::string> Group::attr_string(const std::string& name) const {
  if (!has_attr(name)) return std::nullopt;
  const OneValue o = open_one(*this, name);
  if (H5Tget_class(o.type.get()) != H5T_STRING) fail(file_, where(*this, name) + " is not text");
  const htri_t vlen = H5Tis_variable_str(o.type.get());
  if (vlen < 0) fail_h5(file_, "cannot read the type of " + where(*this, name));
  if (vlen > 0) {
    Handle mt = checked(H5Tcopy(H5T_C_S1), H5Tclose, file_, "cannot create a string type");
    H5Tset_size(mt.get(), H5T_VARIABLE);
    H5Tset_cset(mt.get(), H5Tget_cset(o.type.get()) == H5T_CSET_UTF8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
    char* p = nullptr;
    check_ok(H5Aread(o.attr.get(), mt.get(), &p), file_, "cannot read " + where(*this, name));
    std::string s;
    try {
      s = detail::checked_text(p, detail::kMaxStringBytes, file_, where(*this, name));
    } catch (...) {
      H5free_memory(p);
      throw;
    }
    H5free_memory(p);
    return s;
  }
  const size_t sz = H5Tget_size(o.type.get());
  if (sz == 0 || sz > detail::kMaxStringBytes || sz > detail::file_bytes(o.attr.get(), file_))
    fail(file_, where(*this, name) + " has an impossible size (corrupt file?)");
  std::vector<char> buf(sz + 1, '\0');
  check_ok(H5Aread(o.attr.get(), o.type.get(), buf.data()), file_, "cannot read " + where(*this, name));
  return detail::checked_text(buf.data(), sz, file_, where(*this, name));
}

std::optional<double> Group::attr_double(const std::string& name) const {
  return read_number<double>(*this, name, H5T_NATIVE_DOUBLE);
}
std::optional<std::int64_t> Group::attr_int(const std::string& name) const {
  return read_number<std::int64_t>(*this, name, H5T_NATIVE_INT64);
}

void Group::attach_scales(const std::string& name, const std::vector<std::string>& scales) {
  const std::string full = path_ == "/" ? "/" + name : path_ + "/" + name;
  if (!is_dataset(name)) fail(file_, "no dataset " + full);
  Handle target = checked(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), H5Dclose, file_, "cannot open " + full);
  for (size_t k = 0; k < scales.size(); ++k) {
    const std::string& sname = scales[k];
    if (!is_dataset(sname)) fail(file_, "dimension scale " + sname + " does not exist");
    Handle sds = checked(H5Dopen2(id(), sname.c_str(), H5P_DEFAULT), H5Dclose, file_, "cannot open " + sname);
    const std::string label = sname.substr(sname.find_last_of('/') + 1);
    const htri_t is_scale = H5DSis_scale(sds.get());
    if (is_scale < 0) fail_h5(file_, "cannot inspect " + sname);
    if (is_scale == 0) check_ok(H5DSset_scale(sds.get(), label.c_str()), file_, "cannot make " + sname + " a scale");
    check_ok(H5DSattach_scale(target.get(), sds.get(), static_cast<unsigned>(k)), file_,
             "cannot attach scale " + sname + " to " + name);
    check_ok(H5DSset_label(target.get(), static_cast<unsigned>(k), label.c_str()), file_,
             "cannot label axis " + std::to_string(k) + " of " + name);
  }
}

namespace {
// Every variable-length string dataset below `name` decoded with its references checked
// (h5_heap.cpp) before H5Ocopy converts them: HDF5 trusts those unchecksummed references.
struct VisitState {
  std::string file, base;
  std::exception_ptr error;
};
herr_t check_strings_cb(hid_t obj, const char* name, const H5O_info_t* info, void* data) {
  auto* st = static_cast<VisitState*>(data);
  if (info->type != H5O_TYPE_DATASET) return 0;
  try {
    const std::string full = std::strcmp(name, ".") == 0 ? st->base : fmt::format("{}/{}", st->base, name);
    Handle ds = checked(H5Dopen2(obj, name, H5P_DEFAULT), H5Dclose, st->file, "cannot open dataset " + full);
    Handle type = checked(H5Dget_type(ds.get()), H5Tclose, st->file, "cannot read the type of " + full);
    if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) <= 0) return 0;
    Handle space = checked(H5Dget_space(ds.get()), H5Sclose, st->file, "cannot read the shape of " + full);
    const hssize_t n = H5Sget_simple_extent_npoints(space.get());
    if (n < 0) fail_h5(st->file, "cannot read the shape of " + full);
    if (n > 0) detail::read_vlen_strings_raw(ds.get(), static_cast<std::uint64_t>(n), st->file, full);
    return 0;
  } catch (...) {
    st->error = std::current_exception();
    return -1;
  }
}
}  // namespace

void Group::copy_to(const std::string& name, Group& dst, const std::string& dst_name) const {
  const std::string full = path_ == "/" ? "/" + name : path_ + "/" + name;
  VisitState st{file_, full, nullptr};
  const herr_t visited = H5Ovisit_by_name2(id(), name.c_str(), H5_INDEX_NAME, H5_ITER_INC, check_strings_cb, &st,
                                           H5O_INFO_BASIC, H5P_DEFAULT);
  if (st.error) std::rethrow_exception(st.error);
  if (visited < 0) fail_h5(file_, "cannot walk " + full);
  Handle lcpl = checked(H5Pcreate(H5P_LINK_CREATE), H5Pclose, file_, "cannot create link properties");
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  check_ok(H5Ocopy(id(), name.c_str(), dst.id(), dst_name.c_str(), H5P_DEFAULT, lcpl.get()), file_,
           "cannot copy " + (path_ == "/" ? "/" + name : path_ + "/" + name) + " to " + dst.filename());
}

}  // namespace memcap::h5
