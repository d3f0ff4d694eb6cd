/* optim.c — Adam, SGD, learning-rate schedules and clipping (optim.h). */
#include "rnnd/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"

/* Sums of squares over the parameters run in fixed chunks whose partial
 * sums are added in chunk order, so a norm is the same for any number of
 * threads; the elementwise updates are split over the OpenMP team. */
#define CHUNK 32768

static size_t chunks_of(size_t n) { return (n + CHUNK - 1) / CHUNK; }

/* Sum of the partials in chunk order (partials freed here). */
static double sum_partials(double *partials, size_t chunks) {
  double sum = 0.0;
  for (size_t c = 0; c < chunks; c++) sum += partials[c];
  free(partials);
  return sum;
}

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
}

size_t optimizer_state_bytes(const rnnd_optimizer *opt) {
  return opt->numel * sizeof(float) * (opt->v ? 2 : 1);
}

void optimizer_free(rnnd_optimizer *opt) {
  free(opt->m);
  free(opt->v);
  memset(opt, 0, sizeof *opt);
}

/* Squares of one chunk's update and new weights (one pass computes both). */
typedef struct {
  double update, weights;
} chunk_squares;

/* Same operation order as torch.optim.Adam (single-tensor path), on the
 * gradient times clip (as grad_clip would have left it):
 * denom = sqrt(v) / sqrt(1 - b2^t) + eps;  p -= lr / (1 - b1^t) * m / denom. */
static chunk_squares adam_chunk(rnnd_optimizer *opt, float *params, const float *grads, size_t begin, size_t end,
                                float clip, float step_size, float correction2_sqrt) {
  const float b1 = (float)opt->beta1, b2 = (float)opt->beta2, eps = (float)opt->eps;
  const float wd = (float)opt->weight_decay;
  float *m = opt->m, *v = opt->v;
  chunk_squares sq = {0.0, 0.0};
  for (size_t i = begin; i < end; i++) {
    float grad = clip != 1.0f ? grads[i] * clip : grads[i];
    float g = grad + wd * params[i];
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    float denom = sqrtf(v[i]) / correction2_sqrt + eps;
    float update = step_size * (m[i] / denom);
    params[i] -= update;
    sq.update += (double)update * update;
    sq.weights += (double)params[i] * params[i];
  }
  return sq;
}

/* torch.optim.SGD with dampening 0: buf = momentum * buf + g (buf = g on the
 * first step), p -= lr * buf. */
static chunk_squares sgd_chunk(rnnd_optimizer *opt, float *params, const float *grads, size_t begin, size_t end,
                               float clip, float rate) {
  const float mu = (float)opt->momentum, wd = (float)opt->weight_decay;
  chunk_squares sq = {0.0, 0.0};
  for (size_t i = begin; i < end; i++) {
    float grad = clip != 1.0f ? grads[i] * clip : grads[i];
    float g = grad + wd * params[i];
    if (mu != 0.0f) {
      opt->m[i] = opt->steps == 1 ? g : mu * opt->m[i] + g;
      g = opt->m[i];
    }
    params[i] -= rate * g;
    sq.update += (double)(rate * g) * (rate * g);
    sq.weights += (double)params[i] * params[i];
  }
  return sq;
}

double optimizer_update(rnnd_optimizer *opt, float *params, const float *grads, double lr, double clip,
                        double *param_norm) {
  opt->steps++;
  const int adam = opt->kind == RNND_OPT_ADAM;
  const double t = (double)opt->steps;
  const float step_size = adam ? (float)(lr / (1.0 - pow(opt->beta1, t))) : (float)lr;
  const float correction2_sqrt = adam ? (float)sqrt(1.0 - pow(opt->beta2, t)) : 1.0f;
  const float c = clip == 1.0 ? 1.0f : (float)clip;
  const size_t n = opt->numel, chunks = chunks_of(n);
  chunk_squares *partials = RNND_ALLOC(chunk_squares, chunks ? chunks : 1, "update norm partials");
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < chunks; k++) {
    size_t begin = k * CHUNK, end = begin + CHUNK < n ? begin + CHUNK : n;
    partials[k] = adam ? adam_chunk(opt, params, grads, begin, end, c, step_size, correction2_sqrt)
                       : sgd_chunk(opt, params, grads, begin, end, c, (float)lr);
  }
  double update = 0.0, weights = 0.0;
  for (size_t k = 0; k < chunks; k++) {
    update += partials[k].update;
    weights += partials[k].weights;
  }
  free(partials);
  if (param_norm) *param_norm = sqrt(weights);
  return sqrt(update);
}

double optimizer_step(rnnd_optimizer *opt, float *params, const float *grads, double lr) {
  return optimizer_update(opt, params, grads, lr, 1.0, NULL);
}

double flat_norm(const float *x, size_t n) {
  const size_t chunks = chunks_of(n);
  double *partials = RNND_ALLOC(double, chunks ? chunks : 1, "norm partials");
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < chunks; c++) {
    double sum = 0.0;
    for (size_t i = c * CHUNK; i < n && i < (c + 1) * CHUNK; i++) sum += (double)x[i] * x[i];
    partials[c] = sum;
  }
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

double grad_round_unscale_norm(float *grads, size_t numel, rnnd_dtype wire, double scale, size_t *nonzero,
                               size_t *lost) {
  const float inverse = (float)(1.0 / scale);
  const size_t chunks = chunks_of(numel);
  double *partials = RNND_ALLOC(double, chunks ? chunks : 1, "norm partials");
  size_t live = 0, underflow = 0;
#pragma omp parallel for schedule(static) reduction(+ : live, underflow)
  for (size_t c = 0; c < chunks; c++) {
    double sum = 0.0;
    for (size_t i = c * CHUNK; i < numel && i < (c + 1) * CHUNK; i++) {
      float g = grads[i], r = rnnd_half_to_f32(wire, rnnd_f32_to_half(wire, g));
      live += g != 0.0f;
      underflow += r == 0.0f && g != 0.0f;
      if (scale != 1.0) r *= inverse;
      grads[i] = r;
      sum += (double)r * r;
    }
    partials[c] = sum;
  }
  *nonzero = live;
  *lost = underflow;
  return sqrt(sum_partials(partials, chunks));
}

double grad_unscale_norm(float *grads, size_t numel, double scale) {
  const float inverse = (float)(1.0 / scale);
  const size_t chunks = chunks_of(numel);
  double *partials = RNND_ALLOC(double, chunks ? chunks : 1, "norm partials");
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < chunks; c++) {
    double sum = 0.0;
    for (size_t i = c * CHUNK; i < numel && i < (c + 1) * CHUNK; i++) {
      if (scale != 1.0) grads[i] *= inverse;
      sum += (double)grads[i] * grads[i];
    }
    partials[c] = sum;
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
