/* device.h — the one place that knows which backends this build has: it
 * resolves train.device (auto, cpu, cuda) for a model, binds this rank's
 * GPU, and opens the backend and the training step on the chosen device.
 * The trainer, `rnn_dist eval` and bench_train go through it; it is the
 * only file outside src/backend/cuda/ that names RNND_HAVE_CUDA.
 *
 * What a device supports is asked of its backend (cuda_backend_supports),
 * not decided by each caller: with train.device = auto a model the GPU
 * cannot run (the adaptive decoder) falls back to the CPU with a warning;
 * with train.device = cuda it is a configuration error.
 *
 * Ownership: the backend and step opened here are the caller's, freed
 * with be->ops->destroy and step_destroy (the step first). */
#ifndef RNND_DEVICE_H
#define RNND_DEVICE_H

#include <stddef.h>

#include "rnnd/backend.h"
#include "rnnd/config.h"
#include "rnnd/step.h"

typedef struct {
  int cuda;        /* the CUDA backend and step, on the GPU named below */
  char name[160];  /* "cpu", or the GPU ("NVIDIA H100 ... device 0 of 8") */
} rnnd_device_choice;

/* requested: an rnnd_device (config.h); local_rank picks the GPU
 * (local_rank % visible GPUs). Bad requests end in rnnd_input_error. */
void device_choose(rnnd_device_choice *d, int requested, int local_rank, const rnnd_model_shape *shape);
rnnd_backend *device_open_backend(const rnnd_device_choice *d, const rnnd_layout *layout,
                                  const rnnd_backend_capacity *cap);
/* The host step on the CPU, the device-resident CUDA step on a GPU. */
rnnd_step *device_open_step(const rnnd_device_choice *d, rnnd_backend *be, float *params, rnnd_optimizer *opt,
                            const rnnd_step_options *o);
/* Bytes in use on the bound GPU (every context on it); 0 on the CPU. */
size_t device_used_bytes(const rnnd_device_choice *d);

#endif
