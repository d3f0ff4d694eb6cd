/* cuda_resident.c — the device-resident training step (cuda_backend.h):
 * master weights, gradient and optimizer state stay on the GPU.
 *
 * Overlap. Backward finishes the gradient from the last parameters to the
 * first: the decoder, then layer L-1 down to 0, then the embedding (and
 * with tied weights the decoder weight, which is the embedding). Each time
 * a stretch becomes final the backward code calls
 * cuda_resident_gradient_ready with the new frontier; every bucket wholly
 * above it is started on the communication stream (after an event on the
 * compute stream), so NCCL sums the decoder while cuDNN still runs the
 * layers. The compute stream waits for the last bucket through an event
 * before anything reads the reduced gradient.
 *
 * Determinism. The norms come from per-block partial sums over a fixed
 * grid added in block order, and NCCL gives every rank the same reduced
 * gradient, so the clip coefficient, the skip decision and the update are
 * bitwise the same on every rank (the trainer's replica check verifies). */
#include <math.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_internal.h"

#define PARTIALS_PER_NORM CUDA_NORM_BLOCKS

void cuda_resident_carve(cuda_backend *cb, uintptr_t base, size_t *used) {
  cuda_resident *r = &cb->resident;
  const size_t numel = cb->base.layout->numel;
  r->m = cuda_carve(base, used, numel * sizeof(float));
  r->v = cb->cap.optimizer_state > 1 ? cuda_carve(base, used, numel * sizeof(float)) : NULL;
  r->wire = cuda_carve(base, used, numel * sizeof(uint16_t));
  r->partials = cuda_carve(base, used, 3 * PARTIALS_PER_NORM * sizeof(double));
  r->scalars = cuda_carve(base, used, 4 * sizeof(double));
  r->counts = cuda_carve(base, used, 2 * sizeof(unsigned long long));
}

void cuda_resident_carve_host(cuda_backend *cb, uintptr_t base, size_t *used) {
  cb->resident.host_scalars = cuda_carve(base, used, 4 * sizeof(double));
  cb->resident.host_counts = cuda_carve(base, used, 2 * sizeof(unsigned long long));
}

void cuda_resident_create(cuda_backend *cb) {
  cuda_resident *r = &cb->resident;
  CUDA_CHECK(cudaStreamCreateWithFlags(&r->comm_stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&r->ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreate(&r->reduced));
  CUDA_CHECK(cudaEventCreate(&r->backward_done));
}

void cuda_resident_destroy(cuda_backend *cb) {
  cuda_resident *r = &cb->resident;
  CUDA_CHECK(cudaEventDestroy(r->ready));
  CUDA_CHECK(cudaEventDestroy(r->reduced));
  CUDA_CHECK(cudaEventDestroy(r->backward_done));
  CUDA_CHECK(cudaStreamDestroy(r->comm_stream));
}

static cuda_backend *resident_of(rnnd_backend *be) {
  cuda_backend *cb = (cuda_backend *)be;
  if (strcmp(be->ops->name, "cuda") || cb->cap.optimizer_state <= 0)
    RNND_FAIL("the device-resident step needs a CUDA backend created with optimizer_state > 0");
  return cb;
}

/* --- state in and out --------------------------------------------------- */

void cuda_resident_load(rnnd_backend *be, const rnnd_optimizer *opt, const float *params) {
  cuda_backend *cb = resident_of(be);
  const size_t bytes = be->layout->numel * sizeof(float);
  if ((opt->v != NULL) != (cb->resident.v != NULL))
    RNND_FAIL("optimizer state buffers (%d) do not match the backend's capacity (%d)", opt->v ? 2 : 1,
              cb->cap.optimizer_state);
  CUDA_CHECK(cudaMemcpyAsync(cb->params, params, bytes, cudaMemcpyHostToDevice, cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(cb->resident.m, opt->m, bytes, cudaMemcpyHostToDevice, cb->stream));
  if (opt->v) CUDA_CHECK(cudaMemcpyAsync(cb->resident.v, opt->v, bytes, cudaMemcpyHostToDevice, cb->stream));
  cuda_backend_refresh_weights(cb);
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  cb->resident.loaded = 1;
}

void cuda_resident_store(rnnd_backend *be, rnnd_optimizer *opt, float *params) {
  cuda_backend *cb = resident_of(be);
  const size_t bytes = be->layout->numel * sizeof(float);
  CUDA_CHECK(cudaMemcpyAsync(params, cb->params, bytes, cudaMemcpyDeviceToHost, cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(opt->m, cb->resident.m, bytes, cudaMemcpyDeviceToHost, cb->stream));
  if (opt->v) CUDA_CHECK(cudaMemcpyAsync(opt->v, cb->resident.v, bytes, cudaMemcpyDeviceToHost, cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
}

void cuda_resident_fetch_gradient(rnnd_backend *be, float *grads) {
  cuda_backend *cb = resident_of(be);
  CUDA_CHECK(cudaMemcpyAsync(grads, cb->grads, be->layout->numel * sizeof(float), cudaMemcpyDeviceToHost,
                             cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
}

/* --- the bucketed reduce ------------------------------------------------- */

static ncclDataType_t nccl_type(rnnd_dtype t) {
  return t == RNND_DTYPE_F16 ? ncclFloat16 : t == RNND_DTYPE_BF16 ? ncclBfloat16 : ncclFloat32;
}

/* Sums bucket k (counted from the end of the buffer) on the comm stream. */
static void reduce_bucket(cuda_backend *cb, int k) {
  cuda_resident *r = &cb->resident;
  const size_t numel = cb->base.layout->numel, size = r->options.bucket_elems;
  size_t end = numel - (size_t)k * size, start = end > size ? end - size : 0, count = end - start;
  const rnnd_dtype wire = r->options.wire;
  float *grads = cb->grads + start;
  if (wire == RNND_DTYPE_F32) {
    if (r->nccl) nccl_allreduce_sum(r->nccl, grads, count, ncclFloat32, r->comm_stream);
    return;
  }
  /* 16 bits on the wire even for one rank, so a run rounds the same at any size */
  void *words = (char *)r->wire + start * sizeof(uint16_t);
  cuda_to_wire(words, wire, grads, (int64_t)count, r->counts, r->comm_stream);
  if (r->nccl) nccl_allreduce_sum(r->nccl, words, count, nccl_type(wire), r->comm_stream);
  cuda_from_wire(grads, words, wire, (int64_t)count, r->comm_stream);
}

void cuda_resident_gradient_ready(cuda_backend *cb, size_t frontier) {
  cuda_resident *r = &cb->resident;
  const size_t numel = cb->base.layout->numel, size = r->options.bucket_elems;
  int first = r->next_bucket;
  /* bucket k starts at numel - (k + 1) * size (or 0 for the last one) */
  while (r->next_bucket < r->n_buckets) {
    size_t top = numel - (size_t)r->next_bucket * size, start = top > size ? top - size : 0;
    if (start < frontier) break;
    r->next_bucket++;
  }
  if (r->next_bucket == first) return;
  CUDA_CHECK(cudaEventRecord(r->ready, cb->stream));
  CUDA_CHECK(cudaStreamWaitEvent(r->comm_stream, r->ready, 0));
  for (int k = first; k < r->next_bucket; k++) reduce_bucket(cb, k);
}

/* Forward and backward of the share (or only the zero gradient of an
 * empty one), with the buckets started along the way. */
static void compute_share(cuda_backend *cb, const rnnd_batch *b, const rnnd_dropout *dr, float loss_weight) {
  const size_t numel = cb->base.layout->numel;
  CUDA_CHECK(cudaMemsetAsync(cb->grads, 0, numel * sizeof(float), cb->stream));
  CUDA_CHECK(cudaMemsetAsync(cb->nll_sum, 0, sizeof(double), cb->stream));
  if (cb->resident.options.inject_nan) {
    /* the last element (decoder bias) only accumulates, so the NaN survives into the reduce */
    const float nan = NAN;
    CUDA_CHECK(cudaMemcpyAsync(cb->grads + numel - 1, &nan, sizeof nan, cudaMemcpyHostToDevice, cb->stream));
  }
  if (b && b->n_tokens > 0) {
    cuda_backend_check_batch(cb, b);
    cuda_backend_run(cb, b, dr, loss_weight, 1);
  }
  CUDA_CHECK(cudaEventRecord(cb->resident.backward_done, cb->stream));
  cuda_resident_gradient_ready(cb, 0); /* whatever is left (all of it for an empty share) */
}

void cuda_resident_gradients(rnnd_backend *be, rnnd_nccl *nccl, const rnnd_batch *b, const rnnd_dropout *dr,
                             float loss_weight, const cuda_reduce_options *options, cuda_gradient_result *out) {
  cuda_backend *cb = resident_of(be);
  cuda_resident *r = &cb->resident;
  const size_t numel = be->layout->numel;
  if (!r->loaded) RNND_FAIL("cuda_resident_gradients before cuda_resident_load");
  r->options = *options;
  if (r->options.bucket_elems == 0 || r->options.bucket_elems > numel) r->options.bucket_elems = numel;
  r->n_buckets = (int)((numel + r->options.bucket_elems - 1) / r->options.bucket_elems);
  r->next_bucket = 0;
  r->nccl = nccl;
  CUDA_CHECK(cudaMemsetAsync(r->counts, 0, 2 * sizeof(unsigned long long), cb->stream));
  r->reducing = 1;
  compute_share(cb, b, dr, loss_weight);
  r->reducing = 0;
  if (nccl) nccl_allreduce_sum(nccl, cb->nll_sum, 1, ncclFloat64, r->comm_stream);
  CUDA_CHECK(cudaEventRecord(r->reduced, r->comm_stream));
  CUDA_CHECK(cudaStreamWaitEvent(cb->stream, r->reduced, 0)); /* the optimizer waits for the reduce */
  float inverse = options->loss_scale == 1.0 ? 1.0f : (float)(1.0 / options->loss_scale);
  cuda_scale_and_square(cb->grads, (int64_t)numel, inverse, r->partials, cb->stream);
  cuda_sum_f64(r->partials, PARTIALS_PER_NORM, r->scalars, cb->stream);
  CUDA_CHECK(cudaMemcpyAsync(r->host_scalars, r->scalars, sizeof(double), cudaMemcpyDeviceToHost, cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(cb->host_nll, cb->nll_sum, sizeof(double), cudaMemcpyDeviceToHost, cb->stream));
  CUDA_CHECK(cudaMemcpyAsync(r->host_counts, r->counts, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                             cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  float exposed_ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&exposed_ms, r->backward_done, r->reduced));
  out->nll = *cb->host_nll;
  out->grad_norm = sqrt(r->host_scalars[0]);
  out->underflow = r->host_counts[0] ? (double)r->host_counts[1] / (double)r->host_counts[0] : 0.0;
  out->exposed_comm_s = exposed_ms > 0.0f ? exposed_ms / 1000.0 : 0.0;
}

/* --- the update ----------------------------------------------------------- */

double cuda_resident_update(rnnd_backend *be, const rnnd_optimizer *opt, double lr, double clip, double *param_norm) {
  cuda_backend *cb = resident_of(be);
  cuda_resident *r = &cb->resident;
  const double t = (double)opt->steps;
  cuda_update_args args = {.beta1 = (float)opt->beta1, .beta2 = (float)opt->beta2, .eps = (float)opt->eps,
                           .weight_decay = (float)opt->weight_decay, .momentum = (float)opt->momentum,
                           .clip = (float)clip, .adam = opt->kind == RNND_OPT_ADAM, .first_step = opt->steps == 1};
  /* the same float values optim.c computes */
  args.step_size = args.adam ? (float)(lr / (1.0 - pow(opt->beta1, t))) : (float)lr;
  args.correction2_sqrt = args.adam ? (float)sqrt(1.0 - pow(opt->beta2, t)) : 1.0f;
  double *update_partials = r->partials + PARTIALS_PER_NORM, *param_partials = r->partials + 2 * PARTIALS_PER_NORM;
  cuda_optimizer_update(cb->params, cb->grads, r->m, r->v, (int64_t)be->layout->numel, &args, update_partials,
                        param_partials, cb->stream);
  cuda_sum_f64(update_partials, PARTIALS_PER_NORM, r->scalars + 1, cb->stream);
  cuda_sum_f64(param_partials, PARTIALS_PER_NORM, r->scalars + 2, cb->stream);
  cuda_backend_refresh_weights(cb);
  CUDA_CHECK(cudaMemcpyAsync(r->host_scalars + 1, r->scalars + 1, 2 * sizeof(double), cudaMemcpyDeviceToHost,
                             cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  *param_norm = sqrt(r->host_scalars[2]);
  return sqrt(r->host_scalars[1]);
}

double cuda_resident_param_norm(rnnd_backend *be) {
  cuda_backend *cb = resident_of(be);
  cuda_resident *r = &cb->resident;
  /* squares of the weights through the same kernel, scale 1 (no change) */
  cuda_scale_and_square(cb->params, (int64_t)be->layout->numel, 1.0f, r->partials, cb->stream);
  cuda_sum_f64(r->partials, PARTIALS_PER_NORM, r->scalars + 2, cb->stream);
  CUDA_CHECK(cudaMemcpyAsync(r->host_scalars + 2, r->scalars + 2, sizeof(double), cudaMemcpyDeviceToHost,
                             cb->stream));
  CUDA_CHECK(cudaStreamSynchronize(cb->stream));
  return sqrt(r->host_scalars[2]);
}
