/* evaluate.c — exact mean NLL over a data set, as pieces or as streams (trainer.h). */
#include "rnnd/trainer.h"

rnnd_eval_result evaluate_dataset(rnnd_backend *be, const float *params, const rnnd_dataset *ds, rnnd_sampler *s,
                                  rnnd_batch *b, const rnnd_comm *comm) {
  double sums[3] = {0.0, 0.0, 0.0}; /* nll, tokens or sequences, correct (exact in double up to 2^53) */
  sampler_start_epoch(s, 0);
  const rnnd_piece *pieces;
  int count;
  for (int64_t k = 0; (count = sampler_next_pieces(s, &pieces)) > 0; k++) {
    if (k % comm->size != comm->rank) continue;
    batch_fill(b, ds, pieces, count);
    if (s->whole_sequences) batch_fill_labels(b, ds);
    sums[0] += be->ops->eval_batch(be, params, b);
    sums[1] += (double)(s->whole_sequences ? b->n_pieces : b->n_tokens);
    if (s->whole_sequences) sums[2] += (double)be->ops->last_correct(be);
  }
  comm_allreduce_sum_f64(comm, sums, 3);
  return (rnnd_eval_result){sums[0], (int64_t)sums[1], (int64_t)sums[2]};
}

rnnd_eval_result evaluate_stream(rnnd_backend *be, const float *params, const rnnd_dataset *ds,
                                 rnnd_stream_state *s, rnnd_batch *b, rnnd_piece *share, const rnnd_comm *comm) {
  double sums[2] = {0.0, 0.0};
  stream_state_rewind(s);
  for (int64_t w = 0; w < s->plan.n_windows; w++) {
    int64_t window_tokens;
    int count = stream_state_next(s, be, share, &window_tokens);
    if (count) {
      batch_fill(b, ds, share, count);
      sums[0] += be->ops->eval_batch(be, params, b);
      sums[1] += (double)b->n_tokens;
    }
    stream_state_window_done(s);
  }
  comm_allreduce_sum_f64(comm, sums, 2);
  return (rnnd_eval_result){sums[0], (int64_t)sums[1], 0};
}
