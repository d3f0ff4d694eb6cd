/* host_step.c — the host step (step.h): the backend adds this rank's
 * gradient into a host buffer; with 16-bit precision and wire it is
 * rounded to 16 bits as it leaves backward (as on a GPU: values overflow to
 * inf, so the loss scaler backs off, or underflow to zero, which the scale
 * exists to prevent); MPI sums it over the ranks in buckets (grad_sync.h);
 * it is unscaled and its global norm taken on the reduced gradient, which
 * is bitwise the same on every rank, so every rank takes the same
 * decisions; optim.c updates the host master weights, and the compute copy
 * (the master weights rounded to the 16-bit precision) is refreshed.
 *
 * Ownership: host_step_create allocates the gradient buffer, the 16-bit
 * compute copy and the all-reduce's buffers; destroy frees them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/amp.h"
#include "rnnd/common.h"
#include "rnnd/grad_sync.h"
#include "rnnd/step.h"

typedef struct {
  rnnd_step base;
  rnnd_step_options options;
  size_t numel;
  float *grads;            /* this rank's gradient, then the reduced one */
  float *compute;          /* 16-bit precision: the master weights rounded to it, the
                            * weights the model computes with (== base.params with fp32) */
  rnnd_grad_sync sync;     /* with a communicator of several ranks */
  int reduces;
} host_step;

static host_step *host_of(rnnd_step *s) { return (host_step *)s; }

/* x[0..n) = 0 over the OpenMP team (the gradient is tens of MiB). */
static void zero_floats(float *x, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) x[i] = 0.0f;
}

/* The weights the next step computes with: the master rounded to 16 bits. */
static void refresh_compute_copy(host_step *h) {
  if (h->options.precision == RNND_DTYPE_F32) return;
  rnnd_round_through_half_array(h->options.precision, h->compute, h->base.params, h->numel);
}

static void host_load(rnnd_step *s) { refresh_compute_copy(host_of(s)); }

/* 16-bit precision and wire: the gradient leaves backward in 16 bits.
 * Returns the share of non-zero values that underflowed. */
static double round_to_wire(host_step *h) {
  if (h->options.precision == RNND_DTYPE_F32 || h->options.wire == RNND_DTYPE_F32) return 0.0;
  size_t nonzero = 0, lost = amp_round_to_half(h->options.wire, h->grads, h->numel, &nonzero);
  return nonzero ? (double)lost / (double)nonzero : 0.0;
}

/* The head's measurements and the NLL, summed over the ranks in one all-reduce. */
static void reduce_measurements(host_step *h, rnnd_step_gradient *out) {
  const rnnd_head_stats *m = &out->head;
  double sums[5] = {(double)m->correct, m->sq_error, m->abs_error, (double)m->values, out->nll};
  if (h->reduces) comm_allreduce_sum_f64(h->options.comm, sums, 5);
  out->head = (rnnd_head_stats){(int64_t)sums[0], sums[1], sums[2], (int64_t)sums[3]};
  out->nll = sums[4];
}

static void host_gradients(rnnd_step *s, const rnnd_batch *share, const rnnd_dropout *dr,
                           const rnnd_step_request *req, rnnd_step_gradient *out) {
  host_step *h = host_of(s);
  rnnd_backend *be = s->backend;
  memset(out, 0, sizeof *out);
  double start = rnnd_now();
  zero_floats(h->grads, h->numel);
  if (share && share->n_tokens > 0) {
    out->nll = be->ops->train_batch(be, s->compute_params, h->grads, share, dr, req->loss_weight);
    if (be->ops->last_stats) be->ops->last_stats(be, &out->head);
  }
  const int rounds = h->options.precision != RNND_DTYPE_F32 && h->options.wire != RNND_DTYPE_F32;
  if (rounds && !h->reduces && !req->inject_nan) {
    /* one rank: no all-reduce between the rounding and the norm, so one pass */
    if (req->before_reduce) req->before_reduce(req->hook_context);
    size_t nonzero = 0, lost = 0;
    out->grad_norm = grad_round_unscale_norm(h->grads, h->numel, h->options.wire, req->loss_scale, &nonzero, &lost);
    out->underflow = nonzero ? (double)lost / (double)nonzero : 0.0;
    reduce_measurements(h, out);
    out->compute_s = rnnd_now() - start;
    return;
  }
  out->underflow = round_to_wire(h);
  if (req->inject_nan) h->grads[h->numel - 1] = NAN;
  double computed = rnnd_now();
  if (req->before_reduce) req->before_reduce(req->hook_context);
  if (h->reduces) grad_sync_allreduce(&h->sync, h->grads);
  reduce_measurements(h, out);
  out->compute_s = computed - start;
  out->comm_s = rnnd_now() - computed;
  out->grad_norm = grad_unscale_norm(h->grads, h->numel, req->loss_scale);
}

static double host_update(rnnd_step *s, double lr, double clip, double *param_norm) {
  host_step *h = host_of(s);
  const rnnd_rounded_copy copy = {h->compute, h->options.precision};
  return optimizer_update(s->optimizer, s->params, h->grads, lr, clip, param_norm,
                          h->options.precision == RNND_DTYPE_F32 ? NULL : &copy);
}

static void host_fetch_gradient(rnnd_step *s, float *grads) {
  host_step *h = host_of(s);
  memcpy(grads, h->grads, h->numel * sizeof *grads);
}

static void host_memory(const rnnd_step *s, rnnd_memory *m) {
  const host_step *h = (const host_step *)s;
  const rnnd_backend *be = s->backend;
  const size_t n = h->numel;
  *m = (rnnd_memory){.weights = n * sizeof(float), .gradients = n * sizeof(float),
                     .optimizer = optimizer_state_bytes(s->optimizer),
                     .activations = be->ops->activation_bytes(be), .workspace = be->ops->workspace_bytes(be),
                     .workspace_growths = backend_workspace_growths(be)};
  if (h->compute != s->params) m->workspace += n * sizeof(float); /* the rounded compute copy */
  if (h->sync.wire_buffer) m->workspace += n * sizeof(uint16_t);
  m->held = m->weights + m->gradients + m->optimizer + m->activations + m->workspace;
}

static void host_destroy(rnnd_step *s) {
  host_step *h = host_of(s);
  if (h->reduces) grad_sync_free(&h->sync);
  if (h->compute != s->params) free(h->compute);
  free(h->grads);
  free(h);
}

static const rnnd_step_ops host_step_ops = {
    .name = "host",
    .load = host_load,
    .gradients = host_gradients,
    .update = host_update,
    .store = NULL,      /* the master weights live in the bound host buffers */
    .param_norm = NULL, /* the fallback: the norm of the host params */
    .fetch_gradient = host_fetch_gradient,
    .memory = host_memory,
    .destroy = host_destroy,
};

rnnd_step *host_step_create(rnnd_backend *be, float *params, rnnd_optimizer *opt, const rnnd_step_options *o) {
  host_step *h = RNND_ALLOC(host_step, 1, "host step");
  h->options = *o;
  h->numel = be->layout->numel;
  h->grads = RNND_ALLOC(float, h->numel, "gradients");
  h->compute = o->precision == RNND_DTYPE_F32 ? params : RNND_ALLOC(float, h->numel, "compute weights");
  h->reduces = o->comm && o->comm->size > 1;
  if (h->reduces) grad_sync_init(&h->sync, o->comm, h->numel, o->bucket_mb, o->wire);
  h->base = (rnnd_step){.ops = &host_step_ops, .backend = be, .params = params, .optimizer = opt,
                        .compute_params = h->compute};
  refresh_compute_copy(h);
  return &h->base;
}
