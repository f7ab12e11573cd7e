// Device-side reads of a TrainState (include from .cu files only): whether the current step is
// active, whether it is a recorded epoch, and the loss recording that sets the early-stop flags.
#pragma once
#include <cuda_runtime.h>

#include <cmath>

#include "nn_device.cuh"
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

// The tail of a multi-block loss kernel, called by every thread of every block (after its early returns are
// done with): the block's (loss sum, correct count) go to block_part[2 · blockIdx.x ..], and the last block to
// finish (TrainState::loss_blocks_done) loads every block's pair at once (one L2 round trip, not one per block),
// sums them by a fixed tree (the same total whichever block finishes last), writes hist_correct[step] and, unless
// accuracy_only, records the mean loss total / N. s_sum: ≥ 32 doubles of shared memory.
__device__ __forceinline__ void record_block_totals(double loss, double correct, double* block_part, long long N,
                                                    TrainState* state, double* hist_loss, long long* hist_correct,
                                                    bool accuracy_only, double* s_sum) {
  __shared__ bool last;
  loss = block_sum(loss, s_sum);
  correct = block_sum(correct, s_sum);
  if (threadIdx.x == 0) {
    block_part[2 * blockIdx.x] = loss;
    block_part[2 * blockIdx.x + 1] = correct;
    __threadfence();
    last = atomicAdd(&state->loss_blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  double total = 0, cnt = 0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
    total += __ldcg(block_part + 2 * b);
    cnt += __ldcg(block_part + 2 * b + 1);
  }
  total = block_sum(total, s_sum);
  cnt = block_sum(cnt, s_sum);
  if (threadIdx.x == 0) {
    volatile TrainState* vs = state;
    vs->loss_blocks_done = 0;
    hist_correct[vs->step] = static_cast<long long>(cnt);
    if (!accuracy_only) record_loss(state, total / static_cast<double>(N), hist_loss);
  }
}

}  // namespace memcap::nn::cuda::dev
