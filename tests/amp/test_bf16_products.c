/* test_bf16_products.c — train.precision = bf16 on the CPU computes its
 * large products in bf16 through oneDNN (input projections, recurrent
 * products, decoder forward and both gradients; fp32 accumulation), and
 * the gradients stay those of fp32: on small models (GRU and LSTM, 1 and 2
 * layers, uni- and bidirectional, tied, with dropout; a batch carried from
 * stream state; a batch back-propagated by segments, whose starting states
 * enter the first step's product), from the same bf16-rounded weights, the
 * bf16 backend's
 *  - loss is within 1e-2 (relative) of the fp32 backend's, and evaluation too;
 *  - gradient is within 2e-2 of fp32's as a whole (L2 norm of the
 *    difference over the L2 norm), and every tensor's within 3e-2 (seen
 *    here: at most 6e-3 and 1e-2: bf16 keeps 8 bits of mantissa);
 * and the bf16 backend's start-up note says its products run on oneDNN.
 * Where a bf16 backend says otherwise (a build without oneDNN) it prints
 * that note and exits 77 (skipped). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/backend.h"
#include "rnnd/common.h"
#include "rnnd/rng.h"
#include "../random_dataset.h"

#define VOCAB 301
#define PIECES 9

static int failures = 0, checks = 0;

static void expect(int ok, const char *what, double value, double limit) {
  checks++;
  printf("%s %-70s %.3g (limit %.0e)\n", ok ? "ok  " : "FAIL", what, value, limit);
  if (!ok) failures++;
}

typedef struct {
  const char *label;
  int cell, layers, directions, tie, segment, carry;
  float dropout;
} product_case;

typedef struct {
  rnnd_dataset data;
  rnnd_batch batch;
} case_batch;

static void make_batch(case_batch *cb) {
  static const int lengths[PIECES] = {41, 40, 33, 17, 9, 9, 4, 2, 1};
  memset(cb, 0, sizeof *cb);
  rnnd_dataset *ds = &cb->data;
  random_dataset(ds, lengths, PIECES, PIECES, VOCAB, 0, 61);
  rnnd_piece pieces[PIECES];
  for (int i = 0; i < PIECES; i++) pieces[i] = (rnnd_piece){.start = ds->offsets[i], .length = lengths[i], .id = 7 * i};
  batch_init(&cb->batch, PIECES, lengths[0], ds->n_tokens);
  batch_fill(&cb->batch, ds, pieces, PIECES);
}

typedef struct {
  double loss, eval;
  float *grads;
  char note[256];
} run_result;

static run_result run(const rnnd_layout *layout, const float *params, const rnnd_batch *b, const product_case *c,
                      rnnd_dtype storage, const float *state) {
  rnnd_backend_capacity cap = {.max_pieces = PIECES, .max_steps = b->n_steps, .max_tokens = b->n_tokens, .threads = 2,
                               .storage = storage, .bptt_segment = c->segment};
  rnnd_backend *be = cpu_backend_create(layout, &cap);
  run_result r = {0};
  r.grads = RNND_ALLOC(float, layout->numel, "gradient");
  const int width = rnnd_state_width(&layout->shape);
  float *state_out = RNND_ALLOC(float, (size_t)PIECES * width, "state out");
  rnnd_dropout dr = {.seed = 5, .step = 2, .p = c->dropout};
  if (c->carry) be->ops->carry_state(be, state, state_out);
  r.loss = be->ops->train_batch(be, params, r.grads, b, &dr, 1.0f / (float)b->n_tokens);
  if (c->carry) be->ops->carry_state(be, state, state_out);
  r.eval = be->ops->eval_batch(be, params, b);
  snprintf(r.note, sizeof r.note, "%s", backend_describe(be));
  be->ops->destroy(be);
  free(state_out);
  return r;
}

static double global_error(const float *a, const float *ref, size_t n) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < n; i++) {
    diff += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
    norm += (double)ref[i] * ref[i];
  }
  return sqrt(diff / norm);
}

static void check_case(const product_case *c, const case_batch *data) {
  const int embed = 64, hidden = 64;
  rnnd_model_shape shape = {.cell = c->cell, .layers = c->layers, .embed = c->tie ? hidden * c->directions : embed,
                            .hidden = hidden, .vocab_size = VOCAB, .directions = c->directions,
                            .tie_weights = c->tie};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  float *params = RNND_ALLOC(float, layout.numel, "params");
  model_init_params(&layout, params, 17);
  for (size_t i = 0; i < layout.numel; i++) /* the compute copy: bf16-rounded weights */
    params[i] = rnnd_bf16_to_f32(rnnd_f32_to_bf16(3.0f * params[i]));
  const int width = rnnd_state_width(&shape);
  float *state = RNND_ALLOC(float, (size_t)PIECES * width, "state");
  for (int64_t i = 0; i < (int64_t)PIECES * width; i++)
    state[i] = rnnd_bf16_to_f32(rnnd_f32_to_bf16(0.6f * (2.0f * rng_uniform_from(rng_key2(62, (uint64_t)i)) - 1.0f)));
  run_result ref = run(&layout, params, &data->batch, c, RNND_DTYPE_F32, state);
  run_result b16 = run(&layout, params, &data->batch, c, RNND_DTYPE_BF16, state);
  char what[200];
  snprintf(what, sizeof what, "%s: loss %.5f vs fp32 %.5f", c->label, b16.loss, ref.loss);
  expect(fabs(b16.loss - ref.loss) <= 1e-2 * fabs(ref.loss), what, fabs(b16.loss - ref.loss) / fabs(ref.loss), 1e-2);
  snprintf(what, sizeof what, "%s: eval loss %.5f vs fp32 %.5f", c->label, b16.eval, ref.eval);
  expect(fabs(b16.eval - ref.eval) <= 1e-2 * fabs(ref.eval), what, fabs(b16.eval - ref.eval) / fabs(ref.eval), 1e-2);
  double all = global_error(b16.grads, ref.grads, layout.numel), worst = 0.0;
  const char *worst_name = "";
  for (int v = 0; v < layout.n_views; v++) {
    const rnnd_param_view *view = &layout.views[v];
    double e = global_error(b16.grads + view->offset, ref.grads + view->offset, view->numel);
    if (e > worst) {
      worst = e;
      worst_name = view->name;
    }
  }
  snprintf(what, sizeof what, "%s: gradient, |bf16 - fp32| / |fp32| over all tensors", c->label);
  expect(all <= 2e-2, what, all, 2e-2);
  snprintf(what, sizeof what, "%s: worst tensor (%s)", c->label, worst_name);
  expect(worst <= 3e-2, what, worst, 3e-2);
  snprintf(what, sizeof what, "%s: the bf16 backend says '%.60s'", c->label, b16.note);
  expect(strstr(b16.note, "bf16 products through oneDNN") != NULL, what, 0, 0);
  free(ref.grads);
  free(b16.grads);
  free(params);
  free(state);
}

/* What a bf16 CPU backend says its products run on. */
static void bf16_products_note(char *buf, size_t size) {
  rnnd_model_shape shape = {.cell = RNND_CELL_GRU, .layers = 1, .embed = 8, .hidden = 8, .vocab_size = 10,
                            .directions = 1};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  rnnd_backend_capacity cap = {.max_pieces = 1, .max_steps = 1, .max_tokens = 1, .threads = 1,
                               .storage = RNND_DTYPE_BF16};
  rnnd_backend *be = cpu_backend_create(&layout, &cap);
  snprintf(buf, size, "%s", backend_describe(be));
  be->ops->destroy(be);
}

int main(void) {
  rnnd_set_program_name("test_bf16_products");
  char note[256];
  bf16_products_note(note, sizeof note);
  if (!strstr(note, "bf16 products through oneDNN")) {
    printf("SKIPPED: %s\n", note); /* a build without oneDNN */
    return 77;
  }
  case_batch data;
  make_batch(&data);
  static const product_case cases[] = {
      {"GRU 2 layers tied, dropout 0.1", RNND_CELL_GRU, 2, 1, 1, 0, 0, 0.1f},
      {"LSTM 2 layers, dropout 0.1", RNND_CELL_LSTM, 2, 1, 0, 0, 0, 0.1f},
      {"GRU 1 layer bidirectional", RNND_CELL_GRU, 1, 2, 0, 0, 0, 0.0f},
      {"LSTM 2 layers bidirectional", RNND_CELL_LSTM, 2, 2, 0, 0, 0, 0.0f},
      {"GRU 2 layers, carried state", RNND_CELL_GRU, 2, 1, 0, 0, 1, 0.0f},
      {"LSTM 2 layers, carried state, segments of 7", RNND_CELL_LSTM, 2, 1, 0, 7, 1, 0.1f},
      {"GRU 2 layers, segments of 5", RNND_CELL_GRU, 2, 1, 0, 5, 0, 0.0f},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i], &data);
  batch_free(&data.batch);
  dataset_free(&data.data);
  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures ? 1 : 0;
}
