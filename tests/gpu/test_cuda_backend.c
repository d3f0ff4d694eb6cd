/* test_cuda_backend.c — the CUDA backend computes the CPU reference's
 * function. On the same weights and packed batch of uneven lengths
 * (including length 1):
 *  - loss and every parameter's gradient agree: max |cuda - cpu| over the
 *    tensor, relative to max |cpu|, <= 1e-4 in fp32 and <= 1e-2 with fp16 or
 *    bf16 activations; GRU and LSTM, 1 and 3 layers, uni- and bidirectional,
 *    tied and untied, with and without dropout (the same masks);
 *  - evaluation (no dropout, cuDNN's inference mode) gives the same loss;
 *  - 20 steps of clip + Adam from the same start keep the losses together.
 * Without a CUDA device it prints "SKIPPED: no CUDA device" and exits 77,
 * which ctest counts as skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/backend.h"
#include "rnnd/common.h"
#include "rnnd/cuda_backend.h"
#include "rnnd/optim.h"
#include "rnnd/rng.h"

#include "gpu_compare.h"

#define SKIP_CODE 77
#define PIECES 7

static int failures = 0, checks = 0;

static void expect(int ok, const char *what, double value, double limit) {
  checks++;
  printf("%s %-58s %.3g (limit %.0e)\n", ok ? "ok  " : "FAIL", what, value, limit);
  if (!ok) failures++;
}

typedef struct {
  int cell, layers, directions, tie;
  float dropout;
} model_case;

/* PIECES random sequences of lengths 1, 2, ... up to 23, tokens < vocab. */
static void make_dataset(rnnd_dataset *ds, int vocab, uint64_t seed) {
  static const int lengths[PIECES] = {23, 1, 9, 17, 2, 23, 5};
  memset(ds, 0, sizeof *ds);
  ds->path = rnnd_strdup("(random)");
  ds->vocab_size = vocab;
  ds->n_sequences = PIECES;
  ds->offsets = RNND_ALLOC(int64_t, PIECES + 1, "offsets");
  for (int i = 0; i < PIECES; i++) ds->offsets[i + 1] = ds->offsets[i] + lengths[i];
  ds->n_tokens = ds->offsets[PIECES];
  ds->tokens = RNND_ALLOC(int32_t, ds->n_tokens, "tokens");
  for (int64_t i = 0; i < ds->n_tokens; i++) ds->tokens[i] = (int32_t)(rng_key2(seed, (uint64_t)i) % (uint64_t)vocab);
}

static void fill_batch(rnnd_batch *b, const rnnd_dataset *ds) {
  rnnd_piece pieces[PIECES];
  for (int i = 0; i < PIECES; i++)
    pieces[i] = (rnnd_piece){.start = ds->offsets[i], .length = (int32_t)dataset_sequence_length(ds, i), .id = 100 + i};
  batch_init(b, PIECES, 23, ds->n_tokens);
  batch_fill(b, ds, pieces, PIECES);
}

/* The trainer's compute copy: the weights rounded to the 16-bit format. */
static void round_weights(rnnd_dtype storage, float *w, size_t n) {
  for (size_t i = 0; i < n && storage != RNND_DTYPE_F32; i++)
    w[i] = rnnd_half_to_f32(storage, rnnd_f32_to_half(storage, w[i]));
}

static void compare_case(const model_case *c, rnnd_dtype storage) {
  const int vocab = 97, embed = 24, hidden = 32;
  rnnd_model_shape shape = {.cell = c->cell, .layers = c->layers, .embed = c->tie ? hidden * c->directions : embed,
                            .hidden = hidden, .vocab_size = vocab, .directions = c->directions, .tie_weights = c->tie};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  rnnd_dataset ds;
  make_dataset(&ds, vocab, 11);
  rnnd_batch b;
  fill_batch(&b, &ds);
  rnnd_backend_capacity cap = {.max_pieces = PIECES, .max_steps = b.n_steps, .max_tokens = b.n_tokens, .threads = 1,
                               .storage = storage};
  rnnd_backend *cpu = cpu_backend_create(&layout, &cap), *gpu = cuda_backend_create(&layout, &cap);
  size_t n = layout.numel;
  float *params = RNND_ALLOC(float, n, "params"), *g_cpu = RNND_ALLOC(float, n, "cpu grads"),
        *g_gpu = RNND_ALLOC(float, n, "gpu grads");
  model_init_params(&layout, params, 3);
  round_weights(storage, params, n);
  rnnd_dropout dr = {7, 5, c->dropout};
  const float weight = 1.0f / (float)b.n_tokens;
  double l_cpu = cpu->ops->train_batch(cpu, params, g_cpu, &b, &dr, weight);
  double l_gpu = gpu->ops->train_batch(gpu, params, g_gpu, &b, &dr, weight);
  double limit = storage == RNND_DTYPE_F32 ? 1e-4 : 1e-2;
  char label[80], what[160];
  snprintf(label, sizeof label, "%s L=%d %s%s p=%.1f %s", model_cell_name(c->cell), c->layers,
           c->directions == 2 ? "bi" : "uni", c->tie ? " tied" : "", c->dropout, rnnd_dtype_name(storage));
  double loss_error = fabs(l_gpu - l_cpu) / fabs(l_cpu);
  snprintf(what, sizeof what, "%s: loss", label);
  expect(loss_error <= limit, what, loss_error, limit);
  double worst = 0.0;
  const char *worst_name = "";
  for (int v = 0; v < layout.n_views; v++) {
    const rnnd_param_view *view = &layout.views[v];
    double e = tensor_error(g_gpu + view->offset, g_cpu + view->offset, view->numel);
    if (e > worst) {
      worst = e;
      worst_name = view->name;
    }
  }
  snprintf(what, sizeof what, "%s: gradients (worst %s)", label, worst_name);
  expect(worst <= limit, what, worst, limit);
  double e_cpu = cpu->ops->eval_batch(cpu, params, &b), e_gpu = gpu->ops->eval_batch(gpu, params, &b);
  double eval_error = fabs(e_gpu - e_cpu) / fabs(e_cpu);
  snprintf(what, sizeof what, "%s: eval loss", label);
  expect(eval_error <= limit, what, eval_error, limit);
  cpu->ops->destroy(cpu);
  gpu->ops->destroy(gpu);
  free(params);
  free(g_cpu);
  free(g_gpu);
  batch_free(&b);
  dataset_free(&ds);
}

/* One clip + Adam step on each side's own weights; returns the loss. */
static double train_step(rnnd_backend *be, rnnd_optimizer *opt, float *params, float *grads, const rnnd_batch *b,
                         int64_t step, size_t n) {
  memset(grads, 0, n * sizeof *grads);
  rnnd_dropout dr = {9, step, 0.1f};
  double nll = be->ops->train_batch(be, params, grads, b, &dr, 1.0f / (float)b->n_tokens);
  double norm = grad_global_norm(grads, n);
  grad_clip(grads, n, norm, 0.5);
  optimizer_step(opt, params, grads, 3e-3);
  return nll / (double)b->n_tokens;
}

static void compare_training(int cell) {
  rnnd_model_shape shape = {.cell = cell, .layers = 2, .embed = 32, .hidden = 32, .vocab_size = 97, .directions = 1,
                            .tie_weights = 1};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  rnnd_dataset ds;
  make_dataset(&ds, 97, 13);
  rnnd_batch b;
  fill_batch(&b, &ds);
  rnnd_backend_capacity cap = {.max_pieces = PIECES, .max_steps = b.n_steps, .max_tokens = b.n_tokens, .threads = 1,
                               .storage = RNND_DTYPE_F32};
  rnnd_backend *cpu = cpu_backend_create(&layout, &cap), *gpu = cuda_backend_create(&layout, &cap);
  size_t n = layout.numel;
  float *p_cpu = RNND_ALLOC(float, n, "p"), *p_gpu = RNND_ALLOC(float, n, "p"), *grads = RNND_ALLOC(float, n, "g");
  model_init_params(&layout, p_cpu, 4);
  memcpy(p_gpu, p_cpu, n * sizeof *p_cpu);
  rnnd_config cfg;
  config_init_defaults(&cfg);
  rnnd_optimizer o_cpu, o_gpu;
  optimizer_init(&o_cpu, &cfg.train, n);
  optimizer_init(&o_gpu, &cfg.train, n);
  double worst = 0.0, first = 0.0, last = 0.0;
  for (int step = 0; step < 20; step++) {
    double a = train_step(cpu, &o_cpu, p_cpu, grads, &b, step, n);
    double g = train_step(gpu, &o_gpu, p_gpu, grads, &b, step, n);
    worst = fmax(worst, fabs(g - a) / a);
    if (step == 0) first = a;
    last = a;
  }
  char what[120];
  snprintf(what, sizeof what, "%s 20 Adam steps (loss %.3f -> %.3f): worst loss difference", model_cell_name(cell),
           first, last);
  expect(worst <= 1e-3 && last < first, what, worst, 1e-3);
  optimizer_free(&o_cpu);
  optimizer_free(&o_gpu);
  cpu->ops->destroy(cpu);
  gpu->ops->destroy(gpu);
  free(p_cpu);
  free(p_gpu);
  free(grads);
  batch_free(&b);
  dataset_free(&ds);
}

int main(void) {
  rnnd_set_program_name("test_cuda_backend");
  if (cuda_device_count() == 0) {
    printf("SKIPPED: no CUDA device\n");
    return SKIP_CODE;
  }
  char name[160];
  cuda_device_bind(0, name, sizeof name);
  printf("device: %s\n", name);
  static const model_case cases[] = {
      {RNND_CELL_GRU, 1, 1, 0, 0.0f},  {RNND_CELL_GRU, 3, 1, 1, 0.3f},  {RNND_CELL_GRU, 1, 2, 0, 0.0f},
      {RNND_CELL_GRU, 3, 2, 1, 0.3f},  {RNND_CELL_LSTM, 1, 1, 1, 0.0f}, {RNND_CELL_LSTM, 3, 1, 0, 0.3f},
      {RNND_CELL_LSTM, 1, 2, 1, 0.3f}, {RNND_CELL_LSTM, 3, 2, 0, 0.0f},
  };
  static const rnnd_dtype storages[] = {RNND_DTYPE_F32, RNND_DTYPE_F16, RNND_DTYPE_BF16};
  for (size_t s = 0; s < sizeof storages / sizeof *storages; s++)
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) compare_case(&cases[c], storages[s]);
  compare_training(RNND_CELL_GRU);
  compare_training(RNND_CELL_LSTM);
  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures ? 1 : 0;
}
