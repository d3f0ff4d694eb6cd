/* test_cuda_step.c — the device-resident CUDA step (step.h,
 * cuda_step_create), the path the trainer takes on a GPU, against the CPU
 * optimizer step written out here in full (CPU backend, 16-bit rounding of
 * the gradient, unscale, global norm, loss scaler, clip, optim.c), step for
 * step over 5 steps from the same loaded weights. One named case per run
 * (gpu_compare.h):
 *  - fp32:       Adam; the loss and gradient norm of every step, then the
 *                total update of the master weights, Adam's first moments
 *                and the step count after the last;
 *  - fp16_scaled: fp16 activations, loss scale 2^12 and a 16-bit wire, Adam;
 *  - nan_skip:   fp16 with a NaN injected into the gradient at step 3: that
 *                step's norm is not finite, the step is skipped (weights and
 *                moments bitwise unchanged) and the scale halves to 2^11,
 *                on both sides;
 *  - clip_sgd:   fp32, SGD with momentum and a clip norm below every
 *                step's gradient norm, so every update is clipped;
 *  - bf16_clip:  bf16 activations and wire, Adam, clipping active.
 * Each step's decisions (skip, scale, clip coefficient) must agree exactly.
 * With --cpu-standin the host step on a CPU backend is the step under
 * test, which checks these expectations (and the host step) here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/amp.h"
#include "rnnd/backend.h"
#include "rnnd/common.h"
#include "rnnd/config.h"
#include "rnnd/cuda_backend.h"
#include "rnnd/optim.h"
#include "rnnd/rng.h"
#include "rnnd/step.h"
#include "../random_dataset.h"

#include "gpu_compare.h"

#define STEPS 5
#define PIECES 9
#define VOCAB 83

typedef struct {
  const char *name;
  rnnd_dtype precision;
  int optimizer;       /* rnnd_optimizer_kind */
  double init_scale;   /* fp16: the loss scaler's first scale */
  double clip_norm;    /* 0: none */
  int nan_step;        /* -1: none */
  double lr;
} step_case;

static const step_case cases[] = {
    {"fp32", RNND_DTYPE_F32, RNND_OPT_ADAM, 1.0, 0.0, -1, 3e-3},
    {"fp16_scaled", RNND_DTYPE_F16, RNND_OPT_ADAM, 4096.0, 0.0, -1, 3e-3},
    {"nan_skip", RNND_DTYPE_F16, RNND_OPT_ADAM, 4096.0, 0.0, 3, 3e-3},
    {"clip_sgd", RNND_DTYPE_F32, RNND_OPT_SGD, 1.0, 0.05, -1, 0.5},
    {"bf16_clip", RNND_DTYPE_BF16, RNND_OPT_ADAM, 1.0, 0.05, -1, 3e-3},
};

/* The same batch shape every step, new tokens each step. */
typedef struct {
  rnnd_dataset data;
  rnnd_batch batch;
} step_data;

static void make_data(step_data *d) {
  static const int lengths[PIECES] = {31, 2, 17, 31, 9, 1, 24, 13, 30};
  memset(d, 0, sizeof *d);
  rnnd_dataset *ds = &d->data;
  random_dataset(ds, lengths, PIECES, PIECES * STEPS, VOCAB, 0, 23);
  batch_init(&d->batch, PIECES, 31, ds->offsets[PIECES]);
}

static void fill_step(step_data *d, int step) {
  rnnd_piece pieces[PIECES];
  for (int i = 0; i < PIECES; i++) {
    int64_t seq = (int64_t)step * PIECES + i;
    pieces[i] = (rnnd_piece){.start = d->data.offsets[seq], .length = (int32_t)dataset_sequence_length(&d->data, seq),
                             .id = seq};
  }
  batch_fill(&d->batch, &d->data, pieces, PIECES);
}

/* The reference: one step as the trainer takes it on the CPU, written out. */
typedef struct {
  rnnd_backend *be;
  float *params, *compute, *grads;
  rnnd_optimizer opt;
  rnnd_loss_scaler scaler;
  rnnd_dtype precision;
} reference;

static void refresh(reference *r, size_t n) {
  for (size_t i = 0; i < n; i++)
    r->compute[i] = r->precision == RNND_DTYPE_F32 ? r->params[i]
                                                   : rnnd_half_to_f32(r->precision,
                                                                      rnnd_f32_to_half(r->precision, r->params[i]));
}

typedef struct {
  double nll, grad_norm, clip, scale;
  int skipped;
} step_outcome;

static step_outcome reference_step(reference *r, const step_case *c, const rnnd_batch *b, int step) {
  const size_t n = r->be->layout->numel;
  step_outcome o = {.scale = r->scaler.scale, .clip = 1.0};
  memset(r->grads, 0, n * sizeof *r->grads);
  rnnd_dropout dr = {.seed = 31, .step = step, .p = 0.1f};
  o.nll = r->be->ops->train_batch(r->be, r->compute, r->grads, b, &dr, (float)(o.scale / (double)b->n_tokens));
  if (c->precision != RNND_DTYPE_F32) amp_round_to_half(c->precision, r->grads, n, NULL);
  if (step == c->nan_step) r->grads[n - 1] = NAN;
  const float inverse = (float)(1.0 / o.scale);
  for (size_t i = 0; i < n && o.scale != 1.0; i++) r->grads[i] *= inverse;
  o.grad_norm = grad_global_norm(r->grads, n);
  o.skipped = !loss_scaler_update(&r->scaler, isfinite(o.grad_norm));
  if (!o.skipped) {
    o.clip = grad_clip(r->grads, n, o.grad_norm, c->clip_norm);
    optimizer_step(&r->opt, r->params, r->grads, c->lr);
    refresh(r, n);
  }
  return o;
}

/* The step under test, driven as the trainer drives it. */
static step_outcome tested_step(rnnd_step *s, rnnd_loss_scaler *scaler, const step_case *c, const rnnd_batch *b,
                                int step) {
  step_outcome o = {.scale = scaler->scale, .clip = 1.0};
  rnnd_dropout dr = {.seed = 31, .step = step, .p = 0.1f};
  rnnd_step_request req = {.loss_weight = (float)(o.scale / (double)b->n_tokens), .loss_scale = o.scale,
                           .inject_nan = step == c->nan_step};
  rnnd_step_gradient g;
  step_gradients(s, b, &dr, &req, &g);
  o.nll = g.nll;
  o.grad_norm = g.grad_norm;
  o.skipped = !loss_scaler_update(scaler, isfinite(o.grad_norm));
  if (!o.skipped) {
    double param_norm;
    o.clip = clip_coefficient(o.grad_norm, c->clip_norm);
    step_update(s, c->lr, o.clip, &param_norm);
  }
  return o;
}

static void compare_outcomes(gpu_test *t, const step_case *c, int step, const step_outcome *a,
                             const step_outcome *e) {
  const double limit = c->precision == RNND_DTYPE_F32 ? 1e-4 : 1e-2;
  char what[160];
  snprintf(what, sizeof what, "%s step %d: loss %.6f vs %.6f", c->name, step, a->nll, e->nll);
  expect(t, relative_error(a->nll, e->nll) <= limit, what, relative_error(a->nll, e->nll), limit);
  int both_nan = isnan(a->grad_norm) && isnan(e->grad_norm);
  double norm_error = both_nan ? 0.0 : relative_error(a->grad_norm, e->grad_norm);
  snprintf(what, sizeof what, "%s step %d: gradient norm %.6g vs %.6g", c->name, step, a->grad_norm, e->grad_norm);
  expect(t, norm_error <= limit, what, norm_error, limit);
  snprintf(what, sizeof what, "%s step %d: skipped %d vs %d, scale %g vs %g, clipped %d vs %d", c->name, step,
           a->skipped, e->skipped, a->scale, e->scale, a->clip < 1.0, e->clip < 1.0);
  int same = a->skipped == e->skipped && a->scale == e->scale && (a->clip < 1.0) == (e->clip < 1.0);
  expect(t, same, what, !same, 0);
}

/* Master weights and optimizer state after the steps, as the distance
 * between the two sides' total updates relative to the reference's total
 * update (a wrong update rule is off by about 1). Adam turns last-bit
 * differences of near-zero gradient elements into whole steps of size lr,
 * so its bound is looser than SGD's. */
static void compare_state(gpu_test *t, const step_case *c, rnnd_step *s, reference *r, const float *initial) {
  const size_t n = r->opt.numel;
  step_store(s);
  double distance = 0.0, update = 0.0;
  for (size_t i = 0; i < n; i++) {
    double a = (double)s->params[i] - initial[i], e = (double)r->params[i] - initial[i];
    distance += (a - e) * (a - e);
    update += e * e;
  }
  double error = sqrt(distance) / fmax(sqrt(update), 1e-30);
  const int wide = c->precision != RNND_DTYPE_F32;
  const double limit = c->optimizer == RNND_OPT_ADAM ? (wide ? 1e-1 : 1e-2) : (wide ? 2e-2 : 1e-3);
  char what[200];
  snprintf(what, sizeof what, "%s: total update of the master weights over %d steps (norm %.4g)", c->name, STEPS,
           sqrt(update));
  expect(t, error <= limit, what, error, limit);
  double moments = tensor_error(s->optimizer->m, r->opt.m, n);
  const double moment_limit = wide ? 3e-2 : 1e-3;
  snprintf(what, sizeof what, "%s: first moments / momentum after %d steps", c->name, STEPS);
  expect(t, moments <= moment_limit, what, moments, moment_limit);
  snprintf(what, sizeof what, "%s: optimizer steps counted %lld vs %lld", c->name, (long long)s->optimizer->steps,
           (long long)r->opt.steps);
  expect(t, s->optimizer->steps == r->opt.steps, what, (double)(s->optimizer->steps - r->opt.steps), 0);
}

static rnnd_step *create_tested_step(gpu_test *t, rnnd_backend *be, float *params, rnnd_optimizer *opt,
                                     const rnnd_step_options *o) {
  return t->cpu_standin ? host_step_create(be, params, opt, o) : cuda_step_create(be, params, opt, o);
}

/* Weights (and moments) bitwise unchanged across a skipped step. */
static void check_skip_kept_state(gpu_test *t, const step_case *c, rnnd_step *s, const float *before, size_t n) {
  step_store(s);
  int same = !memcmp(before, s->params, n * sizeof *before);
  char what[120];
  snprintf(what, sizeof what, "%s: the skipped step %d left the master weights bitwise unchanged", c->name,
           c->nan_step);
  expect(t, same, what, !same, 0);
}

static void run_step_case(gpu_test *t, const step_case *c) {
  rnnd_model_shape shape = {.cell = RNND_CELL_GRU, .layers = 2, .embed = 24, .hidden = 24, .vocab_size = VOCAB,
                            .directions = 1, .tie_weights = 1};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  const size_t n = layout.numel;
  step_data d;
  make_data(&d);
  rnnd_config cfg;
  config_init_defaults(&cfg);
  cfg.train.optimizer = c->optimizer;
  cfg.train.momentum = 0.9;
  cfg.amp.init_scale = c->init_scale;
  rnnd_backend_capacity cap = {.max_pieces = PIECES, .max_steps = 31, .max_tokens = d.batch.max_tokens, .threads = 1,
                               .storage = c->precision};
  reference r = {.be = cpu_backend_create(&layout, &cap), .precision = c->precision};
  r.params = RNND_ALLOC(float, n, "reference weights");
  r.compute = RNND_ALLOC(float, n, "reference compute copy");
  r.grads = RNND_ALLOC(float, n, "reference gradient");
  model_init_params(&layout, r.params, 41);
  refresh(&r, n);
  optimizer_init(&r.opt, &cfg.train, n);
  loss_scaler_init(&r.scaler, &cfg.amp, c->precision);
  /* the step under test loads the same weights and (zero) optimizer state */
  rnnd_backend *be = t->create_tested(&layout, &cap);
  float *params = RNND_ALLOC(float, n, "tested weights"), *before = RNND_ALLOC(float, n, "weights before");
  float *initial = RNND_ALLOC(float, n, "initial weights");
  memcpy(params, r.params, n * sizeof *params);
  memcpy(initial, r.params, n * sizeof *params);
  rnnd_optimizer opt;
  optimizer_init(&opt, &cfg.train, n);
  rnnd_loss_scaler scaler;
  loss_scaler_init(&scaler, &cfg.amp, c->precision);
  rnnd_step_options options = {.precision = c->precision, .wire = c->precision, .bucket_mb = 0.01};
  rnnd_step *s = create_tested_step(t, be, params, &opt, &options);
  for (int step = 0; step < STEPS; step++) {
    fill_step(&d, step);
    if (step == c->nan_step) {
      step_store(s);
      memcpy(before, params, n * sizeof *before);
    }
    step_outcome e = reference_step(&r, c, &d.batch, step);
    step_outcome a = tested_step(s, &scaler, c, &d.batch, step);
    compare_outcomes(t, c, step, &a, &e);
    if (step == c->nan_step) check_skip_kept_state(t, c, s, before, n);
  }
  if (c->nan_step >= 0) {
    char what[120];
    snprintf(what, sizeof what, "%s: scale after the skipped step %g (from %g), %lld skipped", c->name,
             scaler.scale, c->init_scale, (long long)scaler.skipped);
    int halved = scaler.scale == c->init_scale / 2 && scaler.skipped == 1 && r.scaler.scale == scaler.scale;
    expect(t, halved, what, !halved, 0);
  }
  compare_state(t, c, s, &r, initial);
  step_destroy(s);
  be->ops->destroy(be);
  r.be->ops->destroy(r.be);
  optimizer_free(&opt);
  optimizer_free(&r.opt);
  config_free(&cfg);
  free(params);
  free(before);
  free(initial);
  free(r.params);
  free(r.compute);
  free(r.grads);
  batch_free(&d.batch);
  dataset_free(&d.data);
}

static void list_cases(void) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) printf("%s\n", cases[i].name);
}

static int run_case(gpu_test *t, const char *name) {
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    if (!strcmp(cases[i].name, name)) {
      run_step_case(t, &cases[i]);
      return 1;
    }
  return 0;
}

int main(int argc, char **argv) { return gpu_test_main(argc, argv, "test_cuda_step", list_cases, run_case); }
