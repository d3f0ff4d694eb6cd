/* batch.c — packs sequence pieces into the time-major packed layout (batch.h). */
#include "rnnd/batch.h"

#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"

void batch_init(rnnd_batch *b, int max_pieces, int max_len, int64_t max_tokens) {
  memset(b, 0, sizeof *b);
  b->max_pieces = max_pieces;
  b->max_len = max_len;
  b->max_tokens = max_tokens;
  b->pieces = RNND_ALLOC(rnnd_piece, max_pieces, "batch pieces");
  b->batch_sizes = RNND_ALLOC(int32_t, max_len, "batch sizes");
  b->step_offsets = RNND_ALLOC(int64_t, (size_t)max_len + 1, "step offsets");
  b->inputs = RNND_ALLOC(int32_t, max_tokens, "batch inputs");
  b->targets = RNND_ALLOC(int32_t, max_tokens, "batch targets");
  b->positions = RNND_ALLOC(int32_t, max_tokens, "batch positions");
  b->labels = RNND_ALLOC(int32_t, max_pieces, "batch labels");
  b->piece_tokens = RNND_ALLOC(int32_t, (size_t)max_len + 1, "piece tokens");
}

void batch_free(rnnd_batch *b) {
  free(b->pieces);
  free(b->batch_sizes);
  free(b->step_offsets);
  free(b->inputs);
  free(b->targets);
  free(b->positions);
  free(b->labels);
  free(b->piece_tokens);
  free(b->series_in);
  free(b->series_target);
  free(b->scored);
  memset(b, 0, sizeof *b);
}

static int longer_first(const void *pa, const void *pb) {
  const rnnd_piece *a = pa, *b = pb;
  if (a->length != b->length) return a->length > b->length ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

void batch_init_series(rnnd_batch *b, int n_features) {
  b->n_features = n_features;
  b->series_in = RNND_ALLOC(float, b->max_tokens * n_features, "batch series inputs");
  b->series_target = RNND_ALLOC(float, b->max_tokens * n_features, "batch series targets");
  b->scored = RNND_ALLOC(uint8_t, b->max_tokens, "batch scored rows");
}

/* A time-series row: pair p's normalised input and target steps. */
static void fill_series_row(rnnd_batch *b, const rnnd_dataset *ds, int64_t row, int64_t p, int scored) {
  const int F = ds->n_features;
  const float *x = ds->values + ds->input_row[p] * F;
  for (int f = 0; f < F; f++) {
    b->series_in[row * F + f] = (x[f] - ds->mean[f]) / ds->std[f];
    b->series_target[row * F + f] = (x[F + f] - ds->mean[f]) / ds->std[f];
  }
  b->scored[row] = (uint8_t)scored;
  b->n_scored += scored;
}

/* Piece i's rows: its tokens (and the one before, its first input) read in
 * one go, from memory or from the file's chunks. */
static void fill_token_piece(rnnd_batch *b, const rnnd_dataset *ds, int i) {
  const rnnd_piece *p = &b->pieces[i];
  int64_t from, count;
  piece_token_span(p, &from, &count);
  dataset_read_tokens(ds, from, count, b->piece_tokens);
  for (int t = 0; t < p->length; t++) {
    int64_t row = b->step_offsets[t] + i, at = p->start + t;
    b->positions[row] = t;
    b->targets[row] = b->piece_tokens[at - from];
    b->inputs[row] = at > 0 ? b->piece_tokens[at - 1 - from] : ds->eos_id;
  }
}

static void fill_series_piece(rnnd_batch *b, const rnnd_dataset *ds, int i) {
  const rnnd_piece *p = &b->pieces[i];
  for (int t = 0; t < p->length; t++) {
    int64_t row = b->step_offsets[t] + i;
    b->positions[row] = t;
    b->inputs[row] = b->targets[row] = 0;
    fill_series_row(b, ds, row, p->start + t, !p->scored || t >= p->length - p->scored);
  }
}

void batch_fill(rnnd_batch *b, const rnnd_dataset *ds, const rnnd_piece *pieces, int count) {
  RNND_ASSERT(count >= 1 && count <= b->max_pieces);
  memcpy(b->pieces, pieces, (size_t)count * sizeof *pieces);
  qsort(b->pieces, (size_t)count, sizeof *b->pieces, longer_first);
  b->n_pieces = count;
  b->n_steps = b->pieces[0].length;
  RNND_ASSERT(b->n_steps <= b->max_len);
  /* batch_sizes[t] = pieces longer than t; a prefix because lengths descend. */
  int running = count;
  b->step_offsets[0] = 0;
  for (int t = 0; t < b->n_steps; t++) {
    while (running > 0 && b->pieces[running - 1].length <= t) running--;
    b->batch_sizes[t] = running;
    b->step_offsets[t + 1] = b->step_offsets[t] + running;
  }
  b->n_tokens = b->step_offsets[b->n_steps];
  RNND_ASSERT(b->n_tokens <= b->max_tokens);
  if (ds->n_features) {
    RNND_ASSERT(b->n_features == ds->n_features);
    b->series_std = ds->std;
    b->n_scored = 0;
  }
  for (int i = 0; i < count; i++) {
    if (ds->n_features) fill_series_piece(b, ds, i);
    else fill_token_piece(b, ds, i);
  }
}

void batch_fill_inputs(rnnd_batch *b, const int32_t *ids, const float *rows, int n) {
  RNND_ASSERT(n >= 1 && n <= b->max_len && n <= b->max_tokens && b->max_pieces >= 1);
  RNND_ASSERT(b->n_features ? rows != NULL : ids != NULL);
  b->pieces[0] = (rnnd_piece){.start = 0, .length = n, .id = 0, .scored = 0};
  b->n_pieces = 1;
  b->n_steps = n;
  b->n_tokens = n;
  b->labels[0] = 0;
  for (int t = 0; t <= n; t++) b->step_offsets[t] = t;
  for (int t = 0; t < n; t++) {
    b->batch_sizes[t] = 1;
    b->positions[t] = t;
    b->inputs[t] = ids ? ids[t] : 0;
    b->targets[t] = 0;
  }
  if (!b->n_features) return;
  memcpy(b->series_in, rows, (size_t)n * b->n_features * sizeof(float));
  memset(b->series_target, 0, (size_t)n * b->n_features * sizeof(float));
  memset(b->scored, 0, (size_t)n);
  b->n_scored = 0;
  b->series_std = NULL;
}

void batch_fill_labels(rnnd_batch *b, const rnnd_dataset *ds) {
  RNND_ASSERT(ds->labels);
  for (int i = 0; i < b->n_pieces; i++) {
    RNND_ASSERT(b->pieces[i].id >= 0 && b->pieces[i].id < ds->n_sequences);
    b->labels[i] = ds->labels[b->pieces[i].id];
  }
}

void batch_step_view(const rnnd_batch *b, int t0, int t1, int64_t *offsets, rnnd_batch *view) {
  RNND_ASSERT(0 <= t0 && t0 < t1 && t1 <= b->n_steps);
  const int64_t row0 = b->step_offsets[t0];
  for (int t = t0; t <= t1; t++) offsets[t - t0] = b->step_offsets[t] - row0;
  *view = (rnnd_batch){.max_pieces = b->max_pieces,
                       .max_len = t1 - t0,
                       .max_tokens = offsets[t1 - t0],
                       .n_pieces = b->batch_sizes[t0],
                       .n_steps = t1 - t0,
                       .n_tokens = offsets[t1 - t0],
                       .pieces = b->pieces,
                       .batch_sizes = b->batch_sizes + t0,
                       .step_offsets = offsets,
                       .inputs = b->inputs + row0,
                       .targets = b->targets + row0,
                       .positions = b->positions + row0,
                       .labels = b->labels,
                       .n_features = b->n_features,
                       .series_in = b->series_in ? b->series_in + row0 * b->n_features : NULL,
                       .series_target = b->series_target ? b->series_target + row0 * b->n_features : NULL,
                       .scored = b->scored ? b->scored + row0 : NULL,
                       .series_std = b->series_std};
}
