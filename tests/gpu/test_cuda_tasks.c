/* test_cuda_tasks.c — the CUDA backend computes the CPU reference's
 * function for the workloads beyond whole-sequence language models:
 *  - segmented backpropagation (capacity.bptt_segment = K, K = 7 and 64)
 *    on a batch of long uneven pieces (300 steps down to 1), GRU and LSTM,
 *    2 layers, with dropout: loss and every gradient equal the CPU's
 *    whole-batch ones (<= 1e-4 relative in fp32), evaluation too, and the
 *    GPU holds fewer activation bytes than without segments;
 *  - carried stream state (carry_state): the same state rows in, the same
 *    loss, gradients and end-state rows out (whole and by segments);
 *  - model.task = classify (uni- and bidirectional): loss, gradients and
 *    the count of correct pieces;
 *  - model.task = regress: loss, gradients, and the squared and absolute
 *    errors in original units.
 * fp32 at 1e-4; bf16 and fp16 storage once per task at 2e-2. One named
 * case per run (gpu_compare.h: --case NAME, --list, --cpu-standin); with
 * the CPU standing in (with the same segments) the harness itself is
 * checked where there is no GPU: segmented against whole batches on the
 * CPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/backend.h"
#include "rnnd/common.h"
#include "rnnd/cuda_backend.h"
#include "rnnd/rng.h"
#include "../random_dataset.h"

#include "gpu_compare.h"

#define N_PIECES 7
#define VOCAB 40
#define FEATURES 3

static const int piece_lengths[N_PIECES] = {300, 300, 170, 64, 63, 2, 1};
static const float feature_std[FEATURES] = {2.0f, 0.5f, 10.0f};

static double relative(double a, double b) { return relative_error(a, b); }

typedef struct {
  rnnd_dataset data;
  rnnd_batch batch;
} test_batch;

/* Random tokens, labels and (with features) series rows; each sequence is one piece. */
static void make_batch(test_batch *tb, int features) {
  memset(tb, 0, sizeof *tb);
  rnnd_dataset *ds = &tb->data;
  rnnd_piece pieces[N_PIECES];
  random_dataset(ds, piece_lengths, N_PIECES, N_PIECES, VOCAB, 1, 91);
  for (int i = 0; i < N_PIECES; i++)
    pieces[i] = (rnnd_piece){.start = ds->offsets[i], .length = piece_lengths[i], .id = 200 + i};
  rnnd_batch *b = &tb->batch;
  batch_init(b, N_PIECES, piece_lengths[0], ds->n_tokens);
  batch_fill(b, ds, pieces, N_PIECES);
  for (int i = 0; i < N_PIECES; i++) b->labels[i] = (i * 5) % 4;
  if (!features) return;
  batch_init_series(b, features);
  for (int64_t r = 0; r < b->n_tokens * features; r++) {
    b->series_in[r] = 2.0f * rng_uniform_from(rng_key2(92, (uint64_t)r)) - 1.0f;
    b->series_target[r] = 2.0f * rng_uniform_from(rng_key2(93, (uint64_t)r)) - 1.0f;
  }
  b->n_scored = 0;
  for (int64_t r = 0; r < b->n_tokens; r++) {
    b->scored[r] = (uint8_t)(rng_key2(94, (uint64_t)r) % 3 != 0);
    b->n_scored += b->scored[r];
  }
  b->series_std = feature_std;
}

static void free_batch(test_batch *tb) {
  batch_free(&tb->batch);
  dataset_free(&tb->data);
}

typedef struct {
  const char *label;
  rnnd_model_shape shape;
  rnnd_dtype storage;
  int segment;     /* the GPU's bptt_segment (the CPU runs whole batches) */
  int carry;       /* carry_state with random rows */
  float dropout;
} task_case;

typedef struct {
  double loss, eval_loss;
  float *grads, *state_out;
  rnnd_head_stats stats, eval_stats;
  size_t activation_bytes;
} run_result;

static void run_backend(rnnd_backend *be, const float *params, const rnnd_batch *b, const task_case *c,
                        const float *state_in, run_result *out) {
  const size_t n = be->layout->numel;
  const int width = rnnd_state_width(&be->layout->shape);
  out->grads = RNND_ALLOC(float, n, "grads");
  out->state_out = RNND_ALLOC(float, (size_t)N_PIECES * width, "state out");
  rnnd_dropout dr = {.seed = 5, .step = 3, .p = c->dropout};
  if (c->carry) be->ops->carry_state(be, state_in, out->state_out);
  out->loss = be->ops->train_batch(be, params, out->grads, b, &dr, 0.01f);
  be->ops->last_stats(be, &out->stats);
  out->eval_loss = be->ops->eval_batch(be, params, b);
  be->ops->last_stats(be, &out->eval_stats);
  out->activation_bytes = be->ops->activation_bytes(be);
}

static void compare_stats(gpu_test *t, const char *label, const rnnd_head_stats *gpu, const rnnd_head_stats *cpu, double limit) {
  char what[160];
  if (cpu->values || gpu->values) {
    snprintf(what, sizeof what, "%s: scored values %lld vs %lld", label, (long long)gpu->values,
             (long long)cpu->values);
    expect(t, gpu->values == cpu->values, what, (double)(gpu->values - cpu->values), 0);
    snprintf(what, sizeof what, "%s: squared error", label);
    expect(t, relative(gpu->sq_error, cpu->sq_error) <= limit, what, relative(gpu->sq_error, cpu->sq_error), limit);
    snprintf(what, sizeof what, "%s: absolute error", label);
    expect(t, relative(gpu->abs_error, cpu->abs_error) <= limit, what, relative(gpu->abs_error, cpu->abs_error), limit);
  } else {
    snprintf(what, sizeof what, "%s: correct pieces %lld vs %lld", label, (long long)gpu->correct,
             (long long)cpu->correct);
    expect(t, gpu->correct == cpu->correct, what, (double)(gpu->correct - cpu->correct), 0);
  }
}

static void compare_case(gpu_test *t, const task_case *c) {
  const double limit = c->storage == RNND_DTYPE_F32 ? 1e-4 : 2e-2;
  rnnd_layout layout;
  model_layout_init(&layout, &c->shape);
  test_batch tb;
  make_batch(&tb, c->shape.n_features);
  const rnnd_batch *b = &tb.batch;
  rnnd_backend_capacity cap = {.max_pieces = N_PIECES, .max_steps = b->n_steps, .max_tokens = b->n_tokens,
                               .threads = 1, .storage = c->storage};
  rnnd_backend *cpu = cpu_backend_create(&layout, &cap);
  rnnd_backend *plain_gpu = c->segment ? t->create_tested(&layout, &cap) : NULL;
  cap.bptt_segment = c->segment;
  rnnd_backend *gpu = t->create_tested(&layout, &cap);
  const size_t n = layout.numel;
  const int width = rnnd_state_width(&layout.shape);
  float *params = RNND_ALLOC(float, n, "params"), *state_in = RNND_ALLOC(float, (size_t)N_PIECES * width, "state");
  model_init_params(&layout, params, 8);
  for (size_t i = 0; i < n && c->storage != RNND_DTYPE_F32; i++)
    params[i] = rnnd_half_to_f32(c->storage, rnnd_f32_to_half(c->storage, params[i]));
  for (int64_t i = 0; i < (int64_t)N_PIECES * width; i++)
    state_in[i] = 0.5f * (2.0f * rng_uniform_from(rng_key2(95, (uint64_t)i)) - 1.0f);
  run_result rc, rg;
  run_backend(cpu, params, b, c, state_in, &rc);
  run_backend(gpu, params, b, c, state_in, &rg);
  char what[200];
  snprintf(what, sizeof what, "%s: loss", c->label);
  expect(t, relative(rg.loss, rc.loss) <= limit, what, relative(rg.loss, rc.loss), limit);
  double worst = 0.0;
  const char *worst_name = "";
  for (int v = 0; v < layout.n_views; v++) {
    const rnnd_param_view *view = &layout.views[v];
    double e = tensor_error(rg.grads + view->offset, rc.grads + view->offset, view->numel);
    if (e > worst) {
      worst = e;
      worst_name = view->name;
    }
  }
  snprintf(what, sizeof what, "%s: gradients (worst %s)", c->label, worst_name);
  expect(t, worst <= limit, what, worst, limit);
  snprintf(what, sizeof what, "%s: eval loss", c->label);
  expect(t, relative(rg.eval_loss, rc.eval_loss) <= limit, what, relative(rg.eval_loss, rc.eval_loss), limit);
  if (c->carry) {
    int rows = b->batch_sizes[b->n_steps - 1];
    double e = tensor_error(rg.state_out, rc.state_out, (size_t)rows * width);
    snprintf(what, sizeof what, "%s: end state (%d rows)", c->label, rows);
    expect(t, e <= limit, what, e, limit);
  }
  if (c->shape.task != RNND_TASK_LM) {
    compare_stats(t, c->label, &rg.stats, &rc.stats, limit);
    snprintf(what, sizeof what, "%s eval", c->label);
    compare_stats(t, what, &rg.eval_stats, &rc.eval_stats, limit);
  }
  if (plain_gpu) {
    size_t whole = plain_gpu->ops->activation_bytes(plain_gpu);
    snprintf(what, sizeof what, "%s: activation MiB with segments / without (%.2f / %.2f)", c->label,
             rg.activation_bytes / 1048576.0, whole / 1048576.0);
    expect(t, rg.activation_bytes < whole, what, (double)rg.activation_bytes / (double)whole, 1.0);
    plain_gpu->ops->destroy(plain_gpu);
  }
  free(rc.grads);
  free(rc.state_out);
  free(rg.grads);
  free(rg.state_out);
  free(params);
  free(state_in);
  cpu->ops->destroy(cpu);
  gpu->ops->destroy(gpu);
  free_batch(&tb);
}

static rnnd_model_shape lm_shape(int cell) {
  return (rnnd_model_shape){.cell = cell, .layers = 2, .embed = 24, .hidden = 32, .vocab_size = VOCAB,
                            .directions = 1};
}

/* The cases, by name. */
static int task_cases(task_case *cases) {
  rnnd_model_shape gru = lm_shape(RNND_CELL_GRU), lstm = lm_shape(RNND_CELL_LSTM);
  rnnd_model_shape classify_bi = gru, classify_lstm = lstm, regress = lstm;
  classify_bi.directions = 2;
  classify_bi.task = classify_lstm.task = RNND_TASK_CLASSIFY;
  classify_bi.n_classes = classify_lstm.n_classes = 4;
  regress.task = RNND_TASK_REGRESS;
  regress.n_features = FEATURES;
  regress.vocab_size = 0;
  const task_case all[] = {
      {"segments_gru_k7", gru, RNND_DTYPE_F32, 7, 0, 0.2f},
      {"segments_lstm_k64", lstm, RNND_DTYPE_F32, 64, 0, 0.2f},
      {"carry_gru", gru, RNND_DTYPE_F32, 0, 1, 0.2f},
      {"carry_lstm_segments_k64", lstm, RNND_DTYPE_F32, 64, 1, 0.0f},
      {"carry_lstm_bf16", lstm, RNND_DTYPE_BF16, 0, 1, 0.0f},
      {"classify_gru_bi", classify_bi, RNND_DTYPE_F32, 0, 0, 0.2f},
      {"classify_lstm_segments_k64", classify_lstm, RNND_DTYPE_F32, 64, 0, 0.2f},
      {"classify_gru_bi_bf16", classify_bi, RNND_DTYPE_BF16, 0, 0, 0.0f},
      {"classify_gru_bi_fp16", classify_bi, RNND_DTYPE_F16, 0, 0, 0.0f},
      {"regress_lstm", regress, RNND_DTYPE_F32, 0, 0, 0.2f},
      {"regress_lstm_segments_k7", regress, RNND_DTYPE_F32, 7, 0, 0.0f},
      {"regress_lstm_bf16", regress, RNND_DTYPE_BF16, 0, 0, 0.0f},
      {"regress_lstm_fp16", regress, RNND_DTYPE_F16, 0, 0, 0.0f},
  };
  int n = (int)(sizeof all / sizeof *all);
  for (int i = 0; i < n; i++) cases[i] = all[i];
  return n;
}

static void list_cases(void) {
  task_case cases[32];
  int n = task_cases(cases);
  for (int i = 0; i < n; i++) printf("%s\n", cases[i].label);
}

static int run_case(gpu_test *t, const char *name) {
  task_case cases[32];
  int n = task_cases(cases);
  for (int i = 0; i < n; i++)
    if (!strcmp(cases[i].label, name)) {
      compare_case(t, &cases[i]);
      return 1;
    }
  return 0;
}

int main(int argc, char **argv) { return gpu_test_main(argc, argv, "test_cuda_tasks", list_cases, run_case); }
