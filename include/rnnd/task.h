/* task.h — what model.task changes above the backends, as one constant ops
 * table per task (the language model, classify, regress), chosen once by
 * task_of; the trainer, the evaluator and `rnn_dist eval` call through it
 * instead of branching on the task. Below, each backend has its own head
 * and input tables for its side of a task (cpu_internal.h, cuda_internal.h).
 *
 * Every entry is required. Nothing allocates. */
#ifndef RNND_TASK_H
#define RNND_TASK_H

#include <stddef.h>
#include <stdint.h>

#include "rnnd/backend.h"
#include "rnnd/batch.h"
#include "rnnd/config.h"
#include "rnnd/dataset.h"
#include "rnnd/sampler.h"

/* A loss sum and the head's measurements, read the task's way. */
typedef struct {
  double loss;      /* per example: mean NLL (lm, classify), MSE in normalised units (regress) */
  double accuracy;  /* classify; NaN for the others */
  double rmse, mae; /* regress, original units; NaN for the others */
} rnnd_quality;

typedef struct {
  const char *name;     /* "lm", "classify", "regress" */
  const char *examples; /* what a loss averages over: "tokens", "sequences", "steps" */
  /* One split's data set is of this task's kind (tokens; labels with the
   * training set's classes; a time series with its features), or one line
   * naming the file ends the run. train is NULL for the training set. */
  void (*check_data)(const rnnd_dataset *ds, const rnnd_dataset *train, const char *role);
  /* How the sampler cuts this task's sequences (whole ones, scored windows). */
  void (*sampler_options)(rnnd_sampler_options *o, const rnnd_data_config *data);
  /* Packs pieces of ds into b, with what the head needs besides (labels). */
  void (*fill_batch)(rnnd_batch *b, const rnnd_dataset *ds, const rnnd_piece *pieces, int count);
  /* What a global batch's mean loss divides by: of its pieces (tokens = their target count). */
  int64_t (*examples_of_pieces)(const rnnd_piece *pieces, int count, int64_t tokens);
  /* ... and of one packed batch. */
  int64_t (*examples_of_batch)(const rnnd_batch *b);
  rnnd_quality (*quality)(double nll, int64_t examples, const rnnd_head_stats *h);
  /* The progress line's measure ("ppl    61.23", "acc 0.9120", "rmse 12.3"). */
  void (*progress_text)(const rnnd_quality *q, char *buf, size_t size);
  /* An evaluation line's measures ("loss 4.1141 | ppl 61.23 | tokens 2461"). */
  void (*eval_text)(const rnnd_quality *q, int64_t examples, char *buf, size_t size);
  /* The end-of-run summary of a split ("ppl 61.23", "loss 0.3 acc 0.91", "mse ... rmse ... mae ..."). */
  void (*summary_text)(const rnnd_quality *q, char *buf, size_t size);
  /* `rnn_dist eval`'s machine-readable last line, without its newline. */
  void (*result_text)(const rnnd_quality *q, int64_t examples, char *buf, size_t size);
} rnnd_task_ops;

/* The table of model.task (an rnnd_task). */
const rnnd_task_ops *task_of(int task);

#endif
