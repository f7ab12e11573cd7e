// Division of non-negative 64-bit indices by a divisor fixed at launch, without a division instruction sequence.
// An element-wise kernel that splits its flat index i into (row, column) with `i / C` and `i % C` on int64 pays a
// 64-bit division per element (a call of ~70 instructions on the GPU), which can cost more than the element's
// memory traffic. FastDivmod precomputes, on the host, a multiplier for the divisor (Granlund & Montgomery,
// "Division by invariant integers using multiplication", PLDI 1994, Fig. 4.1: the round-up method with the
// add-and-shift fix-up, exact for every dividend of 64 bits):
//   l = ceil(log2 d),  m = floor(2^64 (2^l − d) / d) + 1,  t = mulhi(m, n),
//   q = (t + ((n − t) >> min(l, 1))) >> max(l − 1, 0)
// so a quotient costs one 64-bit high multiply and a few integer operations. Usable from host code too (the
// high multiply through unsigned __int128 there), which is how tests/host_device/test_core_fast_divmod.cpp
// checks it against / and % on the CPU.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

namespace memcap::cuda_detail {

class FastDivmod {
 public:
  FastDivmod() = default;  // divisor 1
  // Host only: d must be in [1, 2^62] (every size a kernel sees).
  explicit FastDivmod(std::int64_t d) {
    if (d < 1 || d > (std::int64_t(1) << 62)) throw std::invalid_argument("FastDivmod: divisor out of range");
    d_ = static_cast<std::uint64_t>(d);
    int l = 0;
    while ((std::uint64_t(1) << l) < d_) ++l;  // l = ceil(log2 d) <= 62
    __extension__ const unsigned __int128 num = static_cast<unsigned __int128>((std::uint64_t(1) << l) - d_) << 64;
    m_ = static_cast<std::uint64_t>(num / d_) + 1;
    s1_ = l < 1 ? l : 1;
    s2_ = l > 1 ? l - 1 : 0;
  }
  __host__ __device__ __forceinline__ std::int64_t divisor() const { return static_cast<std::int64_t>(d_); }
  // n / d for 0 <= n < 2^63.
  __host__ __device__ __forceinline__ std::int64_t div(std::int64_t n) const {
    const std::uint64_t u = static_cast<std::uint64_t>(n);
    const std::uint64_t t = mulhi(m_, u);
    return static_cast<std::int64_t>((t + ((u - t) >> s1_)) >> s2_);
  }
  // q = n / d, r = n % d for 0 <= n < 2^63.
  __host__ __device__ __forceinline__ void divmod(std::int64_t n, std::int64_t& q, std::int64_t& r) const {
    q = div(n);
    r = n - q * static_cast<std::int64_t>(d_);
  }
  __host__ __device__ __forceinline__ std::int64_t mod(std::int64_t n) const {
    return n - div(n) * static_cast<std::int64_t>(d_);
  }

 private:
  __host__ __device__ __forceinline__ static std::uint64_t mulhi(std::uint64_t a, std::uint64_t b) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(a, b);
#else
    __extension__ typedef unsigned __int128 u128;
    return static_cast<std::uint64_t>((static_cast<u128>(a) * b) >> 64);
#endif
  }
  std::uint64_t d_ = 1, m_ = 1;
  int s1_ = 0, s2_ = 0;
};

}  // namespace memcap::cuda_detail
