// ArenaLayout: named views packed back to back (see arena.hpp).
#include "nn/arena.hpp"

#include <fmt/format.h>

namespace memcap::nn {

std::int64_t ArenaLayout::add(const std::string& name, const std::vector<std::int64_t>& shape) {
  require(!has(name), "arena tensor '{}' added twice", name);
  std::int64_t n = 1;
  for (const auto s : shape) {
    require(s >= 0, "arena tensor '{}' has a negative extent {}", name, s);
    n *= s;
  }
  TensorView v;
  v.name = name;
  v.offset = numel_;
  v.numel = n;
  v.shape = shape;
  views_.push_back(std::move(v));
  numel_ += n;
  return views_.back().offset;
}

bool ArenaLayout::has(const std::string& name) const {
  for (const auto& v : views_)
    if (v.name == name) return true;
  return false;
}

const TensorView& ArenaLayout::view(const std::string& name) const {
  for (const auto& v : views_)
    if (v.name == name) return v;
  MEMCAP_ASSERT(false, fmt::format("arena has no tensor '{}'", name));
  return views_.front();  // unreachable
}

}  // namespace memcap::nn
