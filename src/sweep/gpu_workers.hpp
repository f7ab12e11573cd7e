// Where the jobs of a sweep run: the GPU ordinals of --devices, and one stream + library handles per
// worker thread (sweep::run_parallel), created on first use on the worker's GPU. Shared by every sweep
// that runs jobs on GPUs: hebb capacity, hebb ssfr capacity / noise / usability, ramnet recall.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "sweep/sweep.hpp"
#ifdef MEMCAP_HAVE_CUDA
#include "core/gpu.hpp"
#endif

namespace memcap::gpu { class Handles; }

namespace memcap::sweep {

// GPU ordinals of --devices (empty on the CPU). device_flag: the --device value, for the message.
inline std::vector<int> gpu_ordinals(const std::string& devices, Device device, const std::string& device_flag) {
  if (device != Device::cuda) {
    require(devices == "all", "--devices {} lists GPUs but this run uses the CPU (--device {})", devices, device_flag);
    return {};
  }
  int count = 0;
#ifdef MEMCAP_HAVE_CUDA
  count = gpu::device_count();
#endif
  std::vector<int> ords;
  if (devices == "all") {
    for (int i = 0; i < count; ++i) ords.push_back(i);
  } else {
    for (const std::string& tok : split_list(devices, ',', "--devices")) {
      char* end = nullptr;
      const long v = std::strtol(tok.c_str(), &end, 10);
      require(!tok.empty() && end && *end == '\0' && v >= 0 && v < count,
              "--devices wants all or GPU numbers 0..{} separated by commas (got '{}')", count - 1, devices);
      require(std::find(ords.begin(), ords.end(), static_cast<int>(v)) == ords.end(), "--devices lists GPU {} twice",
              v);
      ords.push_back(static_cast<int>(v));
    }
  }
  require(!ords.empty(), "--devices selects no GPU");
  return ords;
}

#ifdef MEMCAP_HAVE_CUDA
// One worker's stream and library handles, created on the worker's thread after set_device.
struct GpuWorker {
  int ordinal;
  memcap::gpu::Stream stream;
  memcap::gpu::Handles handles;
  explicit GpuWorker(int o) : ordinal(o), handles(stream) {}
};
// Destroys each worker's stream/handles with its own device current (on the main thread).
struct GpuWorkers {
  std::vector<std::unique_ptr<GpuWorker>> slots;
  ~GpuWorkers() {
    for (auto& w : slots) {
      if (!w) continue;
      try {
        memcap::gpu::set_device(w->ordinal);
      } catch (...) {
      }
      w.reset();
    }
  }
};
#endif

// The worker pool of one sweep: worker count from the ordinals and --jobs-per-gpu, and for a job the
// handles of its worker (nullptr on the CPU) and the path it records ("cpu", "cuda:<ordinal>").
class WorkerPool {
 public:
  WorkerPool(std::vector<int> ords, int jobs_per_gpu)
      : ords_(std::move(ords)), workers_(ords_.empty() ? 1 : static_cast<int>(ords_.size()) * jobs_per_gpu) {
#ifdef MEMCAP_HAVE_CUDA
    pool_.slots.resize(static_cast<std::size_t>(workers_));
#endif
  }
  int workers() const { return workers_; }
  memcap::gpu::Handles* handles(const JobContext& jc, std::string& path) {
    path = "cpu";
    (void)jc;
#ifdef MEMCAP_HAVE_CUDA
    if (!ords_.empty()) {
      const int ord = ords_[static_cast<std::size_t>(jc.worker) % ords_.size()];
      memcap::gpu::set_device(ord);
      auto& slot = pool_.slots[static_cast<std::size_t>(jc.worker)];
      if (!slot) slot = std::make_unique<GpuWorker>(ord);
      path = "cuda:" + std::to_string(ord);
      return &slot->handles;
    }
#endif
    return nullptr;
  }

 private:
  std::vector<int> ords_;
  int workers_;
#ifdef MEMCAP_HAVE_CUDA
  GpuWorkers pool_;
#endif
};

}  // namespace memcap::sweep
