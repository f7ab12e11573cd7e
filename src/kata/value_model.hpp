// Value models for `kata capacity` (spec §4.6 step 2): Gaussian values N(0, I/d_v), a random
// unit-vector codebook (items draw codewords; decoding searches the whole codebook), or one-hot
// values e_i (needs d_v >= K). Draws are nested in K like the keys.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

namespace memcap::kata {

enum class ValueModelType { gauss, codebook, onehot };

struct Values {
  Eigen::MatrixXd V;                 // K x d_v, the stored values
  Eigen::MatrixXd decode;            // rows searched by the decoder (V itself, or the codebook)
  std::vector<std::int64_t> target;  // index into `decode` that query i must return
};

class ValueModel {
 public:
  // spec: gauss | codebook[:size=N] (default N = 1024) | onehot. UserError otherwise.
  static ValueModel parse(const std::string& spec);
  const std::string& spec() const { return spec_; }
  ValueModelType type() const { return type_; }
  std::int64_t codebook_size() const { return size_; }
  // UserError when d_v cannot hold K values of this model (onehot needs d_v >= K).
  void check(std::int64_t K, std::int64_t d_v) const;
  Values draw(std::int64_t K, std::int64_t d_v, std::uint64_t trial_seed) const;

 private:
  std::string spec_;
  ValueModelType type_ = ValueModelType::gauss;
  std::int64_t size_ = 1024;
};

}  // namespace memcap::kata
