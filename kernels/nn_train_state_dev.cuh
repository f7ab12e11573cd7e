// Device-side reads of a TrainState (include from .cu files only): whether the current step is
// active, whether it is a recorded epoch, and the loss recording that sets the early-stop flags.
#pragma once
#include <cuda_runtime.h>

#include <cmath>

#include "nn_train_state.cuh"

namespace memcap::nn::cuda::dev {

// Null state = always active (plain layer use outside a training loop).
__device__ __forceinline__ bool step_active(const TrainState* st) {
  if (!st) return true;
  const volatile TrainState* v = st;
  return !v->stop && v->step < v->end;
}

// Active and a recorded epoch (step % record_every == 0, the last epoch, or the early-stop epoch).
__device__ __forceinline__ bool record_epoch(const TrainState* st) {
  if (!st) return true;
  const volatile TrainState* v = st;
  if (v->stop || v->step >= v->end) return false;
  const long long t = v->step;
  return (v->record_every <= 1 || t % v->record_every == 0) || t + 1 == v->end || v->stop_after;
}

// One thread records the loss of the current step: hist_loss[step] = loss; a non-finite loss sets
// nonfinite and stop (no update will run for this step); loss <= stop_loss sets stop_after.
__device__ __forceinline__ void record_loss(TrainState* st, double loss, double* hist_loss) {
  volatile TrainState* v = st;
  const long long t = v->step;
  hist_loss[t] = loss;
  if (!isfinite(loss)) {
    v->nonfinite = 1;
    v->stop = 1;
  } else if (loss <= v->stop_loss) {
    v->stop_after = 1;
  }
}

}  // namespace memcap::nn::cuda::dev
