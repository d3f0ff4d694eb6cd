/* cuda_step.c — the CUDA step (step.h, cuda_backend.h): the fp32 master
 * weights, the gradient and the optimizer state stay on the GPU.
 *
 * Overlap. Backward finishes the gradient from the last parameters to the
 * first: the decoder (or head), then layer L-1 down to 0, then the
 * embedding (with tied weights also the decoder weight, which is the
 * embedding). The backend reports each new frontier through its
 * gradient-ready callback; every bucket wholly above it is started on the
 * communication stream (after an event on the compute stream), so NCCL
 * sums the decoder while cuDNN still runs the layers. The compute stream
 * waits for the last bucket through an event before anything reads the
 * reduced gradient.
 *
 * The first step of a backend does not overlap: it computes the whole
 * gradient, waits for it, and only then starts the buckets, because cuDNN
 * and cuBLAS load kernels and allocate lazily in their first calls and
 * NCCL must not be left waiting behind them.
 *
 * Determinism. The norms come from per-block partial sums over a fixed
 * grid added in block order, and NCCL gives every rank the same reduced
 * gradient, so the clip coefficient, the skip decision and the update are
 * bitwise the same on every rank (the trainer's replica check verifies);
 * the update kernel rounds as optim.c does.
 *
 * Ownership: cuda_step_create takes one device allocation (optimizer
 * state, 16-bit wire, norm partials), one pinned host allocation, a
 * communication stream, three events and, with several ranks, the NCCL
 * communicator; destroy releases them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_internal.h"
#include "rnnd/grad_sync.h"

#define PARTIALS_PER_NORM CUDA_NORM_BLOCKS

typedef struct {
  rnnd_step base;
  cuda_backend *cb;            /* == base.backend */
  rnnd_step_options options;
  rnnd_nccl *nccl;             /* several ranks only */
  /* device, in one allocation */
  char *device;
  float *m, *v;                /* optimizer state (v: Adam only) */
  void *wire;                  /* [numel] 16-bit wire buffer */
  double *partials;            /* [3 * CUDA_NORM_BLOCKS] */
  double *scalars;             /* [3]: grad squares, update squares, param squares */
  unsigned long long *counts;  /* [2]: non-zero gradient values, lost to the wire */
  /* pinned */
  char *host;
  double *host_scalars, *host_nll;
  unsigned long long *host_counts;
  cudaStream_t comm_stream;
  cudaEvent_t ready, reduced, backward_done;
  /* the reduce of one gradients call */
  rnnd_dtype wire_type;
  size_t bucket_elems;
  int next_bucket, n_buckets;
  int warmed_up;               /* the first step (no overlap) has run */
  int host_stale;              /* the bound host params/optimizer lag the device's */
} cuda_step;

static cuda_step *step_of(rnnd_step *s) { return (cuda_step *)s; }

/* --- the bucketed reduce ------------------------------------------------- */

static ncclDataType_t nccl_type(rnnd_dtype t) {
  return t == RNND_DTYPE_F16 ? ncclFloat16 : t == RNND_DTYPE_BF16 ? ncclBfloat16 : ncclFloat32;
}

/* Sums bucket k (counted from the end of the buffer) on the comm stream. */
static void reduce_bucket(cuda_step *cs, int k) {
  cuda_backend *cb = cs->cb;
  const size_t numel = cb->base.layout->numel, size = cs->bucket_elems;
  size_t end = numel - (size_t)k * size, start = end > size ? end - size : 0, count = end - start;
  float *grads = cb->grads + start;
  if (cs->wire_type == RNND_DTYPE_F32) {
    if (cs->nccl) nccl_allreduce_sum(cs->nccl, grads, count, ncclFloat32, cs->comm_stream);
    return;
  }
  /* 16 bits on the wire even for one rank, so a run rounds the same at any size */
  void *words = (char *)cs->wire + start * sizeof(uint16_t);
  cuda_to_wire(words, cs->wire_type, grads, (int64_t)count, cs->counts, cs->comm_stream);
  if (cs->nccl) nccl_allreduce_sum(cs->nccl, words, count, nccl_type(cs->wire_type), cs->comm_stream);
  cuda_from_wire(grads, words, cs->wire_type, (int64_t)count, cs->comm_stream);
}

/* Every gradient element at offset >= frontier is final: start the buckets
 * that became complete (the backend's gradient-ready callback). */
static void gradient_ready(void *context, size_t frontier) {
  cuda_step *cs = context;
  const size_t numel = cs->cb->base.layout->numel, size = cs->bucket_elems;
  int first = cs->next_bucket;
  /* bucket k starts at numel - (k + 1) * size (or 0 for the last one) */
  while (cs->next_bucket < cs->n_buckets) {
    size_t top = numel - (size_t)cs->next_bucket * size, start = top > size ? top - size : 0;
    if (start < frontier) break;
    cs->next_bucket++;
  }
  if (cs->next_bucket == first) return;
  CUDA_CHECK(cudaEventRecord(cs->ready, cs->cb->stream));
  CUDA_CHECK(cudaStreamWaitEvent(cs->comm_stream, cs->ready, 0));
  for (int k = first; k < cs->next_bucket; k++) reduce_bucket(cs, k);
}

/* --- the verbs ------------------------------------------------------------ */

static void cuda_step_load(rnnd_step *s) {
  cuda_step *cs = step_of(s);
  cuda_backend *cb = cs->cb;
  const size_t bytes = cb->base.layout->numel * sizeof(float);
  CUDA_CHECK(cudaMemcpyAsync(cb->params, s->params, bytes, cudaMemcpyHostToDevice, cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(cs->m, s->optimizer->m, bytes, cudaMemcpyHostToDevice, cb->stream));
  if (cs->v) CUDA_CHECK(cudaMemcpyAsync(cs->v, s->optimizer->v, bytes, cudaMemcpyHostToDevice, cb->stream));
  cuda_layers_refresh_weights(cb);
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  cb->params_resident = 1;
  cs->host_stale = 0;
}

static void cuda_step_store(rnnd_step *s) {
  cuda_step *cs = step_of(s);
  cuda_backend *cb = cs->cb;
  if (!cs->host_stale) return;
  const size_t bytes = cb->base.layout->numel * sizeof(float);
  CUDA_CHECK(cudaMemcpyAsync(s->params, cb->params, bytes, cudaMemcpyDeviceToHost, cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(s->optimizer->m, cs->m, bytes, cudaMemcpyDeviceToHost, cb->stream));
  if (cs->v) CUDA_CHECK(cudaMemcpyAsync(s->optimizer->v, cs->v, bytes, cudaMemcpyDeviceToHost, cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  cs->host_stale = 0;
}

static void cuda_step_fetch_gradient(rnnd_step *s, float *grads) {
  cuda_backend *cb = step_of(s)->cb;
  CUDA_CHECK(cudaMemcpyAsync(grads, cb->grads, cb->base.layout->numel * sizeof(float), cudaMemcpyDeviceToHost,
                             cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
}

/* Forward and backward of the share (or only the zero gradient of an
 * empty one), with the buckets started along the way from the second
 * step on. */
static void compute_share(cuda_step *cs, const rnnd_batch *b, const rnnd_dropout *dr, const rnnd_step_request *req) {
  cuda_backend *cb = cs->cb;
  const size_t numel = cb->base.layout->numel;
  CUDA_CHECK(cudaMemsetAsync(cb->grads, 0, numel * sizeof(float), cb->stream));
  CUDA_CHECK(cudaMemsetAsync(cb->nll_sum, 0, sizeof(double), cb->stream));
  if (req->inject_nan) {
    /* the last element (decoder bias) only accumulates, so the NaN survives
     * into the reduce; all bits set is a (negative, quiet) NaN */
    CUDA_CHECK(cudaMemsetAsync(cb->grads + numel - 1, 0xFF, sizeof(float), cb->stream));
  }
  cb->gradient_ready = cs->warmed_up ? (cuda_gradient_listener){gradient_ready, cs} : (cuda_gradient_listener){0};
  if (b && b->n_tokens > 0) {
    cuda_layers_check_batch(cb, b);
    cuda_backend_run(cb, b, dr, req->loss_weight);
  }
  cb->gradient_ready = (cuda_gradient_listener){0};
  CUDA_CHECK(cudaEventRecord(cs->backward_done, cb->stream));
  if (!cs->warmed_up) CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  gradient_ready(cs, 0); /* whatever is left (all of it for an empty share or the first step) */
  cs->warmed_up = 1;
}

/* The head's measurements summed over the ranks (MPI, a few numbers). */
static rnnd_head_stats reduce_head_stats(const cuda_step *cs, int share) {
  rnnd_head_stats h = {0};
  if (share && cs->cb->base.ops->last_stats) cs->cb->base.ops->last_stats(&cs->cb->base, &h);
  if (!cs->options.comm || cs->options.comm->size == 1) return h;
  double sums[4] = {(double)h.correct, h.sq_error, h.abs_error, (double)h.values};
  comm_allreduce_sum_f64(cs->options.comm, sums, 4);
  return (rnnd_head_stats){(int64_t)sums[0], sums[1], sums[2], (int64_t)sums[3]};
}

static void cuda_step_gradients(rnnd_step *s, const rnnd_batch *share, const rnnd_dropout *dr,
                                const rnnd_step_request *req, rnnd_step_gradient *out) {
  cuda_step *cs = step_of(s);
  cuda_backend *cb = cs->cb;
  const size_t numel = cb->base.layout->numel;
  double start = rnnd_now();
  cs->next_bucket = 0;
  CUDA_CHECK(cudaMemsetAsync(cs->counts, 0, 2 * sizeof(unsigned long long), cb->stream));
  if (req->before_reduce) req->before_reduce(req->hook_context);
  compute_share(cs, share, dr, req);
  if (cs->nccl) nccl_allreduce_sum(cs->nccl, cb->nll_sum, 1, ncclFloat64, cs->comm_stream);
  CUDA_CHECK(cudaEventRecord(cs->reduced, cs->comm_stream));
  CUDA_CHECK(cudaStreamWaitEvent(cb->stream, cs->reduced, 0)); /* the norm waits for the reduce */
  float inverse = req->loss_scale == 1.0 ? 1.0f : (float)(1.0 / req->loss_scale);
  cuda_scale_and_square(cb->grads, (int64_t)numel, inverse, cs->partials, cb->stream);
  cuda_sum_f64(cs->partials, PARTIALS_PER_NORM, cs->scalars, cb->stream);
  CUDA_CHECK(cudaMemcpyAsync(cs->host_scalars, cs->scalars, sizeof(double), cudaMemcpyDeviceToHost, cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(cs->host_nll, cb->nll_sum, sizeof(double), cudaMemcpyDeviceToHost, cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(cs->host_counts, cs->counts, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                             cb->stream));
  nccl_wait_stream(cs->nccl, cb->stream, "gradient all-reduce");
  float exposed_ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&exposed_ms, cs->backward_done, cs->reduced));
  memset(out, 0, sizeof *out);
  out->nll = *cs->host_nll;
  out->head = reduce_head_stats(cs, share && share->n_tokens > 0);
  out->grad_norm = sqrt(cs->host_scalars[0]);
  out->underflow = cs->host_counts[0] ? (double)cs->host_counts[1] / (double)cs->host_counts[0] : 0.0;
  out->comm_s = exposed_ms > 0.0f ? exposed_ms / 1000.0 : 0.0;
  out->compute_s = rnnd_now() - start - out->comm_s;
}

static double cuda_step_update(rnnd_step *s, double lr, double clip, double *param_norm) {
  cuda_step *cs = step_of(s);
  cuda_backend *cb = cs->cb;
  rnnd_optimizer *opt = s->optimizer;
  opt->steps++;
  const double t = (double)opt->steps;
  cuda_update_args args = {.beta1 = (float)opt->beta1, .beta2 = (float)opt->beta2, .eps = (float)opt->eps,
                           .weight_decay = (float)opt->weight_decay, .momentum = (float)opt->momentum,
                           .clip = (float)clip, .adam = opt->kind == RNND_OPT_ADAM, .first_step = opt->steps == 1};
  /* the same float values optim.c computes */
  args.step_size = args.adam ? (float)(lr / (1.0 - pow(opt->beta1, t))) : (float)lr;
  args.correction2_sqrt = args.adam ? (float)sqrt(1.0 - pow(opt->beta2, t)) : 1.0f;
  double *update_partials = cs->partials + PARTIALS_PER_NORM, *param_partials = cs->partials + 2 * PARTIALS_PER_NORM;
  cuda_optimizer_update(cb->params, cb->grads, cs->m, cs->v, (int64_t)opt->numel, &args, update_partials,
                        param_partials, cb->stream);
  cuda_sum_f64(update_partials, PARTIALS_PER_NORM, cs->scalars + 1, cb->stream);
  cuda_sum_f64(param_partials, PARTIALS_PER_NORM, cs->scalars + 2, cb->stream);
  cuda_layers_refresh_weights(cb);
  CUDA_CHECK(cudaMemcpyAsync(cs->host_scalars + 1, cs->scalars + 1, 2 * sizeof(double), cudaMemcpyDeviceToHost,
                             cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  cs->host_stale = 1;
  *param_norm = sqrt(cs->host_scalars[2]);
  return sqrt(cs->host_scalars[1]);
}

static double cuda_step_param_norm(rnnd_step *s) {
  cuda_step *cs = step_of(s);
  cuda_backend *cb = cs->cb;
  /* squares of the weights through the same kernel, scale 1 (no change) */
  cuda_scale_and_square(cb->params, (int64_t)cb->base.layout->numel, 1.0f, cs->partials, cb->stream);
  cuda_sum_f64(cs->partials, PARTIALS_PER_NORM, cs->scalars + 2, cb->stream);
  CUDA_CHECK(cudaMemcpyAsync(cs->host_scalars + 2, cs->scalars + 2, sizeof(double), cudaMemcpyDeviceToHost,
                             cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  return sqrt(cs->host_scalars[2]);
}

/* On the device: the backend's arena (master weights, gradient, compute
 * copy, activations) and temp spaces, and this step's optimizer state and
 * wire buffer. `held` is all of it. */
static void cuda_step_memory(const rnnd_step *s, rnnd_memory *m) {
  const cuda_step *cs = (const cuda_step *)s;
  const rnnd_backend *be = s->backend;
  const size_t n = be->layout->numel, weights = n * (sizeof(float) + (cs->cb->storage == RNND_DTYPE_F32 ? 0 : 2));
  size_t backend_rest = be->ops->workspace_bytes(be) - weights - n * sizeof(float);
  *m = (rnnd_memory){.weights = weights, .gradients = n * sizeof(float),
                     .optimizer = optimizer_state_bytes(s->optimizer),
                     .activations = be->ops->activation_bytes(be),
                     .workspace = backend_rest + n * sizeof(uint16_t) + 3 * PARTIALS_PER_NORM * sizeof(double),
                     .workspace_growths = backend_workspace_growths(be)};
  m->held = m->weights + m->gradients + m->optimizer + m->activations + m->workspace;
}

static void cuda_step_destroy(rnnd_step *s) {
  cuda_step *cs = step_of(s);
  if (!cs) return;
  cs->cb->params_resident = 0;
  nccl_destroy(cs->nccl);
  CUDA_CHECK(cudaEventDestroy(cs->ready));
  CUDA_CHECK(cudaEventDestroy(cs->reduced));
  CUDA_CHECK(cudaEventDestroy(cs->backward_done));
  CUDA_CHECK(cudaStreamDestroy(cs->comm_stream));
  CUDA_CHECK(cudaFree(cs->device));
  CUDA_CHECK(cudaFreeHost(cs->host));
  free(cs);
}

static const rnnd_step_ops cuda_step_ops = {
    .name = "cuda",
    .load = cuda_step_load,
    .gradients = cuda_step_gradients,
    .update = cuda_step_update,
    .store = cuda_step_store,
    .param_norm = cuda_step_param_norm,
    .fetch_gradient = cuda_step_fetch_gradient,
    .memory = cuda_step_memory,
    .destroy = cuda_step_destroy,
};

/* --- creation ------------------------------------------------------------- */

/* Carves the device allocation at `base` (base 0: only counts). */
static size_t carve_device(cuda_step *cs, uintptr_t base) {
  const size_t numel = cs->cb->base.layout->numel;
  size_t used = 0;
  cs->m = cuda_carve(base, &used, numel * sizeof(float));
  cs->v = cs->base.optimizer->v ? cuda_carve(base, &used, numel * sizeof(float)) : NULL;
  cs->wire = cuda_carve(base, &used, numel * sizeof(uint16_t));
  cs->partials = cuda_carve(base, &used, 3 * PARTIALS_PER_NORM * sizeof(double));
  cs->scalars = cuda_carve(base, &used, 3 * sizeof(double));
  cs->counts = cuda_carve(base, &used, 2 * sizeof(unsigned long long));
  return used;
}

static size_t carve_host(cuda_step *cs, uintptr_t base) {
  size_t used = 0;
  cs->host_scalars = cuda_carve(base, &used, 3 * sizeof(double));
  cs->host_nll = cuda_carve(base, &used, sizeof(double));
  cs->host_counts = cuda_carve(base, &used, 2 * sizeof(unsigned long long));
  return used;
}

/* Averaged weights would need a device copy that evaluation and model
 * files read in place of the master weights; the host step keeps them. */
const char *cuda_step_supports(const rnnd_optimizer *opt) {
  return opt->avg ? "train.ema_decay (averaged weights) is kept by the host optimizer" : NULL;
}

rnnd_step *cuda_step_create(rnnd_backend *be, float *params, rnnd_optimizer *opt, const rnnd_step_options *o) {
  if (strcmp(be->ops->name, "cuda")) RNND_FAIL("cuda_step_create needs a CUDA backend, not '%s'", be->ops->name);
  const char *why_not = cuda_step_supports(opt);
  if (why_not) RNND_FAIL("cuda_step_create: %s (device_open_step uses the host step then)", why_not);
  cuda_step *cs = RNND_ALLOC(cuda_step, 1, "CUDA step");
  cs->cb = (cuda_backend *)be;
  cs->options = *o;
  cs->base = (rnnd_step){.ops = &cuda_step_ops, .backend = be, .params = params, .optimizer = opt,
                         .compute_params = params /* the backend computes from the device's copy */};
  const size_t numel = be->layout->numel;
  /* 16-bit rounding with 16-bit precision, or on a 16-bit wire between ranks (as on the CPU) */
  int ranks = o->comm ? o->comm->size : 1;
  cs->wire_type = o->precision == RNND_DTYPE_F32 && ranks == 1 ? RNND_DTYPE_F32 : o->wire;
  cs->bucket_elems = grad_sync_bucket_elems(numel, o->bucket_mb, o->wire);
  cs->n_buckets = (int)((numel + cs->bucket_elems - 1) / cs->bucket_elems);
  size_t device_bytes = carve_device(cs, 0), host_bytes = carve_host(cs, 0);
  CUDA_CHECK(cudaMalloc((void **)&cs->device, device_bytes));
  CUDA_CHECK(cudaMallocHost((void **)&cs->host, host_bytes));
  carve_device(cs, (uintptr_t)cs->device);
  carve_host(cs, (uintptr_t)cs->host);
  CUDA_CHECK(cudaStreamCreateWithFlags(&cs->comm_stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&cs->ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreate(&cs->reduced));
  CUDA_CHECK(cudaEventCreate(&cs->backward_done));
  if (ranks > 1) cs->nccl = nccl_create(o->comm, o->timeout_s);
  cuda_step_load(&cs->base);
  return &cs->base;
}
