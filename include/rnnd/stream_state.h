/* stream_state.h — the trainer's side of data.mode = stream: this rank's
 * stream plan (stream.h), where in the epoch it is, and the recurrent state
 * its streams carry from one window to the next.
 *
 * The state is double-buffered: the backend reads the state before a
 * window from one buffer and writes the state after it to the other
 * (backend.h, carry_state); stream_window_done swaps them. An epoch starts
 * every stream from zeros. For checkpoints the state of all ranks' streams
 * is assembled on every rank ([n_streams, width] floats, stream order) and
 * a resumed run takes its own slice of it, at any world size.
 *
 * Ownership: stream_state_init allocates, stream_state_free releases. */
#ifndef RNND_STREAM_STATE_H
#define RNND_STREAM_STATE_H

#include <stdint.h>

#include "rnnd/backend.h"
#include "rnnd/comm.h"
#include "rnnd/stream.h"

typedef struct {
  rnnd_stream_plan plan;
  int width;           /* floats of one stream's state (rnnd_state_width) */
  float *state[2];     /* [plan.count, width] each */
  int current;         /* state[current] holds the state before the next window */
  int64_t next_window; /* of the current epoch */
} rnnd_stream_state;

/* role and count_key: as stream_plan_init's, for its errors. */
void stream_state_init(rnnd_stream_state *s, int64_t n_tokens, int64_t n_streams, int bptt, int width,
                       const rnnd_comm *comm, const char *role, const char *count_key);
void stream_state_free(rnnd_stream_state *s);
/* Back to the first window, every stream from zeros. */
void stream_state_rewind(rnnd_stream_state *s);
/* This rank's pieces of the next window into share (room for plan.count)
 * and the window's global target count into *tokens; points the backend's
 * next batch at the carried state. Returns the piece count. */
int stream_state_next(rnnd_stream_state *s, rnnd_backend *be, rnnd_piece *share, int64_t *tokens);
/* After the window's batch ran: the state after it becomes the carried one;
 * returns 1 when that ended the epoch (the state is then rewound). */
int stream_state_window_done(rnnd_stream_state *s);
/* Every rank's carried state into all[plan.n_streams * width] (a collective). */
void stream_state_gather(const rnnd_stream_state *s, const rnnd_comm *comm, float *all);
/* Takes this rank's slice of all[plan.n_streams * width] as the carried state. */
void stream_state_scatter(rnnd_stream_state *s, const float *all);
/* Grows cap to hold any window of this rank's streams. */
void stream_state_grow_capacity(const rnnd_stream_state *s, rnnd_backend_capacity *cap);
/* Max over ranks of the targets in window w / their mean (1 = perfect). */
double stream_state_imbalance(const rnnd_stream_state *s, int64_t w, int world);

#endif
