// Counter-based random numbers (Random123 Philox4x32-10), identical on CPU and GPU.
// Every draw is a pure function of (seed, stream, index): no hidden state, so CPU and CUDA
// paths, shards and resumed runs see the same numbers. Header is usable from .cu files.
#pragma once
#include <Random123/philox.h>

#include <cmath>
#include <cstdint>
#include <string_view>

#if defined(__CUDACC__)
#define MEMCAP_HD __host__ __device__
#else
#define MEMCAP_HD
#endif

namespace memcap::rng {

// Named streams so that independent quantities never share numbers for the same seed.
enum Stream : std::uint64_t {
  kKeys = 1,
  kValues = 2,
  kMap = 3,
  kFeatureA0 = 10,
  kFeatureA1 = 11,
  kNtkGate = 12,
  kNtkProj = 13,
  kSpike = 20,
  kNoise = 21,
  kDictionary = 30,
  kQueries = 31,
  kGdInit = 40,     // GD-trained MLP init (U, G, D, biases: consecutive counter ranges)
  kSsfrTrain = 50,  // SSFR training batches (nn/ssfr_sequence.hpp: 1024 counters per sequence)
  kSsfrEval = 51,   // SSFR evaluation batches (same layout; batch ids per evaluation round)
  kSsfrEmbed = 52,  // SSFR junk and query-token embedding rows (sphere rows)
  kSsfrMapB = 53,   // SSFR evaluation map B (a fresh permutation of the F facts)
  kSsfrInit = 54,   // SSFR attention init W_q, W_k, W_v, W_o (consecutive d*d counter ranges)
  kUser = 1000,  // first free stream id for callers
};

// Four 32-bit words for one (seed, stream, counter) triple.
MEMCAP_HD inline r123::Philox4x32::ctr_type philox_block(std::uint64_t seed, std::uint64_t stream,
                                                         std::uint64_t counter) {
  r123::Philox4x32 gen;
  r123::Philox4x32::ctr_type c = {{static_cast<std::uint32_t>(counter),
                                   static_cast<std::uint32_t>(counter >> 32),
                                   static_cast<std::uint32_t>(stream),
                                   static_cast<std::uint32_t>(stream >> 32)}};
  r123::Philox4x32::key_type k = {
      {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
  return gen(c, k);
}

// 53-bit uniform in the open interval (0, 1).
MEMCAP_HD inline double u53(std::uint32_t hi, std::uint32_t lo) {
  std::uint64_t x = (static_cast<std::uint64_t>(hi) << 21) ^ (static_cast<std::uint64_t>(lo) >> 11);
  x &= (std::uint64_t(1) << 53) - 1;
  return (static_cast<double>(x) + 0.5) * (1.0 / 9007199254740992.0);
}

// Uniform (0,1) number #index of the stream.
MEMCAP_HD inline double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  auto r = philox_block(seed, stream, index);
  return u53(r[0], r[1]);
}

// Standard normal number #index of the stream (Box-Muller on one Philox block).
MEMCAP_HD inline double normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  auto r = philox_block(seed, stream, index);
  const double u1 = u53(r[0], r[1]);
  const double u2 = u53(r[2], r[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

// Uniform integer in [0, n) (n > 0), by 64-bit multiply-shift: bias < n / 2^64.
MEMCAP_HD inline std::uint64_t below(std::uint64_t seed, std::uint64_t stream, std::uint64_t index,
                                     std::uint64_t n) {
  auto r = philox_block(seed, stream, index);
  const std::uint64_t x = (static_cast<std::uint64_t>(r[0]) << 32) | r[1];
#if defined(__CUDA_ARCH__)
  return __umul64hi(x, n);
#else
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
#endif
}

// Stable 64-bit seed for a job: mixes a base seed with a job key string (FNV-1a then splitmix).
std::uint64_t derive_seed(std::uint64_t base_seed, std::string_view job_key);

// Sequential convenience wrapper over one (seed, stream): draws index 0, 1, 2, ...
class Stream64 {
 public:
  Stream64(std::uint64_t seed, std::uint64_t stream, std::uint64_t start = 0)
      : seed_(seed), stream_(stream), next_(start) {}
  double uniform() { return rng::uniform(seed_, stream_, next_++); }
  double normal() { return rng::normal(seed_, stream_, next_++); }
  std::uint64_t below(std::uint64_t n) { return rng::below(seed_, stream_, next_++, n); }
  std::uint64_t position() const { return next_; }

 private:
  std::uint64_t seed_, stream_, next_;
};

}  // namespace memcap::rng
