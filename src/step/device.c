/* device.c — which device a run uses, and opening backend and step on it
 * (device.h). */
#include "rnnd/device.h"

#include <stdio.h>

#include "rnnd/common.h"
#ifdef RNND_HAVE_CUDA
#include "rnnd/cuda_backend.h"
#endif

#ifdef RNND_HAVE_CUDA
/* auto: the GPU when one is visible and its backend runs this model. */
static int pick_cuda(int requested, const rnnd_model_shape *shape) {
  const char *why_not = cuda_backend_supports(shape);
  if (requested == RNND_DEVICE_CPU) return 0;
  if (requested == RNND_DEVICE_CUDA) {
    if (why_not) rnnd_input_error("config: %s on the CUDA backend (set train.device = cpu)", why_not);
    return 1;
  }
  if (cuda_device_count() == 0) return 0;
  if (why_not) rnnd_warn0("rnn_dist: %s on the CUDA backend; using the CPU\n", why_not);
  return why_not == NULL;
}
#endif

void device_choose(rnnd_device_choice *d, int requested, int local_rank, const rnnd_model_shape *shape) {
  snprintf(d->name, sizeof d->name, "cpu");
  d->cuda = 0;
#ifdef RNND_HAVE_CUDA
  d->cuda = pick_cuda(requested, shape);
  if (d->cuda) cuda_device_bind(local_rank, d->name, sizeof d->name);
#else
  (void)local_rank;
  (void)shape;
  if (requested == RNND_DEVICE_CUDA)
    rnnd_input_error("config: train.device = cuda but this rnn_dist was built without the CUDA backend "
                     "(use train.device = cpu or auto)");
#endif
}

rnnd_backend *device_open_backend(const rnnd_device_choice *d, const rnnd_layout *layout,
                                  const rnnd_backend_capacity *cap) {
#ifdef RNND_HAVE_CUDA
  if (d->cuda) return cuda_backend_create(layout, cap);
#else
  (void)d;
#endif
  return cpu_backend_create(layout, cap);
}

rnnd_step *device_open_step(const rnnd_device_choice *d, rnnd_backend *be, float *params, rnnd_optimizer *opt,
                            const rnnd_step_options *o) {
#ifdef RNND_HAVE_CUDA
  if (d->cuda) {
    const char *why_not = cuda_step_supports(opt);
    if (!why_not) return cuda_step_create(be, params, opt, o);
    rnnd_warn0("rnn_dist: %s: the CUDA backend runs under the host step (optimizer on the host; weights and "
               "gradient cross PCIe every step)\n", why_not);
  }
#else
  (void)d;
#endif
  return host_step_create(be, params, opt, o);
}

size_t device_used_bytes(const rnnd_device_choice *d) {
#ifdef RNND_HAVE_CUDA
  if (d->cuda) return cuda_device_used_bytes();
#else
  (void)d;
#endif
  return 0;
}
