// Job-seed derivation for the sweep engine (see rng.hpp).
#include "core/rng.hpp"

namespace memcap::rng {
std::uint64_t derive_seed(std::uint64_t base_seed, std::string_view job_key) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : job_key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  std::uint64_t z = h ^ (base_seed + 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace memcap::rng
