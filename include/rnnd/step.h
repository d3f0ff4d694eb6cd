/* step.h — one data-parallel training step as an interface: where the
 * master weights, the gradient and the optimizer state live, and how a step
 * turns this rank's share of the global batch into the reduced gradient and
 * then into the update. The trainer takes the decisions in between (the
 * learning rate, the loss scale, whether to skip, the clip coefficient),
 * once, for every implementation:
 *
 *   step_gradients(share)  forward + backward of this rank's share, the
 *                          all-reduce over ranks, unscale, the global norm
 *   (trainer: lr, loss-scaler update, skip?, clip coefficient)
 *   step_update(lr, clip)  clip, optimizer update, 16-bit compute copy
 *
 * Two implementations:
 *  - the host step (host_step.c): the backend (CPU, or the CUDA one used
 *    as a plain backend) adds the share's gradient into a host buffer,
 *    which is rounded to 16 bits with 16-bit precision, all-reduced over
 *    MPI in buckets (grad_sync.h), unscaled and normed; optim.c updates the
 *    host master weights and the compute copy is refreshed;
 *  - the CUDA step (cuda_backend.h, cuda_step_create): master weights,
 *    gradient and optimizer state stay on the GPU; NCCL sums the gradient
 *    bucket by bucket while backward still runs, and clip and update run as
 *    kernels with the host arithmetic.
 * Both compute the same function (tests/gpu/test_cuda_step.c).
 *
 * Ownership. A step borrows the backend it drives and the caller's host
 * master weights `params` and optimizer `opt` (all must outlive it). Those
 * host buffers are the truth whenever the caller reads or writes them: call
 * step_store before reading them (checkpoints, model files, replica
 * checks) and step_load after writing them (resume, a test hook). The step
 * owns what it allocates (gradient buffers, compute copy, wire buffers, a
 * NCCL communicator); destroy frees exactly that. */
#ifndef RNND_STEP_H
#define RNND_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "rnnd/backend.h"
#include "rnnd/comm.h"
#include "rnnd/half.h"
#include "rnnd/optim.h"

typedef struct rnnd_step rnnd_step;

/* What one step_gradients call is asked to do. */
typedef struct {
  float loss_weight;  /* loss_scale / examples of the GLOBAL batch: the reduced sum is the mean's gradient */
  double loss_scale;  /* the reduced gradient is divided by it */
  int inject_nan;     /* test hook: a NaN in this rank's gradient before the all-reduce */
  /* Test hook, NULL for none: called on this rank after its backward and
   * before the all-reduce (the CUDA step, whose all-reduce overlaps
   * backward, calls it before the share's forward). */
  void (*before_reduce)(void *context);
  void *hook_context;
} rnnd_step_request;

/* What step_gradients measured; the same on every rank. */
typedef struct {
  double nll;          /* target NLL summed over every rank's share */
  rnnd_head_stats head; /* the head's measurements summed over the ranks */
  double grad_norm;    /* global L2 norm of the reduced, unscaled gradient; not finite: skip the step */
  double underflow;    /* share of this rank's non-zero gradient values the 16-bit rounding turned to zero */
  double compute_s;    /* forward and backward of the share */
  double comm_s;       /* all-reduce time not hidden behind compute */
} rnnd_step_gradient;

/* Bytes held, by purpose (allocated once; the peak is what is held, except
 * that a backend's workspace may grow for a batch shape its first sizing
 * did not cover: workspace_growths counts those). `held` is the figure a
 * progress line shows: all of it on the host; on a GPU the device's. */
typedef struct {
  size_t weights, gradients, optimizer, activations, workspace;
  int64_t workspace_growths;
  size_t data; /* host: offsets, chunk cache, piece plan (the trainer fills it in, not the step) */
  size_t held;
} rnnd_memory;

typedef struct {
  const char *name;
  /* Required. The bound host params and optimizer state were written by
   * the caller: take them (and refresh the compute copy). */
  void (*load)(rnnd_step *s);
  /* Required. This rank's share (NULL or empty: it only joins the
   * all-reduce) forward and backward with req->loss_weight, the gradient
   * summed over the ranks and divided by req->loss_scale, its norm. */
  void (*gradients)(rnnd_step *s, const rnnd_batch *share, const rnnd_dropout *dr, const rnnd_step_request *req,
                    rnnd_step_gradient *out);
  /* Required. Multiplies the reduced gradient by clip (1: none), applies
   * one optimizer update at lr (counting it in opt->steps) and refreshes
   * the compute copy. Returns the update's L2 norm; *param_norm gets the
   * new master weights' norm. */
  double (*update)(rnnd_step *s, double lr, double clip, double *param_norm);
  /* Optional: copies the master weights and optimizer state into the bound
   * host buffers. NULL: they always live there. */
  void (*store)(rnnd_step *s);
  /* Optional: L2 norm of the master weights. NULL: step_param_norm stores
   * and takes the norm of the host params. */
  double (*param_norm)(rnnd_step *s);
  /* Required: the reduced, unscaled gradient of the last gradients call. */
  void (*fetch_gradient)(rnnd_step *s, float *grads);
  /* Required. */
  void (*memory)(const rnnd_step *s, rnnd_memory *out);
  /* Required: frees what the step allocated (not what it borrows). */
  void (*destroy)(rnnd_step *s);
} rnnd_step_ops;

struct rnnd_step {
  const rnnd_step_ops *ops;
  rnnd_backend *backend;       /* borrowed: computes shares, and evaluates */
  float *params;               /* borrowed: the host master weights */
  rnnd_optimizer *optimizer;   /* borrowed: its state on the host */
  /* The weights to hand the backend for evaluation: the master weights as
   * the step computes with them (rounded to a 16-bit precision). Owned by
   * the step where it differs from params. */
  const float *compute_params;
};

/* How to create a step (both implementations). */
typedef struct {
  const rnnd_comm *comm;  /* borrowed; NULL: one process without MPI (tests, benchmarks) */
  rnnd_dtype precision;   /* of the compute copy and the backend's activations */
  rnnd_dtype wire;        /* gradient format between ranks (comm.grad_dtype resolved) */
  double bucket_mb;       /* all-reduce bucket size */
  double timeout_s;       /* comm.timeout_s: the longest wait for another rank */
} rnnd_step_options;

rnnd_step *host_step_create(rnnd_backend *be, float *params, rnnd_optimizer *opt, const rnnd_step_options *o);

/* The calls, with the fallbacks of the optional entries. */
static inline void step_load(rnnd_step *s) { s->ops->load(s); }
static inline void step_gradients(rnnd_step *s, const rnnd_batch *share, const rnnd_dropout *dr,
                                  const rnnd_step_request *req, rnnd_step_gradient *out) {
  s->ops->gradients(s, share, dr, req, out);
}
static inline double step_update(rnnd_step *s, double lr, double clip, double *param_norm) {
  return s->ops->update(s, lr, clip, param_norm);
}
static inline void step_store(rnnd_step *s) {
  if (s->ops->store) s->ops->store(s);
}
static inline double step_param_norm(rnnd_step *s) {
  if (s->ops->param_norm) return s->ops->param_norm(s);
  step_store(s);
  return flat_norm(s->params, s->optimizer->numel);
}
static inline void step_fetch_gradient(rnnd_step *s, float *grads) { s->ops->fetch_gradient(s, grads); }
static inline void step_memory(const rnnd_step *s, rnnd_memory *out) { s->ops->memory(s, out); }
static inline void step_destroy(rnnd_step *s) {
  if (s) s->ops->destroy(s);
}

#endif
