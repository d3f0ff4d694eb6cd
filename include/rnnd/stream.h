/* stream.h — data.mode = stream: the corpus as one token stream, the
 * classic truncated-BPTT language-model recipe.
 *
 * The data set's tokens (its sequences back to back, each ending in <eos>)
 * are cut into n_streams contiguous streams, as equal as possible (the
 * first n_tokens mod n_streams streams are one token longer), so every
 * token is a target exactly once. Window w holds steps [w * bptt,
 * (w + 1) * bptt) of every stream that is that long; consecutive windows of
 * a stream continue its recurrent state (the trainer carries it, and the
 * gradient stops at each window's start). A stream's first input is the
 * token before it (<eos> for the very first).
 *
 * Rank r of R owns the contiguous slice of streams [first, first + count)
 * with first = n_streams * r / R. Window pieces have id = stream index, so
 * a window's batch lists them in stream order (batch.h sorts by length,
 * then id, and a longer stream never has a higher index): row i of the
 * carried state is stream first + i.
 *
 * A plain value type: no allocation. */
#ifndef RNND_STREAM_H
#define RNND_STREAM_H

#include <stdint.h>

#include "rnnd/batch.h"

typedef struct {
  int64_t n_tokens, n_streams;
  int64_t base_length;  /* tokens of the shorter streams */
  int64_t n_longer;     /* streams 0 .. n_longer-1 hold base_length + 1 */
  int bptt;
  int64_t n_windows;    /* windows per epoch */
  int64_t first, count; /* this rank's streams */
} rnnd_stream_plan;

/* n_streams split among `world` ranks, this one `rank`. Fails with an
 * input error naming `role` (the data file) and `count_key` (the setting
 * that chose n_streams: "train.global_batch", "--streams") when a rank
 * would get no stream or there are fewer tokens than streams. */
void stream_plan_init(rnnd_stream_plan *p, int64_t n_tokens, int64_t n_streams, int bptt, int rank, int world,
                      const char *role, const char *count_key);
int64_t stream_start(const rnnd_stream_plan *p, int64_t stream);
int64_t stream_length(const rnnd_stream_plan *p, int64_t stream);
/* Targets of `stream` in window w (0 past its end). */
int64_t stream_window_length(const rnnd_stream_plan *p, int64_t stream, int64_t w);
/* This rank's pieces of window w into out (room for p->count); returns how
 * many (streams too short for the window are left out). */
int stream_window_pieces(const rnnd_stream_plan *p, int64_t w, rnnd_piece *out);
/* Targets in window w over all streams (the same on every rank). */
int64_t stream_window_tokens(const rnnd_stream_plan *p, int64_t w);

#endif
