// Device Philox draws against the host, bit for bit (label gpu): a tiny kernel evaluates rng::philox_block,
// uniform, below and normal on the GPU and the host recomputes them. Words, uniforms and below() must be
// identical; normal() goes through the device's double log/cos (CUDA: log 1 ulp, cos 2 ulp max error;
// glibc < 1 ulp), so it may differ in the last bits: tolerance kNormalMaxUlp, and the observed maximum
// is printed. Outputs are poisoned (all bits set: NaN / UINT64_MAX) so an unwritten element cannot pass.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/gpu.hpp"
#include "core/rng.hpp"

namespace {

constexpr std::int64_t kNormalMaxUlp = 8;  // budget for log (1) + cos (2) + product rounding, with margin

// One draw site: index and the n of below().
struct Site {
  std::uint64_t seed, stream, index, n;
};

__global__ void draw_kernel(const Site* sites, int count, std::uint32_t* words, double* uni, double* nor,
                            std::uint64_t* bel) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const Site s = sites[i];
  const auto r = memcap::rng::philox_block(s.seed, s.stream, s.index);
  for (int w = 0; w < 4; ++w) words[4 * i + w] = r[w];
  uni[i] = memcap::rng::uniform(s.seed, s.stream, s.index);
  nor[i] = memcap::rng::normal(s.seed, s.stream, s.index);
  bel[i] = memcap::rng::below(s.seed, s.stream, s.index, s.n);
}

// Distance in units in the last place between two finite doubles of the same sign (else huge).
std::int64_t ulp_distance(double a, double b) {
  std::int64_t ia, ib;
  std::memcpy(&ia, &a, 8);
  std::memcpy(&ib, &b, 8);
  if ((ia < 0) != (ib < 0)) return a == b ? 0 : INT64_MAX;
  return ia > ib ? ia - ib : ib - ia;
}

std::vector<Site> sites() {
  const std::uint64_t ns[] = {1, 2, 3, 10, 1000003, (std::uint64_t(1) << 40) + 7, ~std::uint64_t(0)};
  std::vector<Site> v;
  // Low indices of ordinary streams, a counter crossing 2^32 (low word wraps), 64-bit seeds/streams,
  // the counter's top, and the Random123 known-answer inputs.
  for (std::uint64_t i = 0; i < 2048; ++i) v.push_back({42, memcap::rng::kKeys, i, ns[i % 7]});
  for (std::uint64_t i = 0; i < 512; ++i) v.push_back({7, memcap::rng::kValues, 0xffffff00ull + i, ns[i % 7]});
  for (std::uint64_t i = 0; i < 512; ++i)
    v.push_back({0x9e3779b97f4a7c15ull, 0x0000000100000003ull + i, 0x85a308d3243f6a88ull + i, ns[(i + 3) % 7]});
  for (std::uint64_t i = 0; i < 64; ++i) v.push_back({~0ull, ~0ull, ~0ull - i, ns[i % 7]});
  v.push_back({0, 0, 0, 5});
  v.push_back({0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull, 5});
  return v;
}

}  // namespace

TEST_CASE("device Philox draws equal the host's (words, uniform, below bit for bit; normal within ulps)") {
  using memcap::gpu::Buffer;
  const std::vector<Site> host_sites = sites();
  const int n = static_cast<int>(host_sites.size());
  Buffer d_sites(sizeof(Site) * n), d_words(sizeof(std::uint32_t) * 4 * n), d_uni(sizeof(double) * n),
      d_nor(sizeof(double) * n), d_bel(sizeof(std::uint64_t) * n);
  MEMCAP_CUDA_CHECK(cudaMemcpy(d_sites.get(), host_sites.data(), d_sites.bytes(), cudaMemcpyHostToDevice));
  for (Buffer* b : {&d_words, &d_uni, &d_nor, &d_bel}) MEMCAP_CUDA_CHECK(cudaMemset(b->get(), 0xff, b->bytes()));
  draw_kernel<<<(n + 127) / 128, 128>>>(static_cast<const Site*>(d_sites.get()), n,
                                        static_cast<std::uint32_t*>(d_words.get()), static_cast<double*>(d_uni.get()),
                                        static_cast<double*>(d_nor.get()), static_cast<std::uint64_t*>(d_bel.get()));
  MEMCAP_CUDA_CHECK_LAUNCH("draw_kernel");
  MEMCAP_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint32_t> words(4 * static_cast<std::size_t>(n));
  std::vector<double> uni(n), nor(n);
  std::vector<std::uint64_t> bel(n);
  MEMCAP_CUDA_CHECK(cudaMemcpy(words.data(), d_words.get(), d_words.bytes(), cudaMemcpyDeviceToHost));
  MEMCAP_CUDA_CHECK(cudaMemcpy(uni.data(), d_uni.get(), d_uni.bytes(), cudaMemcpyDeviceToHost));
  MEMCAP_CUDA_CHECK(cudaMemcpy(nor.data(), d_nor.get(), d_nor.bytes(), cudaMemcpyDeviceToHost));
  MEMCAP_CUDA_CHECK(cudaMemcpy(bel.data(), d_bel.get(), d_bel.bytes(), cudaMemcpyDeviceToHost));

  int word_bad = 0, uni_bad = 0, bel_bad = 0, nor_diff = 0;
  std::int64_t nor_max_ulp = 0;
  for (int i = 0; i < n; ++i) {
    const Site& s = host_sites[i];
    const auto r = memcap::rng::philox_block(s.seed, s.stream, s.index);
    for (int w = 0; w < 4; ++w) word_bad += words[4 * i + w] != r[w];
    const double u = memcap::rng::uniform(s.seed, s.stream, s.index);
    uni_bad += std::memcmp(&u, &uni[i], 8) != 0;
    bel_bad += bel[i] != memcap::rng::below(s.seed, s.stream, s.index, s.n);
    const double z = memcap::rng::normal(s.seed, s.stream, s.index);
    const std::int64_t ulp = ulp_distance(z, nor[i]);
    nor_diff += ulp != 0;
    nor_max_ulp = ulp > nor_max_ulp ? ulp : nor_max_ulp;
  }
  // Random123 kat_vectors "philox4x32 10" on the device (the last two sites).
  const std::uint32_t kat0[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  const std::uint32_t kat2[4] = {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u};
  for (int w = 0; w < 4; ++w) {
    CHECK(words[4 * (n - 2) + w] == kat0[w]);
    CHECK(words[4 * (n - 1) + w] == kat2[w]);
  }
  std::printf("device vs host Philox over %d sites: %d word, %d uniform, %d below mismatches; normal: %d differ, "
              "max %lld ulp (budget %lld)\n",
              n, word_bad, uni_bad, bel_bad, nor_diff, static_cast<long long>(nor_max_ulp),
              static_cast<long long>(kNormalMaxUlp));
  CHECK(word_bad == 0);
  CHECK(uni_bad == 0);
  CHECK(bel_bad == 0);
  CHECK(nor_max_ulp <= kNormalMaxUlp);
}
