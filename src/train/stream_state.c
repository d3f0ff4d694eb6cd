/* stream_state.c — carried state of data.mode = stream (stream_state.h). */
#include "rnnd/stream_state.h"

#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"

void stream_state_init(rnnd_stream_state *s, int64_t n_tokens, int64_t n_streams, int bptt, int width,
                       const rnnd_comm *comm, const char *role, const char *count_key) {
  memset(s, 0, sizeof *s);
  stream_plan_init(&s->plan, n_tokens, n_streams, bptt, comm->rank, comm->size, role, count_key);
  s->width = width;
  for (int i = 0; i < 2; i++) s->state[i] = RNND_ALLOC(float, s->plan.count * width, "carried stream state");
  stream_state_rewind(s);
}

void stream_state_free(rnnd_stream_state *s) {
  free(s->state[0]);
  free(s->state[1]);
  memset(s, 0, sizeof *s);
}

void stream_state_rewind(rnnd_stream_state *s) {
  memset(s->state[0], 0, (size_t)(s->plan.count * s->width) * sizeof(float));
  s->current = 0;
  s->next_window = 0;
}

int stream_state_next(rnnd_stream_state *s, rnnd_backend *be, rnnd_piece *share, int64_t *tokens) {
  if (!be->ops->carry_state)
    rnnd_input_error("the %s backend cannot carry a state from one batch to the next (data.mode = stream, "
                     "eval --streams)", be->ops->name);
  *tokens = stream_window_tokens(&s->plan, s->next_window);
  int count = stream_window_pieces(&s->plan, s->next_window, share);
  /* no pieces, no batch: the backend must not keep the carry for a later one */
  if (count) be->ops->carry_state(be, s->state[s->current], s->state[1 - s->current]);
  return count;
}

int stream_state_window_done(rnnd_stream_state *s) {
  s->current = 1 - s->current;
  if (++s->next_window < s->plan.n_windows) return 0;
  stream_state_rewind(s);
  return 1;
}

void stream_state_gather(const rnnd_stream_state *s, const rnnd_comm *comm, float *all) {
  size_t n = (size_t)(s->plan.n_streams * s->width);
  memset(all, 0, n * sizeof *all);
  memcpy(all + s->plan.first * s->width, s->state[s->current], (size_t)(s->plan.count * s->width) * sizeof *all);
  /* each value is non-zero on one rank at most: the sum is exact */
  comm_allreduce_sum_f32(comm, all, n);
}

void stream_state_scatter(rnnd_stream_state *s, const float *all) {
  memcpy(s->state[s->current], all + s->plan.first * s->width, (size_t)(s->plan.count * s->width) * sizeof(float));
}

void stream_state_grow_capacity(const rnnd_stream_state *s, rnnd_backend_capacity *cap) {
  int pieces = (int)s->plan.count, steps = s->plan.bptt;
  if (pieces > cap->max_pieces) cap->max_pieces = pieces;
  if (steps > cap->max_steps) cap->max_steps = steps;
  if ((int64_t)pieces * steps > cap->max_tokens) cap->max_tokens = (int64_t)pieces * steps;
}

double stream_state_imbalance(const rnnd_stream_state *s, int64_t w, int world) {
  rnnd_stream_plan p = s->plan;
  int64_t most = 0, total = stream_window_tokens(&p, w);
  for (int r = 0; r < world; r++) {
    p.first = p.n_streams * r / world;
    p.count = p.n_streams * (r + 1) / world - p.first;
    int64_t tokens = 0;
    for (int64_t i = p.first; i < p.first + p.count; i++) tokens += stream_window_length(&p, i, w);
    if (tokens > most) most = tokens;
  }
  return total > 0 ? (double)most * world / (double)total : 1.0;
}
