/* batch.h — a packed (unpadded) batch of sequence pieces, in the layout of
 * PyTorch's PackedSequence and cuDNN's CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED:
 * pieces sorted by length, longest first; time-major; at step t only the first
 * batch_sizes[t] pieces are present, so step t occupies rows
 * step_offsets[t] .. step_offsets[t] + batch_sizes[t] of every [rows x width]
 * activation matrix, and the running pieces are always a prefix.
 *
 * A piece is a window of one data-set sequence: `length` targets starting at
 * token `start`, whose first input is the token before it (<eos> for the
 * first piece of a sequence), always from a zero state.
 *
 * Ownership: batch_init allocates for a capacity; batch_fill reuses it;
 * batch_free releases. No allocation happens per step. */
#ifndef RNND_BATCH_H
#define RNND_BATCH_H

#include <stdint.h>

#include "rnnd/dataset.h"

typedef struct {
  int64_t start;   /* index in dataset tokens of the first target */
  int32_t length;  /* targets in the piece, >= 1 */
  int64_t id;      /* stable piece id (position in the piece list); keys dropout */
  int32_t scored;  /* time series: the last `scored` rows count in the loss (0: all) */
} rnnd_piece;

/* The token range packing a piece reads: its targets and the token before
 * them (the first input), [*from, *from + *count). */
static inline void piece_token_span(const rnnd_piece *p, int64_t *from, int64_t *count) {
  *from = p->start > 0 ? p->start - 1 : 0;
  *count = p->start + p->length - *from;
}

typedef struct {
  /* capacity */
  int max_pieces;
  int max_len;
  int64_t max_tokens;
  /* contents */
  int n_pieces;
  int n_steps;            /* length of the longest piece */
  int64_t n_tokens;       /* rows = sum of lengths = target count */
  rnnd_piece *pieces;     /* [n_pieces] sorted: length non-increasing, then id */
  int32_t *batch_sizes;   /* [n_steps] */
  int64_t *step_offsets;  /* [n_steps + 1] */
  int32_t *inputs;        /* [n_tokens] packed */
  int32_t *targets;       /* [n_tokens] packed */
  int32_t *positions;     /* [n_tokens] time index within the piece (for dropout keys) */
  int32_t *piece_tokens;  /* [max_len + 1] scratch: one piece's tokens while packing */
  int32_t *labels;        /* [n_pieces] classification: class of each piece (batch_fill_labels) */
  /* Time series (batch_init_series): a row is a pair (step s -> s + 1) */
  int n_features;         /* 0: a token batch */
  float *series_in;       /* [n_tokens, n_features] normalised input step */
  float *series_target;   /* [n_tokens, n_features] normalised next step */
  uint8_t *scored;        /* [n_tokens] 1: the row counts in the loss */
  int64_t n_scored;
  const float *series_std; /* the data set's per-feature std (borrowed): errors in original units */
} rnnd_batch;

void batch_init(rnnd_batch *b, int max_pieces, int max_len, int64_t max_tokens);
/* Packs `count` pieces of `ds` (any order; sorted here, stable by id). */
void batch_fill(rnnd_batch *b, const rnnd_dataset *ds, const rnnd_piece *pieces, int count);
void batch_free(rnnd_batch *b);
/* Adds the time-series buffers (for data sets with n_features > 0). */
void batch_init_series(rnnd_batch *b, int n_features);
/* Inference: one piece (id 0) of n steps whose inputs are `ids` (a token
 * batch) or the normalised rows `rows` ([n, n_features], a series batch),
 * with no targets and nothing scored. */
void batch_fill_inputs(rnnd_batch *b, const int32_t *ids, const float *rows, int n);
/* Classification: labels[i] = ds->labels[pieces[i].id]; the pieces must be
 * whole sequences (sampler option whole_sequences: id = sequence index). */
void batch_fill_labels(rnnd_batch *b, const rnnd_dataset *ds);
/* A view of time steps [t0, t1) of b (0 <= t0 < t1 <= n_steps) for
 * segmented backpropagation: the same pieces, of which the first
 * batch_sizes[t0] run; rows step_offsets[t0] .. step_offsets[t1] of b.
 * Positions stay those within the whole pieces, so dropout masks are those
 * of the unsegmented batch. `offsets` ([t1 - t0 + 1], caller's) receives the
 * view's step offsets. The view borrows b's arrays; it owns nothing and is
 * never passed to batch_free. */
void batch_step_view(const rnnd_batch *b, int t0, int t1, int64_t *offsets, rnnd_batch *view);

#endif
