/* sampler.h — cuts a data set into pieces of at most max_len targets and
 * deals them into batches drawn from length buckets.
 *
 * Every sequence of length L becomes ceil(L / max_len) consecutive pieces;
 * pieces get ids in data-set order. Pieces are grouped by length into
 * buckets (upper bounds from length quantiles for "auto"); an epoch shuffles
 * each bucket with a generator keyed by (seed, epoch), cuts it into batches of
 * `batch` pieces (or, with a token budget, of as many pieces as fit in it)
 * and shuffles the batch order, so each batch holds pieces of similar length
 * (little idle work in the packed steps) and the whole plan is a pure
 * function of (seed, epoch, data set, batch size): it never depends on the
 * world size. The batches are global; deal.h shares each out to the ranks.
 *
 * Ownership: sampler_init allocates, sampler_free releases. */
#ifndef RNND_SAMPLER_H
#define RNND_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "rnnd/dataset.h"
#include "rnnd/batch.h"

typedef struct {
  int64_t first; /* index into the batch-ordered piece array */
  int count;
} rnnd_batch_ref;

typedef struct {
  int max_len;          /* longer sequences are cut into pieces of <= max_len targets */
  int batch;            /* pieces per batch (when batch_tokens = 0) */
  int64_t batch_tokens; /* > 0: batches of as many pieces as fit in this many tokens */
  const char *buckets;  /* "auto" (num_buckets quantiles) or ascending bounds "10,20,40" */
  int num_buckets;
  uint64_t seed;
  int shuffle;          /* 0: data-set order, one bucket, batches in length order (evaluation) */
  /* classification: every sequence "w1 .. wn <eos>" is one piece with
   * inputs w1 .. wn and id = its index (so batch_fill_labels finds its
   * label); a sequence of more than max_len words is an input error */
  int whole_sequences;
  /* forecasting (data.target_last = k > 0): overlapping windows of max_len
   * rows, k apart, each scoring its last k rows (piece.scored), so every
   * row after a series' first max_len - k is scored exactly once */
  int window_stride;
} rnnd_sampler_options;

typedef struct {
  /* all pieces, in data-set order (id = index), kept compact (16 bytes a
   * piece with the order below) because a large corpus has millions */
  int64_t *piece_start;     /* [n_pieces] token index of the first target */
  int32_t *piece_length;    /* [n_pieces] */
  int32_t *piece_scored;    /* [n_pieces] windows only (see rnnd_piece.scored); NULL otherwise */
  int64_t n_pieces;
  int max_len;
  int batch;
  int64_t batch_tokens;
  uint64_t seed;
  int shuffle;
  int whole_sequences;
  int window_stride;
  int n_buckets;
  int32_t *bucket_upper;    /* [n_buckets] inclusive upper length bound */
  /* the current epoch's plan */
  int64_t epoch;
  uint32_t *order;          /* piece indices grouped into batches */
  rnnd_piece *drawn, *peeked; /* [largest_batch_pieces] the batch last drawn, the next one */
  rnnd_batch_ref *batches;
  int64_t n_batches;
  int64_t next_batch;
  /* bounds over every batch any epoch can draw, for sizing workspaces */
  int largest_batch_steps;  /* longest piece */
  int largest_batch_pieces;
  int64_t largest_batch_tokens;
} rnnd_sampler;

/* Bad bucket specs exit with an input error naming data.buckets. */
void sampler_init(rnnd_sampler *s, const rnnd_dataset *ds, const rnnd_sampler_options *o);
/* Options of an evaluation sampler: batches of `batch` pieces in length order. */
rnnd_sampler_options sampler_eval_options(int max_len, int batch);
/* Builds the plan of `epoch` and rewinds to its first batch. */
void sampler_start_epoch(rnnd_sampler *s, int64_t epoch);
/* Points *pieces at the next batch's pieces (owned by the sampler, valid
 * until the next draw) and returns their count; 0 when the epoch is over. */
int sampler_next_pieces(rnnd_sampler *s, const rnnd_piece **pieces);
/* The batch sampler_next_pieces will draw next, without drawing it (valid
 * until the next peek); 0 at the end of the epoch. For prefetching. */
int sampler_peek_pieces(const rnnd_sampler *s, const rnnd_piece **pieces);
/* Piece i (id = i) of the data set. */
rnnd_piece sampler_piece(const rnnd_sampler *s, int64_t i);
/* Bytes the sampler holds. */
size_t sampler_bytes(const rnnd_sampler *s);
/* Fills *b with the next batch of the epoch; returns 0 when the epoch is over. */
int sampler_next_batch(rnnd_sampler *s, const rnnd_dataset *ds, rnnd_batch *b);
void sampler_free(rnnd_sampler *s);
/* The plan's shuffle: Fisher-Yates, swap i with hash(key, i) mod (i + 1). */
void sampler_shuffle_pieces(uint32_t *p, int64_t n, uint64_t key);

#endif
