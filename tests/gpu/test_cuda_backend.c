/* test_cuda_backend.c — the CUDA backend computes the CPU reference's
 * function, one named case per run (gpu_compare.h):
 *  - CELL_lLAYERS_DIR[_tied]_pDROPOUT_DTYPE (e.g. gru_l3_bi_tied_p3_fp16):
 *    on the same weights and a packed batch of uneven lengths (including
 *    length 1), the loss and every parameter's gradient agree (max
 *    |cuda - cpu| over the tensor, relative to max |cpu|: <= 1e-4 in fp32,
 *    <= 1e-2 with fp16 or bf16 activations), and so does evaluation (no
 *    dropout, cuDNN's inference mode); dropout pN is 0.N with the same masks;
 *  - train_gru, train_lstm: 20 steps of clip + Adam from the same start
 *    through train_batch keep the losses together (<= 1e-3);
 *  - big_decoder_DTYPE: a vocabulary of 50000 and 700 tokens, so the
 *    decoder runs in several blocks of rows: loss, gradients, eval;
 *  - shape_sweep_DTYPE: one backend sized for 24 pieces x 40 steps runs
 *    batches of many shapes within that capacity (1..24 pieces, 1..40
 *    steps, even and uneven); each agrees with the CPU, and the workspace
 *    growths this needed are printed (cuDNN's temp-space sizes are not
 *    monotonic in the shape, so the backend regrows instead of failing). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/backend.h"
#include "rnnd/common.h"
#include "rnnd/cuda_backend.h"
#include "rnnd/optim.h"
#include "rnnd/rng.h"
#include "../random_dataset.h"

#include "gpu_compare.h"

#define MAX_PIECES 32

static const rnnd_dtype storages[] = {RNND_DTYPE_F32, RNND_DTYPE_F16, RNND_DTYPE_BF16};

typedef struct {
  int cell, layers, directions, tie, dropout_tenths;
  rnnd_dtype storage;
} model_case;

/* The eight model shapes, each run in every storage format. */
static const model_case shapes[] = {
    {RNND_CELL_GRU, 1, 1, 0, 0, 0},  {RNND_CELL_GRU, 3, 1, 1, 3, 0},  {RNND_CELL_GRU, 1, 2, 0, 0, 0},
    {RNND_CELL_GRU, 3, 2, 1, 3, 0},  {RNND_CELL_LSTM, 1, 1, 1, 0, 0}, {RNND_CELL_LSTM, 3, 1, 0, 3, 0},
    {RNND_CELL_LSTM, 1, 2, 1, 3, 0}, {RNND_CELL_LSTM, 3, 2, 0, 0, 0},
};

static void case_name(const model_case *c, char *buf, size_t size) {
  snprintf(buf, size, "%s_l%d_%s%s_p%d_%s", c->cell == RNND_CELL_LSTM ? "lstm" : "gru", c->layers,
           c->directions == 2 ? "bi" : "uni", c->tie ? "_tied" : "", c->dropout_tenths, rnnd_dtype_name(c->storage));
}

/* n sequences of the given lengths, random tokens < vocab. */
static void make_dataset(rnnd_dataset *ds, const int *lengths, int n, int vocab, uint64_t seed) {
  random_dataset(ds, lengths, n, n, vocab, 0, seed);
}

/* Sequences first .. first + count of ds as one batch (each one piece). */
static void fill_batch(rnnd_batch *b, const rnnd_dataset *ds, int first, int count) {
  rnnd_piece pieces[MAX_PIECES];
  for (int i = 0; i < count; i++)
    pieces[i] = (rnnd_piece){.start = ds->offsets[first + i],
                             .length = (int32_t)dataset_sequence_length(ds, first + i), .id = 100 + first + i};
  batch_fill(b, ds, pieces, count);
}

/* The trainer's compute copy: the weights rounded to the 16-bit format. */
static void round_weights(rnnd_dtype storage, float *w, size_t n) {
  for (size_t i = 0; i < n && storage != RNND_DTYPE_F32; i++)
    w[i] = rnnd_half_to_f32(storage, rnnd_f32_to_half(storage, w[i]));
}

static double limit_for(rnnd_dtype storage) { return storage == RNND_DTYPE_F32 ? 1e-4 : 1e-2; }

/* Loss, every gradient and the eval loss of the tested backend against the
 * CPU's on batch b with the given weights. */
static void compare_batch(gpu_test *t, const char *label, rnnd_backend *cpu, rnnd_backend *tested,
                          const float *params, const rnnd_batch *b, const rnnd_dropout *dr, rnnd_dtype storage) {
  const rnnd_layout *layout = cpu->layout;
  size_t n = layout->numel;
  float *g_cpu = RNND_ALLOC(float, n, "cpu grads"), *g_tested = RNND_ALLOC(float, n, "tested grads");
  const float weight = 1.0f / (float)b->n_tokens;
  double l_cpu = cpu->ops->train_batch(cpu, params, g_cpu, b, dr, weight);
  double l_tested = tested->ops->train_batch(tested, params, g_tested, b, dr, weight);
  const double limit = limit_for(storage);
  char what[200];
  snprintf(what, sizeof what, "%s: loss", label);
  expect(t, relative_error(l_tested, l_cpu) <= limit, what, relative_error(l_tested, l_cpu), limit);
  const char *worst_name;
  double worst = worst_view_error(layout, g_tested, g_cpu, &worst_name);
  snprintf(what, sizeof what, "%s: gradients (worst %s)", label, worst_name);
  expect(t, worst <= limit, what, worst, limit);
  double e_cpu = cpu->ops->eval_batch(cpu, params, b), e_tested = tested->ops->eval_batch(tested, params, b);
  snprintf(what, sizeof what, "%s: eval loss", label);
  expect(t, relative_error(e_tested, e_cpu) <= limit, what, relative_error(e_tested, e_cpu), limit);
  free(g_cpu);
  free(g_tested);
}

static void compare_case(gpu_test *t, const model_case *c, const char *label) {
  static const int lengths[] = {23, 1, 9, 17, 2, 23, 5};
  const int pieces = (int)(sizeof lengths / sizeof *lengths), vocab = 97, embed = 24, hidden = 32;
  rnnd_model_shape shape = {.cell = c->cell, .layers = c->layers, .embed = c->tie ? hidden * c->directions : embed,
                            .hidden = hidden, .vocab_size = vocab, .directions = c->directions, .tie_weights = c->tie};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  rnnd_dataset ds;
  make_dataset(&ds, lengths, pieces, vocab, 11);
  rnnd_batch b;
  batch_init(&b, pieces, 23, ds.n_tokens);
  fill_batch(&b, &ds, 0, pieces);
  rnnd_backend_capacity cap = {.max_pieces = pieces, .max_steps = b.n_steps, .max_tokens = b.n_tokens, .threads = 1,
                               .storage = c->storage, .weight_dropout = 1};
  rnnd_backend *cpu = cpu_backend_create(&layout, &cap), *tested = t->create_tested(&layout, &cap);
  float *params = RNND_ALLOC(float, layout.numel, "params");
  model_init_params(&layout, params, 3);
  round_weights(c->storage, params, layout.numel);
  rnnd_dropout dr = {.seed = 7, .step = 5, .p = (float)c->dropout_tenths / 10.0f};
  compare_batch(t, label, cpu, tested, params, &b, &dr, c->storage);
  if (dr.p > 0.0f) { /* the AWD-LSTM regularisers too: locked, embedding and weight dropout, AR, TAR */
    rnnd_dropout awd = {.seed = 7, .step = 5, .p = dr.p, .locked = 1, .p_embedding = 0.2f, .ar_alpha = 2.0f,
                        .tar_beta = 1.0f, .p_weight = 0.3f};
    char regularised[160];
    snprintf(regularised, sizeof regularised, "%s +regularisers", label);
    compare_batch(t, regularised, cpu, tested, params, &b, &awd, c->storage);
  }
  cpu->ops->destroy(cpu);
  tested->ops->destroy(tested);
  free(params);
  batch_free(&b);
  dataset_free(&ds);
}

/* One clip + Adam step on each side's own weights; returns the loss. */
static double train_step(rnnd_backend *be, rnnd_optimizer *opt, float *params, float *grads, const rnnd_batch *b,
                         int64_t step, size_t n) {
  memset(grads, 0, n * sizeof *grads);
  rnnd_dropout dr = {.seed = 9, .step = step, .p = 0.1f};
  double nll = be->ops->train_batch(be, params, grads, b, &dr, 1.0f / (float)b->n_tokens);
  double norm = grad_global_norm(grads, n);
  grad_clip(grads, n, norm, 0.5);
  optimizer_step(opt, params, grads, 3e-3);
  return nll / (double)b->n_tokens;
}

static void compare_training(gpu_test *t, int cell) {
  static const int lengths[] = {23, 1, 9, 17, 2, 23, 5};
  const int pieces = (int)(sizeof lengths / sizeof *lengths);
  rnnd_model_shape shape = {.cell = cell, .layers = 2, .embed = 32, .hidden = 32, .vocab_size = 97, .directions = 1,
                            .tie_weights = 1};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  rnnd_dataset ds;
  make_dataset(&ds, lengths, pieces, 97, 13);
  rnnd_batch b;
  batch_init(&b, pieces, 23, ds.n_tokens);
  fill_batch(&b, &ds, 0, pieces);
  rnnd_backend_capacity cap = {.max_pieces = pieces, .max_steps = b.n_steps, .max_tokens = b.n_tokens, .threads = 1,
                               .storage = RNND_DTYPE_F32};
  rnnd_backend *cpu = cpu_backend_create(&layout, &cap), *tested = t->create_tested(&layout, &cap);
  size_t n = layout.numel;
  float *p_cpu = RNND_ALLOC(float, n, "p"), *p_tested = RNND_ALLOC(float, n, "p"), *grads = RNND_ALLOC(float, n, "g");
  model_init_params(&layout, p_cpu, 4);
  memcpy(p_tested, p_cpu, n * sizeof *p_cpu);
  rnnd_config cfg;
  config_init_defaults(&cfg);
  rnnd_optimizer o_cpu, o_tested;
  optimizer_init(&o_cpu, &cfg.train, n);
  optimizer_init(&o_tested, &cfg.train, n);
  double worst = 0.0, first = 0.0, last = 0.0;
  for (int step = 0; step < 20; step++) {
    double a = train_step(cpu, &o_cpu, p_cpu, grads, &b, step, n);
    double g = train_step(tested, &o_tested, p_tested, grads, &b, step, n);
    worst = fmax(worst, relative_error(g, a));
    if (step == 0) first = a;
    last = a;
  }
  char what[160];
  snprintf(what, sizeof what, "%s 20 Adam steps (loss %.3f -> %.3f): worst loss difference", model_cell_name(cell),
           first, last);
  expect(t, worst <= 1e-3 && last < first, what, worst, 1e-3);
  optimizer_free(&o_cpu);
  optimizer_free(&o_tested);
  config_free(&cfg);
  cpu->ops->destroy(cpu);
  tested->ops->destroy(tested);
  free(p_cpu);
  free(p_tested);
  free(grads);
  batch_free(&b);
  dataset_free(&ds);
}

/* 700 tokens against a vocabulary of 50000: the decoder's blocks of
 * 2^24 logits hold 335 rows, so it takes three. */
static void compare_big_decoder(gpu_test *t, rnnd_dtype storage) {
  enum { PIECES = 20 };
  int lengths[PIECES];
  for (int i = 0; i < PIECES; i++) lengths[i] = 35 - (i % 7);
  rnnd_model_shape shape = {.cell = RNND_CELL_GRU, .layers = 1, .embed = 32, .hidden = 32, .vocab_size = 50000,
                            .directions = 1};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  rnnd_dataset ds;
  make_dataset(&ds, lengths, PIECES, shape.vocab_size, 17);
  rnnd_batch b;
  batch_init(&b, PIECES, 35, ds.n_tokens);
  fill_batch(&b, &ds, 0, PIECES);
  rnnd_backend_capacity cap = {.max_pieces = PIECES, .max_steps = b.n_steps, .max_tokens = b.n_tokens, .threads = 0,
                               .storage = storage};
  rnnd_backend *cpu = cpu_backend_create(&layout, &cap), *tested = t->create_tested(&layout, &cap);
  float *params = RNND_ALLOC(float, layout.numel, "params");
  model_init_params(&layout, params, 5);
  round_weights(storage, params, layout.numel);
  char label[80];
  snprintf(label, sizeof label, "decoder V=50000, %lld rows (3 blocks) %s", (long long)b.n_tokens,
           rnnd_dtype_name(storage));
  compare_batch(t, label, cpu, tested, params, &b, NULL, storage);
  cpu->ops->destroy(cpu);
  tested->ops->destroy(tested);
  free(params);
  batch_free(&b);
  dataset_free(&ds);
}

/* Batch shapes within one capacity of 24 pieces x 40 steps. */
static void sweep_shapes(gpu_test *t, rnnd_dtype storage) {
  enum { CAP_PIECES = 24, CAP_STEPS = 40, SHAPES = 8 };
  static const int pieces_of[SHAPES] = {1, 24, 3, 24, 8, 2, 17, 24};
  static const int longest_of[SHAPES] = {40, 1, 40, 40, 13, 2, 29, 7};
  int lengths[SHAPES * CAP_PIECES], n = 0, first[SHAPES];
  for (int s = 0; s < SHAPES; s++) {
    first[s] = n;
    for (int i = 0; i < pieces_of[s]; i++) /* even (shape 3: all 40) and uneven */
      lengths[n++] = s == 3 ? longest_of[s] : longest_of[s] - (i * 5) % longest_of[s];
  }
  rnnd_model_shape shape = {.cell = RNND_CELL_LSTM, .layers = 2, .embed = 24, .hidden = 32, .vocab_size = 61,
                            .directions = 1};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  rnnd_dataset ds;
  make_dataset(&ds, lengths, n, shape.vocab_size, 19);
  rnnd_backend_capacity cap = {.max_pieces = CAP_PIECES, .max_steps = CAP_STEPS,
                               .max_tokens = (int64_t)CAP_PIECES * CAP_STEPS, .threads = 1, .storage = storage};
  rnnd_backend *cpu = cpu_backend_create(&layout, &cap), *tested = t->create_tested(&layout, &cap);
  float *params = RNND_ALLOC(float, layout.numel, "params");
  model_init_params(&layout, params, 6);
  round_weights(storage, params, layout.numel);
  rnnd_batch b;
  batch_init(&b, CAP_PIECES, CAP_STEPS, cap.max_tokens);
  for (int s = 0; s < SHAPES; s++) {
    fill_batch(&b, &ds, first[s], pieces_of[s]);
    char label[96];
    snprintf(label, sizeof label, "shape %d: %d pieces x %d steps (%lld tokens) %s", s, b.n_pieces, b.n_steps,
             (long long)b.n_tokens, rnnd_dtype_name(storage));
    rnnd_dropout dr = {.seed = 7, .step = 5, .p = 0.1f};
    compare_batch(t, label, cpu, tested, params, &b, &dr, storage);
  }
  printf("workspace growths after the first sizing: %lld (workspace now %.2f MiB)\n",
         (long long)backend_workspace_growths(tested), tested->ops->workspace_bytes(tested) / 1048576.0);
  cpu->ops->destroy(cpu);
  tested->ops->destroy(tested);
  free(params);
  batch_free(&b);
  dataset_free(&ds);
}

static void list_cases(void) {
  char name[64];
  for (size_t d = 0; d < sizeof storages / sizeof *storages; d++)
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
      model_case m = shapes[c];
      m.storage = storages[d];
      case_name(&m, name, sizeof name);
      printf("%s\n", name);
    }
  printf("train_gru\ntrain_lstm\n");
  for (size_t d = 0; d < sizeof storages / sizeof *storages; d++)
    printf("big_decoder_%s\nshape_sweep_%s\n", rnnd_dtype_name(storages[d]), rnnd_dtype_name(storages[d]));
}

static int run_case(gpu_test *t, const char *name) {
  char candidate[64];
  for (size_t d = 0; d < sizeof storages / sizeof *storages; d++) {
    const char *dtype = rnnd_dtype_name(storages[d]);
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
      model_case m = shapes[c];
      m.storage = storages[d];
      case_name(&m, candidate, sizeof candidate);
      if (!strcmp(name, candidate)) {
        compare_case(t, &m, name);
        return 1;
      }
    }
    snprintf(candidate, sizeof candidate, "big_decoder_%s", dtype);
    if (!strcmp(name, candidate)) {
      compare_big_decoder(t, storages[d]);
      return 1;
    }
    snprintf(candidate, sizeof candidate, "shape_sweep_%s", dtype);
    if (!strcmp(name, candidate)) {
      sweep_shapes(t, storages[d]);
      return 1;
    }
  }
  if (!strcmp(name, "train_gru") || !strcmp(name, "train_lstm")) {
    compare_training(t, !strcmp(name, "train_gru") ? RNND_CELL_GRU : RNND_CELL_LSTM);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) { return gpu_test_main(argc, argv, "test_cuda_backend", list_cases, run_case); }
