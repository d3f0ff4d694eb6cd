/* schedule.c — whole batches and segmented backpropagation, for every
 * backend (schedule.h). */
#include "schedule.h"

static int segment_end(const rnnd_batch *b, int segment, int s) {
  int t1 = (s + 1) * segment;
  return t1 < b->n_steps ? t1 : b->n_steps;
}

/* Pieces still running after the view that ends at step t1. */
static int pieces_after(const rnnd_batch *b, int t1) { return t1 < b->n_steps ? b->batch_sizes[t1] : 0; }

static void leave(const rnnd_schedule_ops *ops, void *backend, const rnnd_batch *v, int s, int segments, int next) {
  if (ops->leave) ops->leave(backend, v, s, segments, next);
}

/* Segment s (view v): forward, head and, training, backward. */
static double run_segment(const rnnd_schedule_ops *ops, void *backend, const rnnd_batch *v, int s, int segments,
                          int next, const rnnd_dropout *dr, float weight) {
  const int training = weight > 0.0f;
  ops->enter(backend, v, s, segments, training, next);
  ops->forward(backend, v, dr, training);
  if (training && s == segments - 1) leave(ops, backend, v, s, segments, next);
  double loss = ops->head(backend, v, weight);
  if (training) ops->backward(backend, v, dr);
  else leave(ops, backend, v, s, segments, next);
  return loss;
}

double schedule_run(const rnnd_schedule_ops *ops, void *backend, const rnnd_batch *b, int segment, int64_t *offsets,
                    const rnnd_dropout *dr, float weight) {
  if (!segment || b->n_steps <= segment) return run_segment(ops, backend, b, 0, 1, 0, dr, weight);
  const int segments = (b->n_steps + segment - 1) / segment;
  rnnd_batch view;
  double loss = 0.0;
  if (weight <= 0.0f) {
    for (int s = 0; s < segments; s++) {
      int t1 = segment_end(b, segment, s);
      batch_step_view(b, s * segment, t1, offsets, &view);
      loss += run_segment(ops, backend, &view, s, segments, pieces_after(b, t1), dr, weight);
    }
    return loss;
  }
  /* the forward pass that keeps the state entering every segment */
  for (int s = 0; s + 1 < segments; s++) {
    int t1 = segment_end(b, segment, s);
    batch_step_view(b, s * segment, t1, offsets, &view);
    ops->enter(backend, &view, s, segments, 0, pieces_after(b, t1));
    ops->forward(backend, &view, dr, 0);
    leave(ops, backend, &view, s, segments, pieces_after(b, t1));
  }
  for (int s = segments - 1; s >= 0; s--) {
    int t1 = segment_end(b, segment, s);
    batch_step_view(b, s * segment, t1, offsets, &view);
    loss += run_segment(ops, backend, &view, s, segments, pieces_after(b, t1), dr, weight);
  }
  return loss;
}
