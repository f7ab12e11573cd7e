// Wall-clock seconds for progress lines and the timing columns of result files (steady clock).
#pragma once
#include <chrono>

namespace memcap {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace memcap
