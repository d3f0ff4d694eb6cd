/* test_bptt_segment.c — segmented backpropagation (train.bptt_segment)
 * computes the gradients of whole-sequence backpropagation.
 *
 * A batch of long, uneven pieces (lengths 1 to 300) through GRU and LSTM
 * models of 1 and 2 layers, with and without dropout: the loss and every
 * parameter gradient with segments of K steps (K = 1, 7, 64, 299) must equal
 * those of the whole batch within 1e-5 relative (max |diff| / max |ref|),
 * evaluation too, and the backend must hold fewer activation bytes. The
 * 16-bit storage path (bf16) is checked against its own whole-batch run
 * more loosely, since a segment starts from the state as stored (rounded).
 * Classifiers (model.task = classify) too: each piece's final state lies in
 * a different segment.
 * usage: test_bptt_segment [--threads N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/backend.h"
#include "rnnd/batch.h"
#include "rnnd/common.h"
#include "rnnd/dataset.h"
#include "rnnd/model.h"
#include "rnnd/rng.h"
#include "../random_dataset.h"

#define VOCAB 40
#define N_PIECES 7
static const int piece_lengths[N_PIECES] = {300, 299, 170, 64, 63, 2, 1};

typedef struct {
  rnnd_dataset data;
  rnnd_piece pieces[N_PIECES];
  rnnd_batch batch;
} long_batch;

/* Random tokens; every sequence is one piece (no max_len cut). */
static void make_long_batch(long_batch *lb) {
  memset(lb, 0, sizeof *lb);
  rnnd_dataset *ds = &lb->data;
  random_dataset(ds, piece_lengths, N_PIECES, N_PIECES, VOCAB, 1, 77); /* eos_id 0 */
  for (int i = 0; i < N_PIECES; i++) {
    ds->tokens[ds->offsets[i + 1] - 1] = ds->eos_id;
    lb->pieces[i] = (rnnd_piece){.start = ds->offsets[i], .length = piece_lengths[i], .id = 100 + i};
  }
  batch_init(&lb->batch, N_PIECES, piece_lengths[0], ds->n_tokens);
  batch_fill(&lb->batch, ds, lb->pieces, N_PIECES);
  for (int i = 0; i < N_PIECES; i++) lb->batch.labels[i] = i % 3; /* for the classifier cases */
}

static void free_long_batch(long_batch *lb) {
  batch_free(&lb->batch);
  dataset_free(&lb->data);
}

typedef struct {
  double train_nll, eval_nll;
  float *grads;
  size_t activation_bytes;
} run_result;

static run_result run(const rnnd_layout *layout, const float *params, const rnnd_batch *b, int segment, int threads,
                      rnnd_dtype storage, const rnnd_dropout *dr) {
  rnnd_backend_capacity cap = {.max_pieces = b->n_pieces, .max_steps = b->n_steps, .max_tokens = b->n_tokens,
                               .threads = threads, .storage = storage, .bptt_segment = segment};
  rnnd_backend *be = cpu_backend_create(layout, &cap);
  run_result r = {0};
  r.grads = RNND_ALLOC(float, layout->numel, "grads");
  r.train_nll = be->ops->train_batch(be, params, r.grads, b, dr, 0.01f);
  r.eval_nll = be->ops->eval_batch(be, params, b);
  r.activation_bytes = be->ops->activation_bytes(be);
  be->ops->destroy(be);
  return r;
}

static double max_relative(const float *a, const float *ref, size_t n) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - ref[i]);
    diff = isnan(d) || d > diff ? (isnan(d) ? INFINITY : d) : diff;
    scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
  }
  return diff / scale;
}

/* One model: every K against the whole batch. Returns failures. */
static int check_model(int cell, int layers, int tie, float dropout, rnnd_dtype storage, double limit,
                       const long_batch *lb, int threads, int classes) {
  rnnd_model_shape shape = {.cell = cell, .layers = layers, .embed = 24, .hidden = 24, .vocab_size = VOCAB,
                            .directions = 1, .tie_weights = tie, .decoder = RNND_DECODER_SOFTMAX,
                            .task = classes ? RNND_TASK_CLASSIFY : RNND_TASK_LM, .n_classes = classes};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  float *params = RNND_ALLOC(float, layout.numel, "params");
  model_init_params(&layout, params, 4242);
  /* larger recurrent weights than the default init, so state gradients
   * travel far back in time and a wrong carry would show */
  for (size_t i = 0; i < layout.numel; i++) params[i] *= 2.0f;
  rnnd_dropout dr = {.seed = 3, .step = 11, .p = dropout};
  run_result whole = run(&layout, params, &lb->batch, 0, threads, storage, &dr);
  static const int segments[] = {1, 7, 64, 299};
  int failed = 0;
  for (size_t k = 0; k < sizeof segments / sizeof *segments; k++) {
    run_result seg = run(&layout, params, &lb->batch, segments[k], threads, storage, &dr);
    double g = max_relative(seg.grads, whole.grads, layout.numel);
    double l = fabs(seg.train_nll - whole.train_nll) / whole.train_nll;
    double e = fabs(seg.eval_nll - whole.eval_nll) / whole.eval_nll;
    /* fewer bytes wherever a segment holds fewer rows than the batch (K = 1
     * keeps an fp32 state per step, more than 16-bit activations) */
    const rnnd_batch *b = &lb->batch;
    int expect_smaller = segments[k] > 1 && (int64_t)segments[k] * b->n_pieces < b->n_tokens;
    int smaller = !expect_smaller || seg.activation_bytes < whole.activation_bytes;
    int ok = g <= limit && l <= limit && e <= limit && smaller;
    printf("%-4s %s L%d %s dropout %.1f %-4s K=%-3d: grad rel %.2e, loss rel %.2e, eval rel %.2e, "
           "activations %zu vs %zu bytes  %s\n",
           cell == RNND_CELL_GRU ? "gru" : "lstm", tie ? "tied  " : "untied", layers, classes ? "cls" : "lm ", dropout,
           storage == RNND_DTYPE_F32 ? "fp32" : "bf16", segments[k], g, l, e, seg.activation_bytes,
           whole.activation_bytes, ok ? "ok" : "FAILED");
    failed += !ok;
    free(seg.grads);
  }
  free(whole.grads);
  free(params);
  return failed;
}

int main(int argc, char **argv) {
  int threads = 1;
  if (argc == 3 && !strcmp(argv[1], "--threads")) threads = atoi(argv[2]);
  else if (argc != 1) {
    fprintf(stderr, "usage: test_bptt_segment [--threads N]\n");
    return 2;
  }
  long_batch lb;
  make_long_batch(&lb);
  int failed = 0, checks = 0;
  for (int cell = RNND_CELL_GRU; cell <= RNND_CELL_LSTM; cell++)
    for (int layers = 1; layers <= 2; layers++)
      for (int drop = 0; drop <= 1; drop++) {
        failed += check_model(cell, layers, layers == 2, drop ? 0.2f : 0.0f, RNND_DTYPE_F32, 1e-5, &lb, threads, 0);
        checks += 4;
      }
  for (int cell = RNND_CELL_GRU; cell <= RNND_CELL_LSTM; cell++) {
    failed += check_model(cell, 2, 0, 0.2f, RNND_DTYPE_F32, 1e-5, &lb, threads, 3);
    checks += 4;
  }
  for (int cell = RNND_CELL_GRU; cell <= RNND_CELL_LSTM; cell++) {
    failed += check_model(cell, 2, 0, 0.2f, RNND_DTYPE_BF16, 3e-2, &lb, threads, 0);
    checks += 4;
  }
  free_long_batch(&lb);
  printf("%d passed, %d failed\n", checks - failed, failed);
  return failed ? 1 : 0;
}
