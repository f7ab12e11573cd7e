// Flat parameter arenas in llm.c's shape: one contiguous array holds every parameter tensor of a
// model as a named view (name, offset, numel, shape); gradients and the two Adam moments are arenas
// of the same size and layout, allocated once. ArenaLayout is storage-free, so GPU code can lay
// out device buffers (gpu::Tensor) with the same offsets as a host ParamArena<T>.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace memcap::nn {

struct TensorView {
  std::string name;
  std::int64_t offset = 0;           // first element in the arena
  std::int64_t numel = 0;
  std::vector<std::int64_t> shape;   // row-major
};

// Ordered list of named views packed back to back (no padding).
class ArenaLayout {
 public:
  // Appends a tensor and returns its offset. UserError on a repeated name or a negative extent.
  std::int64_t add(const std::string& name, const std::vector<std::int64_t>& shape);
  bool has(const std::string& name) const;
  // The view of `name`; MEMCAP_ASSERT that it exists (a missing name is a programming error).
  const TensorView& view(const std::string& name) const;
  const std::vector<TensorView>& views() const { return views_; }
  std::int64_t numel() const { return numel_; }

 private:
  std::vector<TensorView> views_;
  std::int64_t numel_ = 0;
};

// Host arenas for parameters, gradients and Adam moments (all layout.numel() long, zero-filled by
// allocate()). T = double for the CPU reference; the GPU trainer keeps a ParamArena<double> as the
// host copy it initialises from and checkpoints to.
template <class T>
struct ParamArena {
  ArenaLayout layout;
  std::vector<T> params, grads, m, v;

  // Sizes every arena once the layout is complete; call once.
  void allocate() {
    const auto n = static_cast<std::size_t>(layout.numel());
    params.assign(n, T(0));
    grads.assign(n, T(0));
    m.assign(n, T(0));
    v.assign(n, T(0));
  }
  std::int64_t numel() const { return layout.numel(); }
  T* param(const std::string& name) { return params.data() + layout.view(name).offset; }
  T* grad(const std::string& name) { return grads.data() + layout.view(name).offset; }
  const T* param(const std::string& name) const { return params.data() + layout.view(name).offset; }
  const T* grad(const std::string& name) const { return grads.data() + layout.view(name).offset; }
  // Pointer into an arena for an optional tensor: nullptr when the layout has no such name.
  T* param_or_null(const std::string& name) { return layout.has(name) ? param(name) : nullptr; }
  T* grad_or_null(const std::string& name) { return layout.has(name) ? grad(name) : nullptr; }
  void zero_grads() { std::fill(grads.begin(), grads.end(), T(0)); }
};

}  // namespace memcap::nn
