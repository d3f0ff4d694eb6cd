/* report.c — the run's header, progress lines, metrics rows, histograms,
 * evaluation lines and summary (report.h). */
#include "report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "rnnd/common.h"
#include "rnnd/grad_sync.h"

void trainer_log(rnnd_trainer *t, const char *fmt, ...) {
  if (t->comm->rank != 0) return;
  va_list args;
  va_start(args, fmt);
  vprintf(fmt, args);
  va_end(args);
  fflush(stdout);
  if (t->log) {
    va_start(args, fmt);
    vfprintf(t->log, fmt, args);
    va_end(args);
    fflush(t->log);
  }
}

static void format_duration(char *buf, size_t size, double seconds) {
  long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
  snprintf(buf, size, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
}

static size_t eval_set_bytes(const rnnd_eval_set *set) {
  return set->present ? dataset_bytes(&set->data) + sampler_bytes(&set->sampler) : 0;
}

/* The step's memory plus the data the rank holds, which counts in the
 * total where the step computes on the host. */
rnnd_memory trainer_memory(const rnnd_trainer *t) {
  rnnd_memory m;
  step_memory(t->stepper, &m);
  m.data = dataset_bytes(&t->train) + sampler_bytes(&t->train_sampler) + eval_set_bytes(&t->valid) +
           eval_set_bytes(&t->test);
  if (!t->device.cuda) m.held += m.data;
  return m;
}

/* The process's largest resident set so far (what the kernel counts,
 * libraries and MPI included). */
static double peak_rss_mib(void) {
  struct rusage usage;
  return getrusage(RUSAGE_SELF, &usage) == 0 ? (double)usage.ru_maxrss / 1024.0 : 0.0;
}

/* What the step holds where it computes: the host total, or the GPU's. */
static size_t memory_bytes(const rnnd_trainer *t) { return trainer_memory(t).held; }

static void interval_add(rnnd_interval *iv, const rnnd_step_stats *st) {
  iv->nll += st->nll;
  iv->tokens += st->tokens;
  iv->examples += st->examples;
  iv->head.correct += st->head.correct;
  iv->head.sq_error += st->head.sq_error;
  iv->head.abs_error += st->head.abs_error;
  iv->head.values += st->head.values;
  iv->imbalance += st->imbalance;
  iv->compute_s += st->compute_s;
  iv->comm_s += st->comm_s;
  iv->steps++;
  iv->skipped += st->skipped;
}

#define HISTOGRAM_BINS 32

void report_histograms(rnnd_trainer *t) {
  static const char *const gru_gates[] = {"r", "z", "n"}, *const lstm_gates[] = {"i", "f", "g", "o"};
  const rnnd_model_shape *s = &t->layout.shape;
  if (t->comm->rank != 0 || !t->cfg->metrics.hist_every || t->step % t->cfg->metrics.hist_every) return;
  if (!t->backend->ops->gate_histogram) return; /* a backend that cannot see its gates (CUDA) */
  int gates = t->layout.gates, series = s->layers * gates;
  int64_t *counts = RNND_ALLOC(int64_t, (size_t)series * HISTOGRAM_BINS, "gate histograms");
  for (int k = 0; k < series; k++)
    t->backend->ops->gate_histogram(t->backend, k / gates, k % gates, HISTOGRAM_BINS,
                                    counts + (size_t)k * HISTOGRAM_BINS);
  metrics_add_histograms(&t->metrics, t->step, s->layers, gates, s->cell == RNND_CELL_LSTM ? lstm_gates : gru_gates,
                         HISTOGRAM_BINS, counts);
  free(counts);
}

/* The step into the interval's sums and a metrics row. */
void report_step(rnnd_trainer *t, rnnd_interval *iv, const rnnd_step_stats *st) {
  interval_add(iv, st);
  rnnd_quality q = t->task->quality(st->nll, st->examples, &st->head);
  rnnd_step_metrics row = {.step = t->step, .epoch = t->epoch, .loss = q.loss, .tokens = st->tokens, .lr = st->lr,
                           .grad_norm = st->grad_norm, .imbalance = st->imbalance, .compute_s = st->compute_s,
                           .comm_s = st->comm_s, .elapsed_s = trainer_clock(t),
                           .loss_scale = st->loss_scale, .skipped = st->skipped,
                           .growth_tracker = t->scaler.growth_tracker, .underflow = st->underflow,
                           .ppl = exp(q.loss), .tokens_per_s = (double)st->tokens / st->step_s,
                           .param_norm = st->param_norm, .update_ratio = st->update_ratio,
                           .memory_bytes = (int64_t)memory_bytes(t), .accuracy = q.accuracy, .rmse = q.rmse};
  metrics_add_step(&t->metrics, &row);
}

/* tok/s is the whole job's; imbalance is the mean over the interval's steps
 * of max/mean tokens per rank; comm is rank 0's share of step time spent in
 * the gradient all-reduce (waiting for slower ranks included). elapsed is
 * the run's training clock (trainer_clock); the ETA is this start's pace. */
void report_progress(rnnd_trainer *t, rnnd_interval *iv, const rnnd_step_stats *st) {
  double now = rnnd_now(), elapsed = trainer_clock(t), seconds = now - iv->start;
  rnnd_quality q = t->task->quality(iv->nll, iv->examples, &iv->head);
  char quality[48];
  t->task->progress_text(&q, quality, sizeof quality);
  double eta = (now - t->start_time) / (double)(t->step - t->start_step) * (double)(t->total_steps - t->step);
  double busy = iv->compute_s + iv->comm_s;
  char elapsed_text[32], eta_text[32], amp_text[96] = "";
  format_duration(elapsed_text, sizeof elapsed_text, elapsed);
  format_duration(eta_text, sizeof eta_text, eta);
  if (t->scaler.dynamic || iv->skipped || t->scaler.skipped)
    snprintf(amp_text, sizeof amp_text, "scale %.0f (%ld ok) | skipped %d (%lld in all) | ", t->scaler.scale,
             t->scaler.growth_tracker, iv->skipped, (long long)t->scaler.skipped);
  trainer_log(t,
              "step %6lld/%lld | epoch %lld | loss %.4f | %s | %8.0f tok/s | lr %.3e | gnorm %7.3f | "
              "%simbal %.3f | comm %4.1f%% | mem %.0f MiB | %s elapsed | ETA %s\n",
              (long long)t->step, (long long)t->total_steps, (long long)t->epoch, q.loss, quality,
              (double)iv->tokens / seconds, st->lr, st->grad_norm, amp_text, iv->imbalance / iv->steps,
              busy > 0 ? 100.0 * iv->comm_s / busy : 0.0, (double)memory_bytes(t) / 1048576.0, elapsed_text,
              eta_text);
  metrics_flush(&t->metrics);
  *iv = (rnnd_interval){.start = now};
}

void report_eval(rnnd_trainer *t, const rnnd_eval_set *set, const char *role, const rnnd_eval_result *r,
                 double seconds) {
  const rnnd_quality *q = &set->quality;
  rnnd_eval_metrics row = {t->step, q->loss, exp(q->loss), r->tokens, q->accuracy, q->rmse, q->mae};
  metrics_add_eval(&t->metrics, !strcmp(role, "test"), &row);
  char measures[160];
  t->task->eval_text(q, r->tokens, measures, sizeof measures);
  trainer_log(t, "%s step %lld | %s | %.1f s\n", role, (long long)t->step, measures, seconds);
}

static void report_data(rnnd_trainer *t) {
  if (t->stream_mode)
    trainer_log(t, "rnn_dist: train %s: %lld tokens as %lld streams of %lld, %lld windows of <= %d steps an epoch "
                "(state carried)\n", t->train.path, (long long)t->train.n_tokens, (long long)t->stream.plan.n_streams,
                (long long)t->stream.plan.base_length, (long long)t->stream.plan.n_windows, t->cfg->data.bptt);
  else
    trainer_log(t, "rnn_dist: train %s: %lld sequences, %lld tokens, %lld pieces (max_len %d) in %lld batches of <= %d\n",
                t->train.path, (long long)t->train.n_sequences, (long long)t->train.n_tokens,
                (long long)t->train_sampler.n_pieces, t->cfg->data.max_len, (long long)t->train_sampler.n_batches,
                t->cfg->train.global_batch);
}

/* Appends " r" for every rank on `host` (local ranks with local = 1). */
static void append_ranks_on(char *text, size_t size, const rnnd_rank_place *places, int world, const char *host,
                            int local) {
  for (int r = 0; r < world; r++) {
    size_t used = strlen(text);
    if (!strcmp(places[r].host, host) && used + 16 < size)
      snprintf(text + used, size - used, " %d", local ? places[r].local_rank : r);
  }
}

/* One line per host, hosts in the order of their first rank: which world
 * ranks run there and their local ranks (which pick the GPU). Every rank
 * takes part (an all-gather); rank 0 prints. */
static void report_placement(rnnd_trainer *t) {
  const rnnd_comm *c = t->comm;
  rnnd_rank_place *places = RNND_ALLOC(rnnd_rank_place, c->size, "rank places");
  comm_gather_places(c, places);
  for (int r = 0; r < c->size; r++) {
    int seen = 0;
    for (int q = 0; q < r && !seen; q++) seen = !strcmp(places[q].host, places[r].host);
    if (seen) continue;
    char world[512] = "", local[512] = "";
    append_ranks_on(world, sizeof world, places, c->size, places[r].host, 0);
    append_ranks_on(local, sizeof local, places, c->size, places[r].host, 1);
    trainer_log(t, "rnn_dist: host %s: rank%s%s as local rank%s%s of %d\n", places[r].host,
                strchr(world + 1, ' ') ? "s" : "", world, strchr(local + 1, ' ') ? "s" : "", local,
                places[r].local_size);
  }
  free(places);
}

void report_header(rnnd_trainer *t) {
  const rnnd_model_shape *s = &t->layout.shape;
  const char *core, *advice = cpu_blas_advice(&core);
  trainer_log(t, "rnn_dist: %s, %d layer%s, embed %d, hidden %d%s%s, vocab %d, %zu parameters\n",
              model_cell_name(s->cell), s->layers, s->layers > 1 ? "s" : "", s->embed, s->hidden,
              s->directions == 2 ? ", bidirectional" : "", s->tie_weights ? ", tied" : "", s->vocab_size,
              t->layout.numel);
  report_data(t);
  report_placement(t);
  if (t->device.cuda) trainer_log(t, "rnn_dist: rank 0 on %s\n", t->device.name);
  trainer_log(t, "rnn_dist: backend %s, BLAS core %s, %d rank%s, %lld steps, precision %s%s\n", t->backend->ops->name,
              core, t->comm->size, t->comm->size > 1 ? "s" : "", (long long)t->total_steps,
              rnnd_dtype_name(t->precision), t->scaler.dynamic ? " with dynamic loss scaling" : "");
  const char *products = backend_describe(t->backend);
  if (products[0]) trainer_log(t, "rnn_dist: %s\n", products);
  if (t->comm->size > 1) {
    rnnd_dtype wire = (rnnd_dtype)t->cfg->comm.grad_dtype;
    size_t per_bucket = grad_sync_bucket_elems(t->layout.numel, t->cfg->comm.bucket_mb, wire);
    long buckets = (long)((t->layout.numel + per_bucket - 1) / per_bucket);
    trainer_log(t, "rnn_dist: gradients all-reduced in %ld bucket%s of <= %.3g MiB, %s on the wire; replica check "
                "every %ld steps\n", buckets, buckets > 1 ? "s" : "", t->cfg->comm.bucket_mb, rnnd_dtype_name(wire),
                t->cfg->comm.check_every);
  }
  if (advice) rnnd_warn0("%s", advice);
}

static void report_split_summary(rnnd_trainer *t, const rnnd_eval_set *set, const char *role) {
  if (!set->present) return;
  char text[160];
  t->task->summary_text(&set->quality, text, sizeof text);
  trainer_log(t, "summary: %s %s\n", role, text);
}

void report_summary(rnnd_trainer *t, double train_seconds) {
  char took[32], clock[32], this_start[96] = "";
  format_duration(took, sizeof took, train_seconds);
  format_duration(clock, sizeof clock, t->clock_before + train_seconds);
  if (t->resumed)
    snprintf(this_start, sizeof this_start, "; this start %lld steps in %s", (long long)(t->step - t->start_step),
             took);
  trainer_log(t, "summary: %lld steps, %lld tokens in %s of training (%.0f tok/s%s), memory held %.0f MiB (rank 0's "
              "peak RSS %.0f MiB)\n", (long long)t->step, (long long)t->tokens_seen, clock,
              (double)(t->tokens_seen - t->start_tokens) / train_seconds, this_start,
              (double)memory_bytes(t) / 1048576.0, peak_rss_mib());
  rnnd_memory m = trainer_memory(t);
  trainer_log(t, "summary: memory (MiB) weights %.1f, gradients %.1f, optimizer %.1f, activations %.1f (%s), "
              "workspace %.1f (grew %lld time%s), data %.1f%s\n", m.weights / 1048576.0, m.gradients / 1048576.0,
              m.optimizer / 1048576.0, m.activations / 1048576.0, rnnd_dtype_name(t->precision),
              m.workspace / 1048576.0, (long long)m.workspace_growths, m.workspace_growths == 1 ? "" : "s",
              m.data / 1048576.0, t->device.cuda ? " (host)" : "");
  if (t->precision != RNND_DTYPE_F32 || t->scaler.skipped)
    trainer_log(t, "summary: precision %s, %lld steps skipped for inf/NaN gradients, final loss scale %.0f\n",
                rnnd_dtype_name(t->precision), (long long)t->scaler.skipped, t->scaler.scale);
  report_split_summary(t, &t->valid, "valid");
  report_split_summary(t, &t->test, "test");
  trainer_log(t, "summary: model %s, log %s/train.log, metrics %s, config %s/config.ini\n", t->model_path,
              t->cfg->output.dir, t->metrics.path, t->cfg->output.dir);
}
