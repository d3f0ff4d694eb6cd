/* trainer.h — the training run: data, model, backend, optimizer and the
 * step loop with progress lines, periodic validation and model saves.
 * Also the evaluator used by training and by `rnn_dist eval`.
 *
 * All state of a run lives in rnnd_trainer (no globals); trainer_init
 * allocates everything, trainer_free releases it. */
#ifndef RNND_TRAINER_H
#define RNND_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "rnnd/amp.h"
#include "rnnd/backend.h"
#include "rnnd/batch.h"
#include "rnnd/comm.h"
#include "rnnd/common.h"
#include "rnnd/config.h"
#include "rnnd/dataset.h"
#include "rnnd/deal.h"
#include "rnnd/device.h"
#include "rnnd/metrics.h"
#include "rnnd/model.h"
#include "rnnd/model_meta.h"
#include "rnnd/optim.h"
#include "rnnd/sampler.h"
#include "rnnd/step.h"
#include "rnnd/stream_state.h"
#include "rnnd/task.h"

typedef struct {
  double nll_sum;
  int64_t tokens;  /* what the NLL sums over: target tokens, sequences (classify), scored steps (regress) */
  rnnd_head_stats head; /* accuracy and forecast errors, summed over the ranks */
} rnnd_eval_result;

/* Mean NLL over every target token of ds (pieces of the sampler's max_len,
 * each from a zero state). Batches are shared out over the ranks and the
 * sums reduced, so every rank gets the same result. */
rnnd_eval_result evaluate_dataset(rnnd_backend *be, const rnnd_task_ops *task, const float *params,
                                  const rnnd_dataset *ds, rnnd_sampler *s, rnnd_batch *b, const rnnd_comm *comm);

/* Mean NLL over every target token of ds as streams (data.mode = stream):
 * each rank runs its slice of streams through every window, carrying the
 * state; share has room for the slice. */
rnnd_eval_result evaluate_stream(rnnd_backend *be, const rnnd_task_ops *task, const float *params,
                                 const rnnd_dataset *ds, rnnd_stream_state *s, rnnd_batch *b, rnnd_piece *share,
                                 const rnnd_comm *comm);

typedef struct {
  rnnd_dataset data;
  rnnd_sampler sampler;
  rnnd_stream_state stream; /* data.mode = stream */
  rnnd_quality quality;     /* of the last evaluation */
  int present;
} rnnd_eval_set;

typedef struct {
  const rnnd_config *cfg;   /* borrowed */
  const rnnd_comm *comm;    /* borrowed */
  rnnd_dataset train;
  rnnd_sampler train_sampler;
  int stream_mode;           /* data.mode = stream: windows of streams, state carried */
  const rnnd_task_ops *task; /* model.task: what the data, examples and measures are */
  rnnd_stream_state stream;  /* stream mode: this rank's training streams */
  rnnd_eval_set valid, test;
  rnnd_layout layout;
  float *params;             /* fp32 master weights (the optimizer's), on the host: step_store before reading */
  rnnd_dtype precision;      /* of the compute copy and activations */
  rnnd_loss_scaler scaler;
  rnnd_optimizer optimizer;
  rnnd_device_choice device; /* cpu, or the GPU this rank is bound to */
  rnnd_backend *backend;
  rnnd_step *stepper;        /* the training step on that device (host or CUDA) */
  rnnd_batch batch;          /* this rank's share of the global batch */
  rnnd_dealer dealer;        /* shares each global batch out to the ranks */
  rnnd_dealer lookahead;     /* the same for the next batch, to prefetch its tokens */
  rnnd_piece *next_share;    /* [batch.max_pieces] this rank's share of the next batch */
  rnnd_piece *share;         /* this rank's pieces of the current global batch */
  rnnd_metrics metrics;      /* rank 0: OUTPUT/metrics.h5 */
  int64_t total_steps;
  int64_t step, epoch;
  int64_t tokens_seen;
  int64_t fault_flip_step;   /* test hook (RNND_FAULT_FLIP_PARAM); -1 = none */
  int64_t fault_nan_step;    /* test hook (RNND_FAULT_NAN_GRAD); -1 = none */
  int64_t fault_signal_step; /* test hook (RNND_FAULT_SIGNAL): SIGTERM to self after that step */
  int64_t fault_exit_step;   /* test hook (RNND_FAULT_EXIT): this rank exits (code 3) inside that step */
  int64_t fault_hang_step;   /* test hook (RNND_FAULT_HANG): this rank stops responding inside that step */
  FILE *log;                 /* rank 0: OUTPUT/train.log */
  double start_time;         /* rnnd_now() when this process started training */
  double clock_before;       /* the run's training clock at that moment (a resume's checkpoint; 0 fresh) */
  int64_t start_step;        /* step and tokens this process started at (resume) */
  int64_t start_tokens;
  double best_valid_loss;    /* lowest validation loss so far (inf: none) */
  int resumed;               /* started from a checkpoint */
  char model_path[4096];
  rnnd_model_meta meta;      /* rank 0: the training set's vocabulary, class names or normalisation, saved with the model */
  float *eval_copy;          /* averaged weights rounded to the compute precision (16-bit runs with train.ema_decay) */
} rnnd_trainer;

/* init_model: optional model file whose parameters replace the initial ones.
 * resume: optional checkpoint to continue from ("auto": OUTPUT/latest if
 * there is one, else a fresh start). */
void trainer_init(rnnd_trainer *t, const rnnd_config *cfg, const rnnd_comm *comm, const char *init_model,
                  const char *resume);
/* Trains to the end (or the time limit, or a preemption signal, after which
 * every rank checkpoints); returns the process exit code. */
int trainer_run(rnnd_trainer *t);
/* The run's training clock: seconds trained by every start so far (a
 * resumed run continues its checkpoint's; the time between that checkpoint
 * and the stop, trained again, counts once). Metrics' elapsed_s and the
 * progress line show it; train.time_limit_s counts this start only. */
static inline double trainer_clock(const rnnd_trainer *t) { return t->clock_before + (rnnd_now() - t->start_time); }

/* One optimizer step (for tests and tools that drive training themselves). */
typedef struct {
  double nll;        /* summed over the global batch */
  int64_t tokens;    /* targets in the global batch (input tokens for classify) */
  int64_t examples;  /* what the loss averages over: tokens, or sequences (classify) */
  rnnd_head_stats head; /* classify: sequences predicted right; regress: errors in original units */
  double grad_norm;  /* of the unscaled gradient, before clipping; inf/NaN when skipped */
  double lr;
  double imbalance;  /* max/mean tokens over ranks */
  double compute_s, comm_s;
  double loss_scale; /* the scale this step's backward used */
  int skipped;       /* non-finite gradient: no update was applied */
  double underflow;  /* share of non-zero gradient values that rounding to 16 bits turned to zero */
  double param_norm; /* of the master weights after the step */
  double update_ratio; /* |update| / |weights| of the step: a health signal */
  double step_s;     /* wall seconds of the whole step */
} rnnd_step_stats;
rnnd_step_stats trainer_train_step(rnnd_trainer *t);

/* Bytes held, by purpose (step.h). */
rnnd_memory trainer_memory(const rnnd_trainer *t);
void trainer_free(rnnd_trainer *t);

#endif
