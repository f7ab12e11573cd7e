// Which compute path runs: --device auto|cpu|cuda resolved once, recorded in every result.
// No silent fallback: asking for cuda without a usable GPU is a DeviceError.
#pragma once
#include <string>

namespace memcap {

enum class Device { cpu, cuda };

struct DeviceInfo {
  Device device = Device::cpu;
  std::string name = "cpu";          // GPU name or "cpu"
  std::string compute_capability;    // e.g. "9.0"; empty on cpu
  std::string cuda_version;          // runtime version; empty on cpu
  std::string reason;                // why auto chose what it chose
};

// True when this build has CUDA and a GPU is visible; else false with *why filled.
bool cuda_available(std::string* why = nullptr);

// Parse "auto" / "cpu" / "cuda" and resolve to a concrete device (throws UserError/DeviceError).
DeviceInfo resolve_device(const std::string& request);

const char* to_string(Device d);

}  // namespace memcap
