/* optim.c — Adam, SGD, learning-rate schedules and clipping (optim.h). */
#include "rnnd/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"

/* Sums of squares over the parameters run in fixed chunks whose partial
 * sums are added in chunk order, so a norm is the same for any number of
 * threads; the elementwise updates are split over the OpenMP team.
 * Within a chunk, element i adds to running sum i % LANES and the LANES sums
 * are added in lane order at the end: an order fixed by the source (so it
 * does not depend on the vector width either) that the compiler can still
 * vectorise, which a single running sum in double forbids. Every chunk
 * starts at a multiple of LANES. */
#define CHUNK 32768
#define LANES 8

static size_t chunks_of(size_t n) { return (n + CHUNK - 1) / CHUNK; }

/* Sum of the partials in chunk order (partials freed here). */
static double sum_partials(double *partials, size_t chunks) {
  double sum = 0.0;
  for (size_t c = 0; c < chunks; c++) sum += partials[c];
  free(partials);
  return sum;
}

static double lane_total(const double lane[LANES]) {
  double sum = 0.0;
  for (int l = 0; l < LANES; l++) sum += lane[l];
  return sum;
}

static size_t chunk_end(size_t chunk, size_t n) { return (chunk + 1) * CHUNK < n ? (chunk + 1) * CHUNK : n; }

void optimizer_init(rnnd_optimizer *opt, const rnnd_train_config *cfg, size_t numel) {
  memset(opt, 0, sizeof *opt);
  opt->kind = cfg->optimizer;
  opt->numel = numel;
  opt->beta1 = cfg->beta1;
  opt->beta2 = cfg->beta2;
  opt->eps = cfg->eps;
  opt->weight_decay = cfg->weight_decay;
  opt->momentum = cfg->momentum;
  opt->m = RNND_ALLOC(float, numel, "optimizer first moment");
  if (opt->kind == RNND_OPT_ADAM) opt->v = RNND_ALLOC(float, numel, "optimizer second moment");
  opt->ema_decay = cfg->ema_decay;
  opt->ema_start = cfg->ema_start > 0 ? cfg->ema_start : 1;
  if (opt->ema_decay > 0.0) opt->avg = RNND_ALLOC(float, numel, "averaged weights");
}

size_t optimizer_state_bytes(const rnnd_optimizer *opt) {
  return opt->numel * sizeof(float) * ((opt->v ? 2 : 1) + (opt->avg ? 1 : 0));
}

const float *optimizer_eval_weights(const rnnd_optimizer *opt, const float *params) {
  return opt->avg && opt->steps >= opt->ema_start ? opt->avg : params;
}

/* After update number opt->steps: start or move the average. */
static void update_average(rnnd_optimizer *opt, const float *params) {
  if (!opt->avg || opt->steps < opt->ema_start) return;
  const size_t n = opt->numel;
  if (opt->steps == opt->ema_start) {
    memcpy(opt->avg, params, n * sizeof *params);
    return;
  }
  const float decay = (float)opt->ema_decay, rest = 1.0f - decay;
  float *restrict avg = opt->avg;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) avg[i] = decay * avg[i] + rest * params[i];
}

void optimizer_free(rnnd_optimizer *opt) {
  free(opt->m);
  free(opt->v);
  free(opt->avg);
  memset(opt, 0, sizeof *opt);
}

/* Squares of one chunk's update and new weights (one pass computes both). */
typedef struct {
  double update, weights;
} chunk_squares;

/* The constants of one optimizer step. */
typedef struct {
  float clip, rate, correction2_sqrt; /* rate: lr, and for Adam lr / (1 - b1^t) */
  float b1, b2, eps, weight_decay, momentum;
  int first_step;
} step_constants;

/* Same operation order as torch.optim.Adam (single-tensor path), on the
 * gradient times clip (as grad_clip would have left it):
 * denom = sqrt(v) / sqrt(1 - b2^t) + eps;  p -= lr / (1 - b1^t) * m / denom.
 * Returns the update. */
static inline float adam_element(const step_constants *restrict k, float *restrict params, const float *restrict grads,
                                 float *restrict m, float *restrict v, size_t i) {
  float g = grads[i] * k->clip + k->weight_decay * params[i];
  float first = k->b1 * m[i] + (1.0f - k->b1) * g;
  float second = k->b2 * v[i] + (1.0f - k->b2) * g * g;
  m[i] = first;
  v[i] = second;
  float update = k->rate * (first / (sqrtf(second) / k->correction2_sqrt + k->eps));
  params[i] -= update;
  return update;
}

static chunk_squares adam_chunk(const step_constants *restrict k, float *restrict params, const float *restrict grads,
                                float *restrict m, float *restrict v, size_t begin, size_t end) {
  double update[LANES] = {0}, weights[LANES] = {0};
  size_t i = begin;
  for (; i + LANES <= end; i += LANES)
    RNND_LANE_LOOP for (int l = 0; l < LANES; l++) {
      float u = adam_element(k, params, grads, m, v, i + l);
      update[l] += (double)u * u;
      weights[l] += (double)params[i + l] * params[i + l];
    }
  for (; i < end; i++) {
    float u = adam_element(k, params, grads, m, v, i);
    update[i % LANES] += (double)u * u;
    weights[i % LANES] += (double)params[i] * params[i];
  }
  return (chunk_squares){lane_total(update), lane_total(weights)};
}

/* torch.optim.SGD with dampening 0: buf = momentum * buf + g (buf = g on the
 * first step), p -= lr * buf; without momentum (buf NULL), p -= lr * g.
 * `buf` is NULL or not at each call, so the test inlines away. Returns the
 * update. */
static inline float sgd_element(const step_constants *restrict k, float *restrict params, const float *restrict grads,
                                float *restrict buf, size_t i) {
  float g = grads[i] * k->clip + k->weight_decay * params[i];
  if (buf) {
    g = k->first_step ? g : k->momentum * buf[i] + g;
    buf[i] = g;
  }
  float update = k->rate * g;
  params[i] -= update;
  return update;
}

static inline chunk_squares sgd_chunk_with(const step_constants *restrict k, float *restrict params,
                                           const float *restrict grads, float *restrict buf, size_t begin,
                                           size_t end) {
  double update[LANES] = {0}, weights[LANES] = {0};
  size_t i = begin;
  for (; i + LANES <= end; i += LANES)
    RNND_LANE_LOOP for (int l = 0; l < LANES; l++) {
      float u = sgd_element(k, params, grads, buf, i + l);
      update[l] += (double)u * u;
      weights[l] += (double)params[i + l] * params[i + l];
    }
  for (; i < end; i++) {
    float u = sgd_element(k, params, grads, buf, i);
    update[i % LANES] += (double)u * u;
    weights[i % LANES] += (double)params[i] * params[i];
  }
  return (chunk_squares){lane_total(update), lane_total(weights)};
}

static chunk_squares sgd_chunk(const step_constants *restrict k, float *params, const float *grads, float *buf,
                               size_t begin, size_t end) {
  return buf ? sgd_chunk_with(k, params, grads, buf, begin, end)
             : sgd_chunk_with(k, params, grads, NULL, begin, end);
}

static step_constants constants_of(const rnnd_optimizer *opt, double lr, double clip) {
  const double t = (double)opt->steps;
  const int adam = opt->kind == RNND_OPT_ADAM;
  return (step_constants){
      .clip = (float)clip,
      .rate = adam ? (float)(lr / (1.0 - pow(opt->beta1, t))) : (float)lr,
      .correction2_sqrt = adam ? (float)sqrt(1.0 - pow(opt->beta2, t)) : 1.0f,
      .b1 = (float)opt->beta1,
      .b2 = (float)opt->beta2,
      .eps = (float)opt->eps,
      .weight_decay = (float)opt->weight_decay,
      .momentum = (float)opt->momentum,
      .first_step = opt->steps == 1,
  };
}

double optimizer_update(rnnd_optimizer *opt, float *params, const float *grads, double lr, double clip,
                        double *param_norm, const rnnd_rounded_copy *copy) {
  opt->steps++;
  const step_constants k = constants_of(opt, lr, clip);
  const int adam = opt->kind == RNND_OPT_ADAM;
  float *momentum_buf = k.momentum != 0.0f ? opt->m : NULL;
  const size_t n = opt->numel, chunks = chunks_of(n);
  chunk_squares *partials = RNND_ALLOC(chunk_squares, chunks ? chunks : 1, "update norm partials");
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < chunks; c++) {
    size_t begin = c * CHUNK, end = chunk_end(c, n);
    partials[c] = adam ? adam_chunk(&k, params, grads, opt->m, opt->v, begin, end)
                       : sgd_chunk(&k, params, grads, momentum_buf, begin, end);
    /* the chunk's new weights are in cache now; a second pass would read them from memory */
    if (copy) rnnd_round_through_half_array(copy->format, copy->to + begin, params + begin, end - begin);
  }
  double update = 0.0, weights = 0.0;
  for (size_t c = 0; c < chunks; c++) {
    update += partials[c].update;
    weights += partials[c].weights;
  }
  free(partials);
  update_average(opt, params);
  if (param_norm) *param_norm = sqrt(weights);
  return sqrt(update);
}

double optimizer_step(rnnd_optimizer *opt, float *params, const float *grads, double lr) {
  return optimizer_update(opt, params, grads, lr, 1.0, NULL, NULL);
}

static double chunk_squares_of(const float *restrict x, size_t begin, size_t end) {
  double lane[LANES] = {0};
  size_t i = begin;
  for (; i + LANES <= end; i += LANES)
    RNND_LANE_LOOP for (int l = 0; l < LANES; l++) lane[l] += (double)x[i + l] * x[i + l];
  for (; i < end; i++) lane[i % LANES] += (double)x[i] * x[i];
  return lane_total(lane);
}

double flat_norm(const float *x, size_t n) {
  const size_t chunks = chunks_of(n);
  double *partials = RNND_ALLOC(double, chunks ? chunks : 1, "norm partials");
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < chunks; c++) partials[c] = chunk_squares_of(x, c * CHUNK, chunk_end(c, n));
  return sqrt(sum_partials(partials, chunks));
}

double lr_at_step(const rnnd_train_config *cfg, int64_t step, int64_t total_steps) {
  if (step < cfg->warmup_steps) return cfg->lr * (double)(step + 1) / (double)cfg->warmup_steps;
  int64_t after = step - cfg->warmup_steps, span = total_steps - cfg->warmup_steps;
  double progress = span > 0 ? (double)after / (double)span : 1.0;
  if (progress > 1.0) progress = 1.0;
  switch (cfg->lr_schedule) {
    case RNND_LR_LINEAR: return cfg->lr + (cfg->min_lr - cfg->lr) * progress;
    case RNND_LR_COSINE: return cfg->min_lr + 0.5 * (cfg->lr - cfg->min_lr) * (1.0 + cos(3.14159265358979323846 * progress));
    case RNND_LR_STEP: return cfg->lr * pow(cfg->gamma, (double)(after / cfg->step_size));
    default: return cfg->lr;
  }
}

double grad_global_norm(const float *grads, size_t numel) { return flat_norm(grads, numel); }

/* One chunk of grad_round_unscale_norm; `wire` is a constant at each call,
 * so the rounding inlines without a branch on the format. */
typedef struct {
  double squares;
  size_t nonzero, lost;
} rounding_tally;

static inline float round_through(rnnd_dtype wire, float x) { return rnnd_half_to_f32(wire, rnnd_f32_to_half(wire, x)); }

static inline float round_unscale_element(rnnd_dtype wire, float *restrict grads, float inverse, size_t i,
                                          uint32_t *nonzero, uint32_t *lost) {
  float g = grads[i], r = round_through(wire, g);
  *nonzero += g != 0.0f;
  *lost += r == 0.0f && g != 0.0f;
  r *= inverse; /* exact when the scale is 1 */
  grads[i] = r;
  return r;
}

static inline rounding_tally round_unscale_chunk(rnnd_dtype wire, float *restrict grads, float inverse, size_t begin,
                                                 size_t end) {
  double lane[LANES] = {0};
  uint32_t nonzero = 0, lost = 0; /* a chunk's counts fit; 32-bit counts vectorise with the floats */
  size_t i = begin;
  for (; i + LANES <= end; i += LANES)
    RNND_LANE_LOOP for (int l = 0; l < LANES; l++) {
      float r = round_unscale_element(wire, grads, inverse, i + l, &nonzero, &lost);
      lane[l] += (double)r * r;
    }
  for (; i < end; i++) {
    float r = round_unscale_element(wire, grads, inverse, i, &nonzero, &lost);
    lane[i % LANES] += (double)r * r;
  }
  return (rounding_tally){lane_total(lane), nonzero, lost};
}

double grad_round_unscale_norm(float *grads, size_t numel, rnnd_dtype wire, double scale, size_t *nonzero,
                               size_t *lost) {
  const float inverse = (float)(1.0 / scale);
  const size_t chunks = chunks_of(numel);
  double *partials = RNND_ALLOC(double, chunks ? chunks : 1, "norm partials");
  size_t live = 0, underflow = 0;
#pragma omp parallel for schedule(static) reduction(+ : live, underflow)
  for (size_t c = 0; c < chunks; c++) {
    size_t begin = c * CHUNK, end = chunk_end(c, numel);
    rounding_tally t = wire == RNND_DTYPE_BF16 ? round_unscale_chunk(RNND_DTYPE_BF16, grads, inverse, begin, end)
                                               : round_unscale_chunk(RNND_DTYPE_F16, grads, inverse, begin, end);
    partials[c] = t.squares;
    live += t.nonzero;
    underflow += t.lost;
  }
  *nonzero = live;
  *lost = underflow;
  return sqrt(sum_partials(partials, chunks));
}

static void unscale_chunk(float *restrict grads, float inverse, size_t begin, size_t end) {
  for (size_t i = begin; i < end; i++) grads[i] *= inverse;
}

double grad_unscale_norm(float *grads, size_t numel, double scale) {
  const float inverse = (float)(1.0 / scale);
  const size_t chunks = chunks_of(numel);
  double *partials = RNND_ALLOC(double, chunks ? chunks : 1, "norm partials");
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < chunks; c++) {
    size_t begin = c * CHUNK, end = chunk_end(c, numel);
    if (scale != 1.0) unscale_chunk(grads, inverse, begin, end);
    partials[c] = chunk_squares_of(grads, begin, end);
  }
  return sqrt(sum_partials(partials, chunks));
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0;
  double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

void grad_scale(float *grads, size_t numel, double coef) {
  if (coef == 1.0) return;
  float c = (float)coef;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < numel; i++) grads[i] *= c;
}

double grad_clip(float *grads, size_t numel, double norm, double max_norm) {
  double coef = clip_coefficient(norm, max_norm);
  grad_scale(grads, numel, coef);
  return coef;
}
