/* evaluate.c — exact mean NLL over a data set, as pieces or as streams (trainer.h). */
#include "rnnd/trainer.h"

/* The backend's head measurements of its last batch, added to sums[0..3]. */
static void add_head_stats(const rnnd_backend *be, double *sums) {
  if (!be->ops->last_stats) return;
  rnnd_head_stats h;
  be->ops->last_stats(be, &h);
  sums[0] += (double)h.correct;
  sums[1] += h.sq_error;
  sums[2] += h.abs_error;
  sums[3] += (double)h.values;
}

static rnnd_eval_result reduce_result(double *sums, const rnnd_comm *comm) {
  comm_allreduce_sum_f64(comm, sums, 6);
  rnnd_eval_result r = {sums[0], (int64_t)sums[1], {(int64_t)sums[2], sums[3], sums[4], (int64_t)sums[5]}};
  return r;
}

rnnd_eval_result evaluate_dataset(rnnd_backend *be, const rnnd_task_ops *task, const float *params,
                                  const rnnd_dataset *ds, rnnd_sampler *s, rnnd_batch *b, const rnnd_comm *comm) {
  /* nll, examples, correct, squared and absolute errors, values (counts exact in double up to 2^53) */
  double sums[6] = {0};
  sampler_start_epoch(s, 0);
  const rnnd_piece *pieces;
  int count;
  for (int64_t k = 0; (count = sampler_next_pieces(s, &pieces)) > 0; k++) {
    if (k % comm->size != comm->rank) continue;
    task->fill_batch(b, ds, pieces, count);
    sums[0] += be->ops->eval_batch(be, params, b);
    sums[1] += (double)task->examples_of_batch(b);
    add_head_stats(be, sums + 2);
  }
  return reduce_result(sums, comm);
}

rnnd_eval_result evaluate_stream(rnnd_backend *be, const rnnd_task_ops *task, const float *params,
                                 const rnnd_dataset *ds, rnnd_stream_state *s, rnnd_batch *b, rnnd_piece *share,
                                 const rnnd_comm *comm) {
  double sums[6] = {0};
  stream_state_rewind(s);
  for (int64_t w = 0; w < s->plan.n_windows; w++) {
    int64_t window_tokens;
    int count = stream_state_next(s, be, share, &window_tokens);
    if (count) {
      task->fill_batch(b, ds, share, count);
      sums[0] += be->ops->eval_batch(be, params, b);
      sums[1] += (double)task->examples_of_batch(b);
      add_head_stats(be, sums + 2);
    }
    stream_state_window_done(s);
  }
  return reduce_result(sums, comm);
}
