// Device-resident state of one GPU training loop, shared by the kernels of a captured multi-step CUDA
// graph: the step counter, the early-stop flags and the per-epoch Adam scalars live on the device,
// so one graph replays for every epoch and stopping is exact without a host sync per step.
// Plain structs (host and device code); the kernels that read/advance them are in nn_adam.cu and
// nn_gated_mlp_fused.cu (loss recording).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace memcap::nn::cuda {

// A step is "active" while !stop && step < end; every gated kernel of an inactive step returns at
// once (cuBLAS GEMMs of the generic path still run: their results are not used).
struct TrainState {
  long long step = 0;        // updates applied so far = index of the epoch whose forward runs next
  long long end = 0;         // total epochs: nothing runs once step >= end
  int stop = 0;              // 1: later steps are no-ops (early stop reached, or a non-finite loss)
  int stop_after = 0;        // 1: the loss kernel saw loss <= stop_loss; stop after this step's update
  int nonfinite = 0;         // 1: epoch `step` had a non-finite loss; no update was applied for it
  unsigned int blocks_done = 0;  // last-block counter of the update kernel (0 between steps)
  unsigned int loss_blocks_done = 0;  // last-block counter of the multi-block CE combine (0 between steps)
  double stop_loss = 0;      // early-stop threshold (loss <= stop_loss)
  long long record_every = 1;  // curve stride: kernels gated "at record epochs" run when step % this == 0,
                               // at the last epoch, or when stop_after is set
};

// Adam scalars of one epoch t (0-based; Adam step t+1), computed on the host with the exact formulas
// of nn::cpu::adam_update: step_size = lr_t / (1 − β1^(t+1)), bc2_sqrt = sqrt(1 − β2^(t+1)),
// decay = 1 − lr_t·weight_decay (AdamW).
struct AdamScalars {
  double step_size = 0;
  double bc2_sqrt = 1;
  double decay = 1;
};

// Scalars for epochs 0..epochs-1 of a cosine schedule lr_max -> lr_min (nn::cosine_lr).
std::vector<AdamScalars> adam_schedule(double lr_max, double lr_min, std::int64_t epochs, double beta1, double beta2,
                                       double weight_decay);

// bf16 copies of a gated MLP's weights that the Adam step refreshes as it writes them (GD precision bf16;
// the layouts of nn_gd_bf16.cuh): U [m][d_in] at arena offset U_off -> Ub [m_pad][dk], G likewise -> Gb,
// D [d_out][m] at D_off -> Db panels [m_pad/64][dk][64]. Pads are never written (they keep their zeros).
// Needs m·max(d_in, d_out) < 2^31. Ub == nullptr: no copies.
struct Bf16Mirror {
  __nv_bfloat16 *Ub = nullptr, *Gb = nullptr, *Db = nullptr;
  std::int64_t U_off = 0, G_off = 0, D_off = 0;
  int m = 0, d_in = 0, d_out = 0, dk = 0;
};

// Adam / AdamW step of a training loop over one flat arena of n parameters, gated by `st`: a no-op
// when the step is inactive; otherwise uses sched[st->step], sums the gradient over `nparts` partial
// arenas (g = Σ_r grads[r·part_stride + i], r in order), writes `mirror`'s bf16 copies of the new
// parameters (float only) and, in the last block to finish, advances st->step and turns stop_after into
// stop. One kernel launch; capturable.
template <class T>
void adam_step_gated(T* p, const T* grads, int nparts, std::int64_t part_stride, T* m, T* v, std::int64_t n,
                     const AdamScalars* sched, TrainState* st, double beta1, double beta2, double eps,
                     double weight_decay, bool adamw, cudaStream_t stream, const Bf16Mirror& mirror = {});

}  // namespace memcap::nn::cuda
