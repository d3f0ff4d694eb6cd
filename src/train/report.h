/* report.h — what a training run tells its user (src/train internal): the
 * start-up header, a progress line per log interval, metrics rows and gate
 * histograms in metrics.h5, evaluation lines and the end-of-run summary.
 * Rank 0 prints (to stdout and OUTPUT/train.log); the measures come from
 * the task (task.h) and the memory from the step (step.h). Reads the
 * trainer, never changes what it trains. */
#ifndef RNND_TRAIN_REPORT_H
#define RNND_TRAIN_REPORT_H

#include "rnnd/trainer.h"

/* Sums over the steps of one log interval. */
typedef struct {
  double nll;
  int64_t tokens, examples;
  rnnd_head_stats head;
  double start;
  double imbalance, compute_s, comm_s;
  int steps, skipped;
} rnnd_interval;

/* Rank 0: printf to stdout and to OUTPUT/train.log. */
void trainer_log(rnnd_trainer *t, const char *fmt, ...) RNND_PRINTF(2, 3);
void report_header(rnnd_trainer *t);
void report_step(rnnd_trainer *t, rnnd_interval *iv, const rnnd_step_stats *st);
/* The progress line of the interval, which then starts over. */
void report_progress(rnnd_trainer *t, rnnd_interval *iv, const rnnd_step_stats *st);
/* Rank 0: histograms of every gate of every layer over its share of the
 * step, every metrics.hist_every steps, where the backend can see its gates. */
void report_histograms(rnnd_trainer *t);
void report_eval(rnnd_trainer *t, const rnnd_eval_set *set, const char *role, const rnnd_eval_result *r,
                 double seconds);
void report_summary(rnnd_trainer *t, double train_seconds);

#endif
