/* schedule.h — the order in which a backend runs one batch, written once
 * for every backend (src/backend internal):
 *  - whole: forward, head and (training) backward;
 *  - by segments of K steps (capacity.bptt_segment, checkpointed BPTT):
 *    training runs a forward pass that keeps only the state entering every
 *    segment, then each segment, last first, again from its kept state,
 *    through head and backward, with the state gradient of the segment
 *    after it; evaluation runs the segments in order, the state carried;
 *  - either way from the carried stream state, if one was armed, and
 *    leaving the batch's end state for the next window.
 * A backend supplies the primitives; the schedule decides what runs when.
 * The gradient is the whole batch's (the same products, summed in another
 * order); activations exist for one segment at a time. */
#ifndef RNND_BACKEND_SCHEDULE_H
#define RNND_BACKEND_SCHEDULE_H

#include <stdint.h>

#include "rnnd/backend.h"

typedef struct {
  /* Points the layers at what segment s of `segments` (view v) starts
   * from (the state kept for it, the carried stream state, or zeros) and
   * leaves (the state kept for s + 1, the stream's end state, or nothing).
   * With backward, also where the gradient of its end state comes from
   * (the segment after; zero for the pieces that end inside s, of which
   * next_pieces go on) and where its start state's gradient goes. */
  void (*enter)(void *backend, const rnnd_batch *v, int s, int segments, int backward, int next_pieces);
  /* Forward through the layers; training keeps what backward needs. */
  void (*forward)(void *backend, const rnnd_batch *v, const rnnd_dropout *dr, int training);
  /* The head's loss of the view (a backend that sums it on its device
   * returns 0); with weight > 0 its gradients and dL/d(top output). */
  double (*head)(void *backend, const rnnd_batch *v, float weight);
  /* Backward through the layers from the head's dL/d(top output). */
  void (*backward)(void *backend, const rnnd_batch *v, const rnnd_dropout *dr);
  /* After segment s's forward: its end state where enter said it goes
   * (a backend whose layers write it there themselves leaves this NULL). */
  void (*leave)(void *backend, const rnnd_batch *v, int s, int segments, int next_pieces);
} rnnd_schedule_ops;

/* Runs batch b: whole, or by segments of `segment` steps (0: whole) when
 * it is longer, viewing segments through `offsets` (segment + 1 entries).
 * Training when weight > 0 and dr is the training dropout; evaluation
 * with weight 0. Returns the sum of what head returned. */
double schedule_run(const rnnd_schedule_ops *ops, void *backend, const rnnd_batch *b, int segment, int64_t *offsets,
                    const rnnd_dropout *dr, float weight);

#endif
