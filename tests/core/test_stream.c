/* test_stream.c — data.mode = stream (stream.h, backend carry_state).
 *
 * 1. The plan: over every rank and window, each token of the corpus is a
 *    target exactly once; a window's pieces come in stream order with
 *    non-increasing lengths (so row i of a batch is stream first + i); the
 *    ranks' slices partition the streams; window token counts add up.
 * 2. The carry: evaluating the windows one after another, each starting
 *    from the state the previous one left, gives the NLL of running every
 *    stream whole from a zero state (within 1e-6 relative), for GRU and
 *    LSTM, whole-batch and segmented (train.bptt_segment) backends.
 * 3. The gradient stops at the carried state: for a window started from a
 *    non-zero carried state, the gradient is the derivative of that
 *    window's loss with the state held fixed (central differences along a
 *    random direction, within 1e-2), and the segmented backend's gradient
 *    equals the whole-batch one within 1e-5.
 * usage: test_stream */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/backend.h"
#include "rnnd/batch.h"
#include "rnnd/common.h"
#include "rnnd/model.h"
#include "rnnd/rng.h"
#include "rnnd/stream.h"

static int failures, checks;

static void check(int ok, const char *what) {
  checks++;
  failures += !ok;
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
}

/* --- 1. the plan ---------------------------------------------------------- */

static void check_plan(int64_t n_tokens, int64_t n_streams, int bptt, int world) {
  int *seen = calloc((size_t)n_tokens, sizeof *seen), order_ok = 1, counts_ok = 1;
  int64_t next_first = 0;
  rnnd_piece *pieces = RNND_ALLOC(rnnd_piece, n_streams, "pieces");
  rnnd_stream_plan p;
  for (int r = 0; r < world; r++) {
    stream_plan_init(&p, n_tokens, n_streams, bptt, r, world, "plan test", "test");
    counts_ok &= p.first == next_first;
    next_first = p.first + p.count;
    for (int64_t w = 0; w < p.n_windows; w++) {
      int n = stream_window_pieces(&p, w, pieces);
      for (int i = 0; i < n; i++) {
        order_ok &= pieces[i].id == p.first + i && (i == 0 || pieces[i].length <= pieces[i - 1].length);
        for (int64_t k = pieces[i].start; k < pieces[i].start + pieces[i].length; k++) seen[k]++;
      }
    }
  }
  counts_ok &= next_first == n_streams;
  int64_t window_sum = 0;
  for (int64_t w = 0; w < p.n_windows; w++) window_sum += stream_window_tokens(&p, w);
  int once = 1;
  for (int64_t k = 0; k < n_tokens; k++) once &= seen[k] == 1;
  char what[160];
  snprintf(what, sizeof what, "plan %lld tokens, %lld streams, bptt %d, %d ranks: every token once, stream order, "
           "slices partition", (long long)n_tokens, (long long)n_streams, bptt, world);
  check(once && order_ok && counts_ok && window_sum == n_tokens, what);
  free(seen);
  free(pieces);
}

/* --- a small corpus and model ------------------------------------------- */

#define VOCAB 30
#define N_TOKENS 2003
#define N_STREAMS 5
#define BPTT 37

typedef struct {
  rnnd_dataset data;
  rnnd_layout layout;
  float *params;
  int width;
} setup;

static void make_setup(setup *s, int cell) {
  memset(s, 0, sizeof *s);
  s->data.tokens = RNND_ALLOC(int32_t, N_TOKENS, "tokens");
  s->data.offsets = RNND_ALLOC(int64_t, 2, "offsets");
  s->data.offsets[1] = s->data.n_tokens = N_TOKENS;
  s->data.n_sequences = 1;
  s->data.vocab_size = VOCAB;
  for (int64_t i = 0; i < N_TOKENS; i++) s->data.tokens[i] = (int32_t)(rng_key2(31, (uint64_t)i) % VOCAB);
  rnnd_model_shape shape = {.cell = cell, .layers = 2, .embed = 16, .hidden = 16, .vocab_size = VOCAB,
                            .directions = 1, .decoder = RNND_DECODER_SOFTMAX};
  model_layout_init(&s->layout, &shape);
  s->params = RNND_ALLOC(float, s->layout.numel, "params");
  model_init_params(&s->layout, s->params, 5);
  for (size_t i = 0; i < s->layout.numel; i++) s->params[i] *= 2.0f; /* a state worth carrying */
  s->width = rnnd_state_width(&shape);
}

static void free_setup(setup *s) {
  free(s->data.tokens);
  free(s->data.offsets);
  free(s->params);
}

static rnnd_backend *backend(const setup *s, int max_steps, int segment) {
  rnnd_backend_capacity cap = {.max_pieces = N_STREAMS, .max_steps = max_steps,
                               .max_tokens = (int64_t)N_STREAMS * max_steps, .threads = 1,
                               .storage = RNND_DTYPE_F32, .bptt_segment = segment};
  return cpu_backend_create(&s->layout, &cap);
}

/* --- 2. the carry ---------------------------------------------------------- */

/* Windows in order with the state carried; returns the summed NLL and
 * leaves the state before window `stop` in state_at_stop (if not NULL). */
static double windows_nll(const setup *s, rnnd_backend *be, int64_t stop, float *state_at_stop) {
  rnnd_stream_plan p;
  stream_plan_init(&p, N_TOKENS, N_STREAMS, BPTT, 0, 1, "carry test", "test");
  float *state[2] = {calloc((size_t)N_STREAMS * s->width, sizeof(float)),
                     calloc((size_t)N_STREAMS * s->width, sizeof(float))};
  rnnd_piece pieces[N_STREAMS];
  rnnd_batch b;
  batch_init(&b, N_STREAMS, BPTT, (int64_t)N_STREAMS * BPTT);
  double nll = 0.0;
  int cur = 0;
  for (int64_t w = 0; w < p.n_windows; w++) {
    if (w == stop && state_at_stop) memcpy(state_at_stop, state[cur], (size_t)N_STREAMS * s->width * sizeof(float));
    int n = stream_window_pieces(&p, w, pieces);
    batch_fill(&b, &s->data, pieces, n);
    be->ops->carry_state(be, state[cur], state[1 - cur]);
    nll += be->ops->eval_batch(be, s->params, &b);
    cur = 1 - cur;
  }
  batch_free(&b);
  free(state[0]);
  free(state[1]);
  return nll;
}

/* Every stream as one piece from a zero state. */
static double whole_streams_nll(const setup *s) {
  rnnd_stream_plan p;
  stream_plan_init(&p, N_TOKENS, N_STREAMS, BPTT, 0, 1, "carry test", "test");
  rnnd_piece pieces[N_STREAMS];
  int longest = (int)stream_length(&p, 0);
  for (int i = 0; i < N_STREAMS; i++)
    pieces[i] = (rnnd_piece){.start = stream_start(&p, i), .length = (int32_t)stream_length(&p, i), .id = i};
  rnnd_backend *be = backend(s, longest, 0);
  rnnd_batch b;
  batch_init(&b, N_STREAMS, longest, N_TOKENS);
  batch_fill(&b, &s->data, pieces, N_STREAMS);
  double nll = be->ops->eval_batch(be, s->params, &b);
  batch_free(&b);
  be->ops->destroy(be);
  return nll;
}

/* --- 3. the gradient of one window from a carried state ------------------ */

typedef struct {
  rnnd_batch batch;
  const float *state_in;
  float *state_out;
} window;

static double window_loss(rnnd_backend *be, window *w, const float *params, float *grads) {
  be->ops->carry_state(be, w->state_in, w->state_out);
  if (grads) return be->ops->train_batch(be, params, grads, &w->batch, NULL, 1.0f);
  return be->ops->eval_batch(be, params, &w->batch);
}

static void check_window_gradient(const setup *s, const char *cell) {
  const int64_t w_index = 3;
  rnnd_stream_plan p;
  stream_plan_init(&p, N_TOKENS, N_STREAMS, BPTT, 0, 1, "gradient test", "test");
  float *state_in = calloc((size_t)N_STREAMS * s->width, sizeof(float));
  float *state_out = calloc((size_t)N_STREAMS * s->width, sizeof(float));
  rnnd_backend *whole = backend(s, BPTT, 0), *segmented = backend(s, BPTT, 8);
  windows_nll(s, whole, w_index, state_in);
  rnnd_piece pieces[N_STREAMS];
  window w = {.state_in = state_in, .state_out = state_out};
  batch_init(&w.batch, N_STREAMS, BPTT, (int64_t)N_STREAMS * BPTT);
  batch_fill(&w.batch, &s->data, pieces, stream_window_pieces(&p, w_index, pieces));
  size_t n = s->layout.numel;
  float *g = calloc(n, sizeof *g), *g_seg = calloc(n, sizeof *g), *v = malloc(n * sizeof *v), *x = malloc(n * sizeof *x);
  window_loss(whole, &w, s->params, g);
  window_loss(segmented, &w, s->params, g_seg);
  double analytic = 0.0, diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; i++) {
    v[i] = 2.0f * rng_uniform_from(rng_key2(9, i)) - 1.0f;
    analytic += (double)g[i] * v[i];
    diff = fmax(diff, fabs((double)g_seg[i] - g[i]));
    scale = fmax(scale, fabs((double)g[i]));
  }
  const float eps = 1e-3f;
  for (size_t i = 0; i < n; i++) x[i] = s->params[i] + eps * v[i];
  double plus = window_loss(whole, &w, x, NULL);
  for (size_t i = 0; i < n; i++) x[i] = s->params[i] - eps * v[i];
  double minus = window_loss(whole, &w, x, NULL);
  double numeric = (plus - minus) / (2.0 * eps), rel = fabs(analytic - numeric) / fabs(numeric);
  char what[200];
  snprintf(what, sizeof what, "%s window %lld from a carried state: gradient . v %.6f, central difference %.6f "
           "(rel %.1e <= 1e-2)", cell, (long long)w_index, analytic, numeric, rel);
  check(rel <= 1e-2, what);
  snprintf(what, sizeof what, "%s window %lld: segmented (K = 8) gradient vs whole, rel %.1e <= 1e-5", cell,
           (long long)w_index, diff / scale);
  check(diff / scale <= 1e-5, what);
  batch_free(&w.batch);
  whole->ops->destroy(whole);
  segmented->ops->destroy(segmented);
  free(state_in);
  free(state_out);
  free(g);
  free(g_seg);
  free(v);
  free(x);
}

int main(void) {
  check_plan(2003, 5, 37, 1);
  check_plan(2003, 5, 37, 2);
  check_plan(1000, 8, 10, 3);
  check_plan(64, 64, 1, 4);
  check_plan(100, 7, 200, 7);
  for (int cell = RNND_CELL_GRU; cell <= RNND_CELL_LSTM; cell++) {
    const char *name = cell == RNND_CELL_GRU ? "gru" : "lstm";
    setup s;
    make_setup(&s, cell);
    double reference = whole_streams_nll(&s);
    for (int segment = 0; segment <= 10; segment += 10) {
      rnnd_backend *be = backend(&s, BPTT, segment);
      double carried = windows_nll(&s, be, -1, NULL);
      be->ops->destroy(be);
      double rel = fabs(carried - reference) / reference;
      char what[200];
      snprintf(what, sizeof what, "%s: windows of %d with the state carried%s give the whole streams' NLL: %.6f vs "
               "%.6f (rel %.1e <= 1e-6)", name, BPTT, segment ? " (segments of 10)" : "", carried, reference, rel);
      check(rel <= 1e-6, what);
    }
    check_window_gradient(&s, name);
    free_setup(&s);
  }
  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures ? 1 : 0;
}
