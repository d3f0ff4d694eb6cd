/* trainer.c — the training run (trainer.h). */
#define _POSIX_C_SOURCE 200809L
#include "rnnd/trainer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rnnd/common.h"
#include "rnnd/checkpoint.h"
#include "rnnd/grad_sync.h"
#include "rnnd/model_file.h"
#include "rnnd/preempt.h"
#include "rnnd/rng.h"
#include "report.h"

static int64_t fault_step(const char *variable, int rank);

/* --- output ------------------------------------------------------------- */

static void make_directories(const char *path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char saved = *p;
      *p = '\0';
      if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        rnnd_input_error("%s: cannot create output directory (%s)", buf, strerror(errno));
      *p = saved;
      if (!saved) break;
    }
  }
}

static void open_outputs(rnnd_trainer *t, int append) {
  if (t->comm->rank != 0) return;
  const char *dir = t->cfg->output.dir;
  make_directories(dir);
  char path[4200];
  snprintf(path, sizeof path, "%s/config.ini", dir);
  FILE *f = fopen(path, "w");
  if (!f) rnnd_input_error("%s: cannot write (%s)", path, strerror(errno));
  fprintf(f, "; resolved configuration of this run (rnn_dist %s)\n", RNND_VERSION);
  config_write(t->cfg, f);
  if (fclose(f) != 0) rnnd_input_error("%s: cannot write (%s)", path, strerror(errno));
  snprintf(path, sizeof path, "%s/train.log", dir);
  t->log = fopen(path, append ? "a" : "w");
  if (!t->log) rnnd_input_error("%s: cannot write (%s)", path, strerror(errno));
}

/* --- set-up ------------------------------------------------------------- */

/* Floats of one stream's carried state (rnnd_state_width, from the config). */
static int stream_width(const rnnd_config *cfg) { return cfg->model.layers * 2 * cfg->model.hidden; }

static void load_eval_set(rnnd_trainer *t, rnnd_eval_set *set, const char *path, const char *role) {
  if (!path[0]) return;
  dataset_open(&set->data, path, 0);
  if (set->data.vocab_size != t->train.vocab_size || set->data.eos_id != t->train.eos_id)
    rnnd_input_error("%s: %s set has vocab_size %d (eos %d) but the training set %s has %d (eos %d); prepare all "
                     "splits with one rnn_prep run",
                     path, role, set->data.vocab_size, set->data.eos_id, t->train.path, t->train.vocab_size,
                     t->train.eos_id);
  rnnd_sampler_options options = sampler_eval_options(t->cfg->data.max_len, t->cfg->train.eval_batch);
  t->task->sampler_options(&options, &t->cfg->data);
  t->task->check_data(&set->data, &t->train, role);
  sampler_init(&set->sampler, &set->data, &options);
  if (t->stream_mode)
    stream_state_init(&set->stream, set->data.n_tokens, t->cfg->train.eval_batch, t->cfg->data.bptt,
                      stream_width(t->cfg), t->comm, path, "train.eval_batch");
  set->present = 1;
}

/* Room for one rank's share of any batch of s dealt over `world` ranks: the
 * longest-first deal keeps every rank within one piece of the mean, so its
 * tokens are at most total / world + the longest piece. */
static void grow_capacity(rnnd_backend_capacity *cap, const rnnd_sampler *s, int world) {
  int64_t tokens = s->largest_batch_tokens / world + 1 + s->largest_batch_steps;
  if (tokens > s->largest_batch_tokens) tokens = s->largest_batch_tokens;
  if (s->largest_batch_pieces > cap->max_pieces) cap->max_pieces = s->largest_batch_pieces;
  if (s->largest_batch_steps > cap->max_steps) cap->max_steps = s->largest_batch_steps;
  if (tokens > cap->max_tokens) cap->max_tokens = tokens;
}

/* The backend for the largest share of any batch, and the step on it. */
static void open_backend_and_step(rnnd_trainer *t) {
  const rnnd_config *cfg = t->cfg;
  rnnd_backend_capacity cap = {.threads = cfg->train.threads,
                               .storage = t->precision,
                               .bptt_segment = cfg->train.bptt_segment,
                               .weight_dropout = cfg->model.weight_dropout > 0.0};
  if (t->stream_mode) {
    stream_state_grow_capacity(&t->stream, &cap);
    if (t->valid.present) stream_state_grow_capacity(&t->valid.stream, &cap);
    if (t->test.present) stream_state_grow_capacity(&t->test.stream, &cap);
  } else {
    grow_capacity(&cap, &t->train_sampler, t->comm->size);
    /* evaluation hands whole batches to ranks in turn */
    if (t->valid.present) grow_capacity(&cap, &t->valid.sampler, 1);
    if (t->test.present) grow_capacity(&cap, &t->test.sampler, 1);
  }
  t->backend = device_open_backend(&t->device, &t->layout, &cap);
  rnnd_step_options options = {.comm = t->comm, .precision = t->precision, .wire = (rnnd_dtype)cfg->comm.grad_dtype,
                               .bucket_mb = cfg->comm.bucket_mb, .timeout_s = cfg->comm.timeout_s};
  t->stepper = device_open_step(&t->device, t->backend, t->params, &t->optimizer, &options);
  batch_init(&t->batch, cap.max_pieces, cap.max_steps, cap.max_tokens);
  if (t->train.n_features) batch_init_series(&t->batch, t->train.n_features);
}

static void resume_plan(rnnd_trainer *t, const char *path, const rnnd_train_state *st) {
  sampler_start_epoch(&t->train_sampler, st->epoch);
  if (st->next_batch > t->train_sampler.n_batches)
    rnnd_input_error("%s: /state next_batch = %lld but an epoch has %lld batches (another data set or batch size?)",
                     path, (long long)st->next_batch, (long long)t->train_sampler.n_batches);
  t->train_sampler.next_batch = st->next_batch;
}

/* Stream mode: the window to run next and every stream's carried state. */
static void resume_streams(rnnd_trainer *t, const char *path, int64_t next_window) {
  rnnd_stream_state *s = &t->stream;
  if (next_window >= s->plan.n_windows)
    rnnd_input_error("%s: /state next_batch = %lld but an epoch has %lld windows (another data set, "
                     "train.global_batch or data.bptt?)", path, (long long)next_window, (long long)s->plan.n_windows);
  float *all = RNND_ALLOC(float, s->plan.n_streams * s->width, "stream state");
  checkpoint_load_stream_state(path, all, s->plan.n_streams, s->width);
  stream_state_scatter(s, all);
  free(all);
  s->next_window = next_window;
}

/* Restores a checkpoint's weights, optimizer, scaler, plan position and counters. */
static void resume_from(rnnd_trainer *t, const char *path) {
  rnnd_train_state st;
  checkpoint_load(path, &t->layout, t->params, &t->optimizer, &t->scaler, &st);
  if (st.seed != (uint64_t)t->cfg->train.seed)
    rnnd_input_error("%s: checkpoint was trained with train.seed = %llu but the config says %ld (the batch plan "
                     "and dropout depend on it)", path, (unsigned long long)st.seed, t->cfg->train.seed);
  if (t->stream_mode) resume_streams(t, path, st.next_batch);
  else resume_plan(t, path, &st);
  t->step = st.step;
  t->epoch = st.epoch;
  t->tokens_seen = st.tokens_seen;
  t->best_valid_loss = st.best_valid_loss;
  t->clock_before = st.train_seconds;
  t->resumed = 1;
  rnnd_print0("rnn_dist: resumed from %s at step %lld (epoch %lld, batch %lld; saved by %d rank%s)\n", path,
              (long long)st.step, (long long)st.epoch, (long long)st.next_batch, st.world_size,
              st.world_size == 1 ? "" : "s");
}

/* "auto": OUTPUT/latest if present; NULL for a fresh start. */
static const char *resume_path(const rnnd_config *cfg, const char *resume, char *buf, size_t size) {
  if (!resume || strcmp(resume, "auto")) return resume;
  if (checkpoint_latest(cfg->output.dir, buf, size)) return buf;
  rnnd_print0("rnn_dist: --resume auto: no checkpoint in %s, starting fresh\n", cfg->output.dir);
  return NULL;
}

/* A fresh model: seeded draws, then (model.decoder_bias_init = unigram) the
 * decoder bias from the training set's token counts. */
static void init_params(rnnd_trainer *t, const rnnd_config *cfg) {
  model_init_params(&t->layout, t->params, (uint64_t)cfg->train.seed);
  if (cfg->model.decoder_bias_init != RNND_BIAS_INIT_UNIGRAM) return;
  int64_t *counts = RNND_ALLOC(int64_t, t->train.vocab_size, "token counts");
  dataset_count_tokens(&t->train, counts);
  model_init_decoder_bias_unigram(&t->layout, t->params, counts);
  free(counts);
}

void trainer_init(rnnd_trainer *t, const rnnd_config *cfg, const rnnd_comm *comm, const char *init_model,
                  const char *resume) {
  memset(t, 0, sizeof *t);
  t->cfg = cfg;
  t->comm = comm;
  /* From here a SIGTERM/SIGUSR1 only raises the flag: the first step
   * boundary then checkpoints step 0 and exits with the preemption code. */
  preempt_install();
  if (!cfg->data.train[0]) rnnd_input_error("config: data.train is not set (or set data.dir)");
  dataset_open(&t->train, cfg->data.train, 0);
  t->stream_mode = cfg->data.mode == RNND_DATA_STREAM;
  t->task = task_of(cfg->model.task);
  t->task->check_data(&t->train, NULL, "training");
  if (t->stream_mode)
    stream_state_init(&t->stream, t->train.n_tokens, cfg->train.global_batch, cfg->data.bptt, stream_width(cfg), comm,
                      cfg->data.train, "train.global_batch");
  load_eval_set(t, &t->valid, cfg->data.valid, "validation");
  load_eval_set(t, &t->test, cfg->data.test, "test");
  rnnd_sampler_options options = {.max_len = cfg->data.max_len, .batch = cfg->train.global_batch,
                                  .batch_tokens = cfg->train.global_batch_tokens, .buckets = cfg->data.buckets,
                                  .num_buckets = cfg->data.num_buckets, .seed = (uint64_t)cfg->train.seed,
                                  .shuffle = 1};
  t->task->sampler_options(&options, &cfg->data);
  sampler_init(&t->train_sampler, &t->train, &options);
  if (!cfg->train.global_batch_tokens && comm->size > cfg->train.global_batch)
    rnnd_input_error("config: world size %d is larger than train.global_batch = %d", comm->size,
                     cfg->train.global_batch);
  rnnd_model_shape shape;
  model_shape_from_config(&shape, &cfg->model, t->train.vocab_size);
  shape.n_classes = t->train.n_classes;
  shape.n_features = t->train.n_features;
  model_layout_init(&t->layout, &shape);
  device_choose(&t->device, cfg->train.device, comm->local_rank, &shape);
  t->params = RNND_ALLOC(float, t->layout.numel, "parameters");
  if (init_model) model_file_load_params(init_model, &t->layout, t->params);
  else init_params(t, cfg);
  /* Rank 0's parameters are the truth, whatever each rank read or drew. */
  comm_broadcast(comm, t->params, t->layout.numel * sizeof *t->params, 0);
  t->precision = (rnnd_dtype)cfg->train.precision;
  loss_scaler_init(&t->scaler, &cfg->amp, t->precision);
  optimizer_init(&t->optimizer, &cfg->train, t->layout.numel);
  t->best_valid_loss = INFINITY;
  sampler_start_epoch(&t->train_sampler, 0);
  char latest[4300];
  const char *checkpoint = resume_path(cfg, resume, latest, sizeof latest);
  if (checkpoint) resume_from(t, checkpoint);
  open_backend_and_step(t); /* the step loads the (resumed) weights and optimizer state */
  dealer_init(&t->dealer, comm->size, t->train_sampler.largest_batch_pieces);
  dealer_init(&t->lookahead, comm->size, t->train_sampler.largest_batch_pieces);
  t->share = RNND_ALLOC(rnnd_piece, t->batch.max_pieces, "rank share");
  t->next_share = RNND_ALLOC(rnnd_piece, t->batch.max_pieces, "next rank share");
  t->fault_flip_step = fault_step("RNND_FAULT_FLIP_PARAM", comm->rank);
  t->fault_nan_step = fault_step("RNND_FAULT_NAN_GRAD", comm->rank);
  t->fault_signal_step = fault_step("RNND_FAULT_SIGNAL", comm->rank);
  t->fault_exit_step = fault_step("RNND_FAULT_EXIT", comm->rank);
  t->fault_hang_step = fault_step("RNND_FAULT_HANG", comm->rank);
  int64_t batches_per_epoch = t->stream_mode ? t->stream.plan.n_windows : t->train_sampler.n_batches;
  t->total_steps = cfg->train.steps > 0 ? cfg->train.steps : cfg->train.epochs * batches_per_epoch;
  snprintf(t->model_path, sizeof t->model_path, "%s/model.h5", cfg->output.dir);
  if (comm->rank == 0) model_meta_read(&t->meta, cfg->data.train);
  const char *startup_hook = getenv("RNND_FAULT_SIGNAL_STARTUP"); /* test hook: RANK */
  if (startup_hook && atoi(startup_hook) == comm->rank) raise(SIGTERM);
  open_outputs(t, t->resumed);
  metrics_open(&t->metrics, cfg->output.dir, comm->rank == 0, t->resumed ? t->step : -1);
}

void trainer_free(rnnd_trainer *t) {
  model_meta_free(&t->meta);
  free(t->eval_copy);
  if (t->log) fclose(t->log);
  metrics_close(&t->metrics);
  dealer_free(&t->dealer);
  dealer_free(&t->lookahead);
  free(t->next_share);
  step_destroy(t->stepper);
  if (t->backend) t->backend->ops->destroy(t->backend);
  batch_free(&t->batch);
  free(t->share);
  optimizer_free(&t->optimizer);
  free(t->params);
  sampler_free(&t->train_sampler);
  if (t->stream_mode) stream_state_free(&t->stream);
  dataset_free(&t->train);
  rnnd_eval_set *sets[2] = {&t->valid, &t->test};
  for (int i = 0; i < 2; i++)
    if (sets[i]->present) {
      sampler_free(&sets[i]->sampler);
      if (t->stream_mode) stream_state_free(&sets[i]->stream);
      dataset_free(&sets[i]->data);
    }
  memset(t, 0, sizeof *t);
}

/* --- the step ----------------------------------------------------------- */

/* Next global batch (a new epoch when one ends); every rank draws the same. */
static int next_global_batch(rnnd_trainer *t, const rnnd_piece **pieces) {
  int count = sampler_next_pieces(&t->train_sampler, pieces);
  if (count) return count;
  sampler_start_epoch(&t->train_sampler, ++t->epoch);
  return sampler_next_pieces(&t->train_sampler, pieces);
}

/* Packs this rank's share (with what the task's head needs). */
static void fill_share(rnnd_trainer *t, int share) { t->task->fill_batch(&t->batch, &t->train, t->share, share); }

/* Test hooks for the watchdog: this rank dies, or stops answering, after its
 * backward and before the gradient all-reduce the others wait in. */
static void fault_before_reduce(void *context) {
  const rnnd_trainer *t = context;
  if (t->step == t->fault_exit_step) {
    fprintf(stderr, "rnn_dist: test hook: rank %d exits in step %lld\n", t->comm->rank, (long long)t->step);
    _exit(3);
  }
  if (t->step == t->fault_hang_step) {
    fprintf(stderr, "rnn_dist: test hook: rank %d hangs in step %lld\n", t->comm->rank, (long long)t->step);
    for (;;) pause();
  }
}

/* Tokens on disk: asks for the chunks of this rank's share of the next
 * batch, which the kernel reads while this step computes. (The first batch
 * of an epoch is not known before its epoch starts.) */
static void prefetch_next_share(rnnd_trainer *t) {
  const rnnd_piece *pieces;
  int count = t->train.store ? sampler_peek_pieces(&t->train_sampler, &pieces) : 0;
  if (!count) return;
  int share = dealer_deal(&t->lookahead, pieces, count, t->comm->rank, t->next_share);
  for (int i = 0; i < share; i++) {
    int64_t from, count;
    piece_token_span(&t->next_share[i], &from, &count);
    dataset_prefetch(&t->train, from, count);
  }
}

/* This rank's share of the next global batch into t->share; returns its
 * size and the global batch's target count in st. */
static int next_share(rnnd_trainer *t, rnnd_step_stats *st) {
  if (t->stream_mode) {
    st->imbalance = stream_state_imbalance(&t->stream, t->stream.next_window, t->comm->size);
    int share = stream_state_next(&t->stream, t->backend, t->share, &st->tokens);
    st->examples = st->tokens; /* streams score every row */
    return share;
  }
  const rnnd_piece *pieces;
  int count = next_global_batch(t, &pieces);
  int share = dealer_deal(&t->dealer, pieces, count, t->comm->rank, t->share);
  st->imbalance = dealer_imbalance(&t->dealer);
  for (int r = 0; r < t->comm->size; r++) st->tokens += t->dealer.tokens[r];
  st->examples = t->task->examples_of_pieces(pieces, count, st->tokens);
  prefetch_next_share(t);
  return share;
}

/* One optimizer step: the step computes the reduced gradient; the
 * decisions (learning rate, loss scale, skip, clip coefficient) are taken
 * here, the same for every step implementation and on every rank; then
 * the step applies the update. */
rnnd_step_stats trainer_train_step(rnnd_trainer *t) {
  const rnnd_config *cfg = t->cfg;
  rnnd_step_stats st = {.loss_scale = t->scaler.scale};
  double start = rnnd_now();
  int share = next_share(t, &st);
  if (share) fill_share(t, share);
  rnnd_dropout dropout = {.seed = (uint64_t)cfg->train.seed,
                          .step = t->step,
                          .p = (float)cfg->model.dropout,
                          .locked = cfg->model.locked_dropout,
                          .p_embedding = (float)cfg->model.embedding_dropout,
                          .ar_alpha = (float)cfg->model.ar_alpha,
                          .tar_beta = (float)cfg->model.tar_beta,
                          .p_weight = (float)cfg->model.weight_dropout};
  /* weighting by the GLOBAL count makes the reduced sum exactly the
   * gradient of the global batch's mean loss (times the loss scale) */
  rnnd_step_request request = {.loss_weight = (float)(st.loss_scale / (double)st.examples),
                               .loss_scale = st.loss_scale, .inject_nan = t->step == t->fault_nan_step,
                               .before_reduce = fault_before_reduce, .hook_context = t};
  rnnd_step_gradient g;
  step_gradients(t->stepper, share ? &t->batch : NULL, &dropout, &request, &g);
  if (t->stream_mode && stream_state_window_done(&t->stream)) t->epoch++;
  st.nll = g.nll;
  st.head = g.head;
  st.underflow = g.underflow;
  st.compute_s = g.compute_s;
  st.comm_s = g.comm_s;
  st.grad_norm = g.grad_norm;
  st.lr = lr_at_step(&cfg->train, t->step, t->total_steps);
  st.skipped = !loss_scaler_update(&t->scaler, isfinite(st.grad_norm));
  if (!st.skipped) {
    double clip = clip_coefficient(st.grad_norm, cfg->train.clip_norm);
    double update_norm = step_update(t->stepper, st.lr, clip, &st.param_norm);
    st.update_ratio = st.param_norm > 0 ? update_norm / st.param_norm : 0.0;
  } else {
    st.param_norm = step_param_norm(t->stepper);
  }
  st.step_s = rnnd_now() - start;
  t->step++;
  t->tokens_seen += st.tokens;
  return st;
}

/* --- replica check ------------------------------------------------------ */

static uint64_t params_checksum(const float *params, size_t n) {
  uint64_t h = 0x52E9D15Bull;
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &params[i], sizeof bits);
    h = rng_mix64(h ^ bits);
  }
  return h;
}

/* Test hooks, VARIABLE=RANK:STEP: RNND_FAULT_FLIP_PARAM flips one parameter
 * bit on RANK after STEP (the replica check must fire); RNND_FAULT_NAN_GRAD
 * puts a NaN into RANK's gradient at STEP (every rank must skip the step). */
static int64_t fault_step(const char *variable, int rank) {
  const char *spec = getenv(variable);
  int fault_rank = -1;
  long long step = -1;
  if (spec && sscanf(spec, "%d:%lld", &fault_rank, &step) == 2 && fault_rank == rank) return step;
  return -1;
}

/* Every rank must hold bitwise the same parameters; stop the job if not. */
static void check_replicas(rnnd_trainer *t) {
  if (t->step == t->fault_flip_step) {
    step_store(t->stepper);
    t->params[0] = nextafterf(t->params[0], INFINITY);
    step_load(t->stepper);
  }
  const rnnd_comm *c = t->comm;
  if (c->size == 1 || !t->cfg->comm.check_every || t->step % t->cfg->comm.check_every) return;
  step_store(t->stepper);
  uint64_t *sums = RNND_ALLOC(uint64_t, (size_t)c->size, "checksums");
  comm_allgather_u64(c, params_checksum(t->params, t->layout.numel), sums);
  for (int r = 1; r < c->size; r++)
    if (sums[r] != sums[0]) {
      if (c->rank == 0)
        fprintf(stderr, "%s: error: replicas diverged: after step %lld the parameters of rank %d differ from rank 0's "
                "(checksums %016llx vs %016llx)\n", rnnd_program_name(), (long long)t->step, r,
                (unsigned long long)sums[r], (unsigned long long)sums[0]);
      comm_barrier(c); /* let rank 0 print before the job is torn down */
      free(sums);
      comm_abort(c, RNND_EXIT_INTERNAL);
    }
  free(sums);
}

/* The weights evaluation and model files use: the averaged weights once
 * averaging has started (rounded to the compute precision as the step's
 * compute copy is, for the backend), else the step's compute copy. */
static const float *eval_weights(rnnd_trainer *t, int rounded) {
  step_store(t->stepper);
  const float *w = optimizer_eval_weights(&t->optimizer, t->params);
  if (w == t->params) return rounded ? t->stepper->compute_params : t->params;
  if (!rounded || t->precision == RNND_DTYPE_F32) return w;
  if (!t->eval_copy) t->eval_copy = RNND_ALLOC(float, t->layout.numel, "averaged compute copy");
  rnnd_round_through_half_array(t->precision, t->eval_copy, w, t->layout.numel);
  return t->eval_copy;
}

/* Evaluates a split with the weights the step computes with (or their
 * average); returns its loss. */
static double run_eval(rnnd_trainer *t, rnnd_eval_set *set, const char *role) {
  double start = rnnd_now();
  const float *weights = eval_weights(t, 1);
  rnnd_eval_result r = t->stream_mode ? evaluate_stream(t->backend, t->task, weights, &set->data, &set->stream,
                                                        &t->batch, t->share, t->comm)
                                      : evaluate_dataset(t->backend, t->task, weights, &set->data, &set->sampler,
                                                         &t->batch, t->comm);
  set->quality = t->task->quality(r.nll_sum, r.tokens, &r.head);
  if (!strcmp(role, "valid") && set->quality.loss < t->best_valid_loss) t->best_valid_loss = set->quality.loss;
  report_eval(t, set, role, &r, rnnd_now() - start);
  return set->quality.loss;
}

static void save_model(rnnd_trainer *t) {
  step_store(t->stepper);
  if (t->comm->rank == 0)
    model_file_write(t->model_path, &t->layout, eval_weights(t, 0), t->cfg->data.max_len, &t->meta);
}

typedef enum { KEEP_GOING = 0, TIME_IS_UP = 1, PREEMPTED = 2 } stop_reason;

/* Every rank must stop at the same step boundary: a signal on any rank, or
 * rank 0's clock past the time limit, stops them all (one all-reduce). */
static stop_reason should_stop(const rnnd_trainer *t) {
  if (t->step == t->fault_signal_step) raise(SIGTERM);
  double reason = preempt_signal() ? PREEMPTED : KEEP_GOING;
  if (reason == KEEP_GOING && t->comm->rank == 0 && t->cfg->train.time_limit_s > 0 &&
      rnnd_now() - t->start_time > t->cfg->train.time_limit_s)
    reason = TIME_IS_UP;
  return (stop_reason)comm_allreduce_max_f64(t->comm, reason);
}

static void save_checkpoint(rnnd_trainer *t) {
  step_store(t->stepper);
  float *streams = NULL; /* stream mode: every stream's carried state, assembled on all ranks */
  if (t->stream_mode) {
    streams = RNND_ALLOC(float, t->stream.plan.n_streams * t->stream.width, "stream state");
    stream_state_gather(&t->stream, t->comm, streams);
  }
  if (t->comm->rank != 0) {
    free(streams);
    return;
  }
  char *config_text = NULL;
  size_t config_size = 0;
  FILE *memory = open_memstream(&config_text, &config_size);
  if (!memory) RNND_FAIL("open_memstream failed");
  config_write(t->cfg, memory);
  fclose(memory);
  int64_t next_batch = t->stream_mode ? t->stream.next_window : t->train_sampler.next_batch;
  rnnd_train_state state = {.step = t->step, .epoch = t->epoch, .next_batch = next_batch,
                            .tokens_seen = t->tokens_seen, .seed = (uint64_t)t->cfg->train.seed,
                            .best_valid_loss = t->best_valid_loss, .train_seconds = trainer_clock(t),
                            .world_size = t->comm->size};
  const char *delay = getenv("RNND_FAULT_CHECKPOINT_DELAY"); /* test hook: seconds */
  rnnd_checkpoint_view view = {.layout = &t->layout, .params = t->params, .optimizer = &t->optimizer,
                               .scaler = &t->scaler, .state = &state, .config_text = config_text,
                               .max_len = t->cfg->data.max_len, .test_delay_s = delay ? atof(delay) : 0.0,
                               .meta = &t->meta};
  if (streams) {
    view.stream_state = streams;
    view.n_streams = t->stream.plan.n_streams;
    view.stream_width = t->stream.width;
  }
  checkpoint_save(t->cfg->output.dir, t->cfg->output.keep, &view);
  free(config_text);
  free(streams);
  trainer_log(t, "checkpoint step %lld | %s/ckpt_step%08lld.h5\n", (long long)t->step, t->cfg->output.dir,
              (long long)t->step);
}

/* Names of the views whose gradient holds inf or NaN, state_dict order. */
static void nonfinite_tensors(const rnnd_trainer *t, const float *grads, char *buf, size_t size) {
  buf[0] = '\0';
  int listed = 0;
  for (int v = 0; v < t->layout.n_views; v++) {
    const rnnd_param_view *view = &t->layout.views[v];
    size_t bad = 0;
    for (size_t i = 0; i < view->numel; i++) bad += !isfinite(grads[view->offset + i]);
    if (!bad || view->alias) continue;
    size_t used = strlen(buf);
    if (listed++ < 4) snprintf(buf + used, size - used, "%s%s (%zu values)", listed > 1 ? ", " : "", view->name, bad);
  }
  if (listed > 4) snprintf(buf + strlen(buf), size - strlen(buf), " and %d more", listed - 4);
}

/* Without dynamic loss scaling (fp32, bf16) a non-finite gradient is not an
 * overflow to back off from but a diverged run: stop every rank, name the
 * step, the tensors and the checkpoint to go back to. */
static int stop_on_nonfinite(rnnd_trainer *t, const rnnd_step_stats *st) {
  float *grads = RNND_ALLOC(float, t->layout.numel, "gradient");
  step_fetch_gradient(t->stepper, grads);
  char tensors[512], latest[4300];
  nonfinite_tensors(t, grads, tensors, sizeof tensors);
  free(grads);
  int have_checkpoint = checkpoint_latest(t->cfg->output.dir, latest, sizeof latest);
  metrics_flush(&t->metrics);
  if (t->comm->rank == 0) {
    fprintf(stderr, "%s: error: step %lld: non-finite gradient (norm %g, loss %g) in %s with no loss scaling to "
            "absorb it: in %s; stopping. Last checkpoint: %s (lower train.lr or train.clip_norm, then --resume "
            "auto)\n", rnnd_program_name(), (long long)t->step, st->grad_norm, st->nll / (double)st->examples,
            rnnd_dtype_name(t->precision), tensors[0] ? tensors : "(no tensor: the loss itself)",
            have_checkpoint ? latest : "none yet");
    fflush(stderr);
  }
  return RNND_EXIT_INTERNAL;
}

int trainer_run(rnnd_trainer *t) {
  const rnnd_config *cfg = t->cfg;
  report_header(t);
  t->start_time = rnnd_now();
  t->start_step = t->step;
  t->start_tokens = t->tokens_seen;
  rnnd_interval iv = {.start = t->start_time};
  rnnd_step_stats st = {0};
  int64_t valid_step = -1;      /* step of the last validation, so the end does not repeat it */
  int64_t checkpoint_step = -1; /* step of the last checkpoint, likewise */
  stop_reason stop = KEEP_GOING;
  while (t->step < t->total_steps && (stop = should_stop(t)) == KEEP_GOING) {
    st = trainer_train_step(t);
    report_step(t, &iv, &st);
    if (st.skipped && !t->scaler.dynamic) return stop_on_nonfinite(t, &st);
    report_histograms(t);
    check_replicas(t);
    if (t->step % cfg->train.log_every == 0 || t->step == t->total_steps) report_progress(t, &iv, &st);
    if (cfg->train.eval_every && t->step % cfg->train.eval_every == 0 && t->valid.present) {
      run_eval(t, &t->valid, "valid");
      valid_step = t->step;
    }
    if (cfg->output.save_every && t->step % cfg->output.save_every == 0) save_model(t);
    if (cfg->output.checkpoint_every && t->step % cfg->output.checkpoint_every == 0) {
      save_checkpoint(t);
      checkpoint_step = t->step;
    }
  }
  if (iv.tokens) report_progress(t, &iv, &st);
  if (stop == PREEMPTED) {
    trainer_log(t, "preempted: every rank stopped after step %lld; %s; exiting with code %d\n",
                (long long)t->step, checkpoint_step == t->step ? "that step is already checkpointed" : "checkpointing",
                cfg->output.preempt_exit_code);
    if (checkpoint_step != t->step) save_checkpoint(t);
    metrics_flush(&t->metrics);
    return cfg->output.preempt_exit_code;
  }
  if (checkpoint_step != t->step) save_checkpoint(t);
  double train_seconds = rnnd_now() - t->start_time;
  save_model(t);
  if (t->valid.present && valid_step != t->step) run_eval(t, &t->valid, "valid");
  if (t->test.present) run_eval(t, &t->test, "test");
  report_summary(t, train_seconds);
  return 0;
}
