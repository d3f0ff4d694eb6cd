/* predict.c — `rnn_dist predict` (infer.h).
 *
 * A classifier reads one sequence per line: its words (after a first TAB,
 * if the line has one: the label of an rnn_prep --labels file), tokenised
 * as the training text was, from a zero state; it prints the most likely
 * class and its probability, "label<TAB>probability".
 *
 * A forecaster reads past values: a CSV file (the rnn_prep --csv format) of
 * one or more series, or with --stdin one series per line, steps separated
 * by ';' and a step's features by ','. Each series is normalised with the
 * training set's mean and std, run from a zero state, and its next
 * `horizon` steps are predicted, each prediction fed back as the next
 * input; they are printed in original units: for a file as CSV,
 * "series_id,step,FEATURE..." (step 1 is the step after the last given),
 * with --stdin as one line in the input's format. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/csv_table.h"
#include "rnnd/infer.h"
#include "runner.h"

/* --- classifier ----------------------------------------------------------- */

/* One line: its words, their class. `where` names the line in errors. */
static void classify_line(rnnd_runner *r, char *line, int32_t **ids, int *cap, const char *where) {
  char *tab = strchr(line, '\t');
  char *text = tab ? tab + 1 : line;
  int need = (int)strlen(text) / 2 + 1, unknown;
  if (need > *cap) {
    free(*ids);
    *cap = need;
    *ids = RNND_ALLOC(int32_t, *cap, "line ids");
  }
  int n = runner_tokenise(r, text, *ids, *cap, &unknown);
  if (n == 0) rnnd_input_error("%s: no words to classify", where);
  runner_reset(r);
  runner_feed(r, *ids, NULL, n);
  int best = 0;
  for (int c = 1; c < r->width; c++)
    if (r->out[c] > r->out[best]) best = c;
  printf("%s\t%.6f\n", r->meta.class_names[best], exp((double)r->out[best]));
}

static void classify_stream(rnnd_runner *r, FILE *in, const char *name, int flush) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int32_t *ids = NULL;
  int ids_cap = 0;
  for (long number = 1; (len = getline(&line, &cap, in)) >= 0; number++) {
    if (len > 0 && line[len - 1] == '\n') line[len - 1] = '\0';
    char where[4200];
    snprintf(where, sizeof where, "%s:%ld", name, number);
    classify_line(r, line, &ids, &ids_cap, where);
    if (flush) fflush(stdout);
  }
  if (ferror(in)) rnnd_input_error("%s: cannot read (%s)", name, strerror(errno));
  free(line);
  free(ids);
}

/* --- forecaster ----------------------------------------------------------- */

/* Runs `steps` rows of original values, then predicts `horizon` steps
 * into out[horizon, F] (original units). */
static void forecast(rnnd_runner *r, const float *values, int64_t steps, int horizon, float *out) {
  const rnnd_model_meta *m = &r->meta;
  const int F = m->n_features;
  float *rows = RNND_ALLOC(float, steps * F, "normalised rows");
  for (int64_t i = 0; i < steps * F; i++) rows[i] = (values[i] - m->mean[i % F]) / m->std[i % F];
  runner_reset(r);
  if (r->carries) /* one call per capacity's worth of steps: exact, the state is carried */
    for (int64_t at = 0; at < steps; at += r->steps) {
      int64_t n = steps - at < r->steps ? steps - at : r->steps;
      runner_feed(r, NULL, rows + at * F, (int)n);
    }
  else
    runner_feed(r, NULL, rows, (int)steps);
  float *next = RNND_ALLOC(float, F, "prediction");
  for (int h = 0; h < horizon; h++) {
    memcpy(next, r->out, (size_t)F * sizeof *next);
    for (int f = 0; f < F; f++) out[(int64_t)h * F + f] = next[f] * m->std[f] + m->mean[f];
    if (h + 1 < horizon) runner_feed(r, NULL, next, 1);
  }
  free(next);
  free(rows);
}

/* The CSV's feature columns must be the model's, in its order. */
static void check_columns(const rnnd_runner *r, const csv_table *t) {
  const rnnd_model_meta *m = &r->meta;
  if (t->n_features != m->n_features)
    rnnd_input_error("%s: %d feature columns, but the model %s forecasts %d", t->path, t->n_features, r->path,
                     (int)m->n_features);
  for (int f = 0; m->feature_names && f < t->n_features; f++)
    if (strcmp(t->names[f], m->feature_names[f]))
      rnnd_input_error("%s: feature column %d is '%s', but the model %s was trained with '%s' there", t->path, f + 1,
                       t->names[f], r->path, m->feature_names[f]);
}

static void forecast_file(rnnd_runner *r, const char *path, int horizon) {
  csv_table t;
  csv_table_read(&t, path);
  check_columns(r, &t);
  const int F = t.n_features;
  float *out = RNND_ALLOC(float, (int64_t)horizon * F, "forecast");
  printf("%s,step", RNND_CSV_SERIES_COLUMN);
  for (int f = 0; f < F; f++) printf(",%s", t.names[f]);
  printf("\n");
  for (int64_t s = 0; s < t.n_series; s++) {
    forecast(r, t.values + t.offsets[s] * F, t.offsets[s + 1] - t.offsets[s], horizon, out);
    for (int h = 0; h < horizon; h++) {
      printf("%s,%d", t.series_ids[s], h + 1);
      for (int f = 0; f < F; f++) printf(",%.9g", out[(int64_t)h * F + f]);
      printf("\n");
    }
  }
  free(out);
  csv_table_free(&t);
}

/* One --stdin series: steps separated by ';', features by ','; returns its
 * step count, the values into *values (grown as needed). */
static int64_t parse_series(char *line, int F, float **values, int64_t *cap, const char *where) {
  int64_t steps = 0;
  for (char *step = strtok(line, ";"); step; step = strtok(NULL, ";")) {
    if (strspn(step, " \t\r") == strlen(step)) continue;
    if ((steps + 1) * F > *cap) {
      *cap = (steps + 1) * F * 2;
      float *grown = realloc(*values, (size_t)*cap * sizeof **values);
      if (!grown) RNND_FAIL("out of memory reading a series");
      *values = grown;
    }
    char *p = step;
    for (int f = 0; f < F; f++) {
      char *end;
      errno = 0;
      double v = strtod(p, &end);
      if (end == p || errno == ERANGE || !isfinite(v))
        rnnd_input_error("%s: step %lld: feature %d is not a finite number", where, (long long)steps + 1, f + 1);
      while (*end == ' ' || *end == '\t' || *end == '\r') end++;
      if (f + 1 < F && *end != ',')
        rnnd_input_error("%s: step %lld has %d values but the model forecasts %d features", where,
                         (long long)steps + 1, f + 1, F);
      (*values)[steps * F + f] = (float)v;
      p = end + (f + 1 < F);
    }
    if (*p) rnnd_input_error("%s: step %lld has more than the model's %d features", where, (long long)steps + 1, F);
    steps++;
  }
  if (steps == 0) rnnd_input_error("%s: no values (steps are separated by ';', features by ',')", where);
  return steps;
}

static void forecast_stdin(rnnd_runner *r, int horizon) {
  const int F = r->meta.n_features;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  float *values = NULL, *out = RNND_ALLOC(float, (int64_t)horizon * F, "forecast");
  int64_t values_cap = 0;
  for (long number = 1; (len = getline(&line, &cap, stdin)) >= 0; number++) {
    if (len > 0 && line[len - 1] == '\n') line[len - 1] = '\0';
    char where[64];
    snprintf(where, sizeof where, "stdin line %ld", number);
    int64_t steps = parse_series(line, F, &values, &values_cap, where);
    forecast(r, values, steps, horizon, out);
    for (int h = 0; h < horizon; h++)
      for (int f = 0; f < F; f++) printf("%.9g%s", out[(int64_t)h * F + f], f + 1 < F ? "," : h + 1 < horizon ? ";" : "\n");
    fflush(stdout);
  }
  free(line);
  free(values);
  free(out);
}

/* --- the verb ----------------------------------------------------------------- */

static void classify_input(rnnd_runner *r, const rnnd_infer_options *o) {
  if (o->from_stdin) {
    classify_stream(r, stdin, "stdin", 1);
    return;
  }
  FILE *in = fopen(o->input, "rb");
  if (!in) rnnd_input_error("%s: cannot open (%s)", o->input, strerror(errno));
  classify_stream(r, in, o->input, 0);
  fclose(in);
}

int infer_predict(const rnnd_infer_options *o) {
  if (!o->from_stdin && !o->input) rnnd_input_error("predict: --input FILE or --stdin is required (see --help)");
  if (o->from_stdin && o->input) rnnd_input_error("--input and --stdin exclude each other");
  if (o->horizon < 1) rnnd_input_error("--horizon: %d steps; a forecast needs at least 1", o->horizon);
  rnnd_runner r;
  runner_open(&r, o->checkpoint, o->vocab_from, "predict", (1u << RNND_TASK_CLASSIFY) | (1u << RNND_TASK_REGRESS),
              o->threads);
  if (r.layout.shape.task == RNND_TASK_CLASSIFY) {
    classify_input(&r, o);
  } else {
    if (!r.carries)
      rnnd_input_error("%s: a bidirectional forecaster sees the future; forecasting needs a unidirectional model",
                       o->checkpoint);
    if (o->from_stdin) forecast_stdin(&r, o->horizon);
    else forecast_file(&r, o->input, o->horizon);
  }
  runner_close(&r);
  return 0;
}
