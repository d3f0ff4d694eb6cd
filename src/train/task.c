/* task.c — the three tasks above the backends (task.h). */
#include "rnnd/task.h"

#include <math.h>
#include <stdio.h>

#include "rnnd/common.h"

/* --- what every task shares ------------------------------------------------ */

static void sampler_pieces(rnnd_sampler_options *o, const rnnd_data_config *data) {
  (void)data;
  o->whole_sequences = 0;
  o->window_stride = 0;
}

static void fill_pieces(rnnd_batch *b, const rnnd_dataset *ds, const rnnd_piece *pieces, int count) {
  batch_fill(b, ds, pieces, count);
}

/* A token set for lm and classify, a time series for regress. */
static void require_tokens(const rnnd_dataset *ds, const rnnd_dataset *train, const char *role) {
  (void)train;
  if (ds->n_features)
    rnnd_input_error("%s: %s set is a time series (rnn_prep --csv); set model.task = regress", ds->path, role);
}

static double nll_per_example(double nll, int64_t examples) { return nll / (double)examples; }

/* --- lm: every next token ------------------------------------------------- */

static int64_t lm_examples_of_pieces(const rnnd_piece *pieces, int count, int64_t tokens) {
  (void)pieces;
  (void)count;
  return tokens;
}
static int64_t lm_examples_of_batch(const rnnd_batch *b) { return b->n_tokens; }

static rnnd_quality lm_quality(double nll, int64_t examples, const rnnd_head_stats *h) {
  (void)h;
  return (rnnd_quality){nll_per_example(nll, examples), NAN, NAN, NAN};
}
static void lm_progress(const rnnd_quality *q, char *buf, size_t size) {
  snprintf(buf, size, "ppl %9.2f", exp(q->loss));
}
static void lm_eval(const rnnd_quality *q, int64_t examples, char *buf, size_t size) {
  snprintf(buf, size, "loss %.4f | ppl %.2f | tokens %lld", q->loss, exp(q->loss), (long long)examples);
}
static void lm_summary(const rnnd_quality *q, char *buf, size_t size) { snprintf(buf, size, "ppl %.2f", exp(q->loss)); }
static void lm_result(const rnnd_quality *q, int64_t examples, char *buf, size_t size) {
  snprintf(buf, size, "loss %.6f ppl %.4f tokens %lld", q->loss, exp(q->loss), (long long)examples);
}

static const rnnd_task_ops lm_task = {
    .name = "lm",
    .examples = "tokens",
    .check_data = require_tokens,
    .sampler_options = sampler_pieces,
    .fill_batch = fill_pieces,
    .examples_of_pieces = lm_examples_of_pieces,
    .examples_of_batch = lm_examples_of_batch,
    .quality = lm_quality,
    .progress_text = lm_progress,
    .eval_text = lm_eval,
    .summary_text = lm_summary,
    .result_text = lm_result,
};

/* --- classify: one label per sequence -------------------------------------- */

static void classify_check(const rnnd_dataset *ds, const rnnd_dataset *train, const char *role) {
  if (!ds->labels)
    rnnd_input_error("%s: %s set has no /labels but model.task = classify (prepare it with rnn_prep --labels)",
                     ds->path, role);
  if (train && ds->n_classes != train->n_classes)
    rnnd_input_error("%s: %s set has %d classes but the training set %s has %d; prepare all splits with one "
                     "rnn_prep --labels run", ds->path, role, (int)ds->n_classes, train->path,
                     (int)train->n_classes);
  require_tokens(ds, train, role);
}

static void classify_sampler(rnnd_sampler_options *o, const rnnd_data_config *data) {
  (void)data;
  o->whole_sequences = 1;
  o->window_stride = 0;
}

static void classify_fill(rnnd_batch *b, const rnnd_dataset *ds, const rnnd_piece *pieces, int count) {
  batch_fill(b, ds, pieces, count);
  batch_fill_labels(b, ds);
}

static int64_t classify_examples_of_pieces(const rnnd_piece *pieces, int count, int64_t tokens) {
  (void)pieces;
  (void)tokens;
  return count;
}
static int64_t classify_examples_of_batch(const rnnd_batch *b) { return b->n_pieces; }

static rnnd_quality classify_quality(double nll, int64_t examples, const rnnd_head_stats *h) {
  return (rnnd_quality){nll_per_example(nll, examples), (double)h->correct / (double)examples, NAN, NAN};
}
static void classify_progress(const rnnd_quality *q, char *buf, size_t size) {
  snprintf(buf, size, "acc %.4f", q->accuracy);
}
static void classify_eval(const rnnd_quality *q, int64_t examples, char *buf, size_t size) {
  snprintf(buf, size, "loss %.4f | acc %.4f | sequences %lld", q->loss, q->accuracy, (long long)examples);
}
static void classify_summary(const rnnd_quality *q, char *buf, size_t size) {
  snprintf(buf, size, "loss %.4f acc %.4f", q->loss, q->accuracy);
}
static void classify_result(const rnnd_quality *q, int64_t examples, char *buf, size_t size) {
  snprintf(buf, size, "loss %.6f accuracy %.6f sequences %lld", q->loss, q->accuracy, (long long)examples);
}

static const rnnd_task_ops classify_task = {
    .name = "classify",
    .examples = "sequences",
    .check_data = classify_check,
    .sampler_options = classify_sampler,
    .fill_batch = classify_fill,
    .examples_of_pieces = classify_examples_of_pieces,
    .examples_of_batch = classify_examples_of_batch,
    .quality = classify_quality,
    .progress_text = classify_progress,
    .eval_text = classify_eval,
    .summary_text = classify_summary,
    .result_text = classify_result,
};

/* --- regress: the next step's features -------------------------------------- */

static void regress_check(const rnnd_dataset *ds, const rnnd_dataset *train, const char *role) {
  if (!ds->n_features)
    rnnd_input_error("%s: %s set holds tokens but model.task = regress needs a time series (rnn_prep --csv)",
                     ds->path, role);
  if (train && ds->n_features != train->n_features)
    rnnd_input_error("%s: %s set has %d features but the training set %s has %d", ds->path, role,
                     (int)ds->n_features, train->path, (int)train->n_features);
}

static void regress_sampler(rnnd_sampler_options *o, const rnnd_data_config *data) {
  o->whole_sequences = 0;
  o->window_stride = data ? data->target_last : 0;
}

/* Rows of a piece that count in the loss (windows score their last rows). */
static int64_t scored_rows(const rnnd_piece *p) { return p->scored ? p->scored : p->length; }

static int64_t regress_examples_of_pieces(const rnnd_piece *pieces, int count, int64_t tokens) {
  (void)tokens;
  int64_t rows = 0;
  for (int i = 0; i < count; i++) rows += scored_rows(&pieces[i]);
  return rows;
}
static int64_t regress_examples_of_batch(const rnnd_batch *b) { return b->n_scored; }

static rnnd_quality regress_quality(double nll, int64_t examples, const rnnd_head_stats *h) {
  return (rnnd_quality){nll_per_example(nll, examples), NAN, sqrt(h->sq_error / (double)h->values),
                        h->abs_error / (double)h->values};
}
static void regress_progress(const rnnd_quality *q, char *buf, size_t size) {
  snprintf(buf, size, "rmse %.5g", q->rmse);
}
static void regress_eval(const rnnd_quality *q, int64_t examples, char *buf, size_t size) {
  snprintf(buf, size, "loss %.5f | rmse %.5g | mae %.5g | steps %lld", q->loss, q->rmse, q->mae, (long long)examples);
}
static void regress_summary(const rnnd_quality *q, char *buf, size_t size) {
  snprintf(buf, size, "mse %.5f rmse %.5g mae %.5g", q->loss, q->rmse, q->mae);
}
static void regress_result(const rnnd_quality *q, int64_t examples, char *buf, size_t size) {
  snprintf(buf, size, "loss %.6f rmse %.6g mae %.6g steps %lld", q->loss, q->rmse, q->mae, (long long)examples);
}

static const rnnd_task_ops regress_task = {
    .name = "regress",
    .examples = "steps",
    .check_data = regress_check,
    .sampler_options = regress_sampler,
    .fill_batch = fill_pieces,
    .examples_of_pieces = regress_examples_of_pieces,
    .examples_of_batch = regress_examples_of_batch,
    .quality = regress_quality,
    .progress_text = regress_progress,
    .eval_text = regress_eval,
    .summary_text = regress_summary,
    .result_text = regress_result,
};

const rnnd_task_ops *task_of(int task) {
  switch (task) {
  case RNND_TASK_CLASSIFY: return &classify_task;
  case RNND_TASK_REGRESS: return &regress_task;
  default: return &lm_task;
  }
}
