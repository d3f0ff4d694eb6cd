/* csv_table.c — CSV time series (csv_table.h). */
#define _POSIX_C_SOURCE 200809L
#include "rnnd/csv_table.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"



/* Splits LINE in place at commas; strips blanks and surrounding quotes. */
static int split_fields(char *line, char **fields, int max_fields) {
  int n = 0;
  for (char *p = line;; p++) {
    char *end = strchr(p, ',');
    if (end) *end = '\0';
    while (*p == ' ' || *p == '\t') p++;
    size_t len = strlen(p);
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t' || p[len - 1] == '\r')) p[--len] = '\0';
    if (len >= 2 && p[0] == '"' && p[len - 1] == '"') {
      p[len - 1] = '\0';
      p++;
    }
    if (n < max_fields) fields[n] = p;
    n++;
    if (!end) return n;
    p = end;
  }
}

static void read_header(csv_table *t, char *line, long line_no) {
  char *fields[4096];
  int n = split_fields(line, fields, 4096);
  if (n > 4096) rnnd_input_error("%s:%ld: more than 4096 columns", t->path, line_no);
  t->n_columns = n;
  t->series_column = -1;
  t->names = RNND_ALLOC(char *, n, "column names");
  for (int i = 0; i < n; i++) {
    if (!fields[i][0]) rnnd_input_error("%s:%ld: column %d has no name", t->path, line_no, i + 1);
    if (!strcmp(fields[i], RNND_CSV_SERIES_COLUMN)) {
      if (t->series_column >= 0) rnnd_input_error("%s:%ld: two %s columns", t->path, line_no, RNND_CSV_SERIES_COLUMN);
      t->series_column = i;
      continue;
    }
    t->names[t->n_features++] = rnnd_strdup(fields[i]);
  }
  if (t->n_features == 0) rnnd_input_error("%s:%ld: no feature columns", t->path, line_no);
}

static void *grow(void *p, int64_t *cap, size_t elem, const char *what) {
  *cap = *cap ? *cap * 2 : 1024;
  void *grown = realloc(p, (size_t)*cap * elem);
  if (!grown) RNND_FAIL("out of memory growing %s", what);
  return grown;
}

static void start_series(csv_table *t, const char *id) {
  if (t->n_series + 2 > t->cap_series) {
    int64_t cap = t->cap_series;
    t->offsets = grow(t->offsets, &t->cap_series, sizeof *t->offsets, "offsets");
    t->series_ids = grow(t->series_ids, &cap, sizeof *t->series_ids, "series ids");
  }
  t->series_ids[t->n_series] = rnnd_strdup(id);
  t->offsets[t->n_series++] = t->rows;
}

/* One data row: its features, and whether it starts a new series. */
static void read_row(csv_table *t, char *line, long line_no, char *previous_id, size_t id_size) {
  char *fields[4096];
  int n = split_fields(line, fields, 4096);
  if (n != t->n_columns)
    rnnd_input_error("%s:%ld: %d fields, but the header has %d columns", t->path, line_no, n, t->n_columns);
  if (t->rows == t->cap_rows)
    t->values = grow(t->values, &t->cap_rows, (size_t)t->n_features * sizeof *t->values, "values");
  float *row = t->values + t->rows * t->n_features;
  int f = 0;
  for (int i = 0; i < n; i++) {
    if (i == t->series_column) continue;
    char *end;
    errno = 0;
    double v = strtod(fields[i], &end);
    if (end == fields[i] || *end || errno == ERANGE || !isfinite(v) || fabs(v) > 3.0e38)
      rnnd_input_error("%s:%ld: column '%s': '%s' is not a finite number", t->path, line_no, t->names[f], fields[i]);
    row[f++] = (float)v;
  }
  const char *id = t->series_column >= 0 ? fields[t->series_column] : "";
  if (t->n_series == 0 || strcmp(id, previous_id) != 0) start_series(t, id);
  snprintf(previous_id, id_size, "%s", id);
  t->rows++;
}

void csv_table_read(csv_table *t, const char *path) {
  memset(t, 0, sizeof *t);
  t->path = path;
  FILE *f = fopen(path, "rb");
  if (!f) rnnd_input_error("%s: cannot open (%s)", path, strerror(errno));
  char *line = NULL, previous_id[1024] = "";
  size_t cap = 0;
  long line_no = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) >= 0) {
    line_no++;
    if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
    if (strspn(line, " \t\r") == (size_t)len) continue; /* blank */
    if (!t->names) read_header(t, line, line_no);
    else read_row(t, line, line_no, previous_id, sizeof previous_id);
  }
  if (ferror(f)) rnnd_input_error("%s: cannot read (%s)", path, strerror(errno));
  free(line);
  fclose(f);
  if (!t->names) rnnd_input_error("%s: empty (no header line)", path);
  if (t->rows == 0) rnnd_input_error("%s: no data rows", path);
  t->offsets[t->n_series] = t->rows;
}

void csv_table_free(csv_table *t) {
  for (int i = 0; i < t->n_features; i++) free(t->names[i]);
  free(t->names);
  free(t->values);
  free(t->offsets);
  for (int64_t i = 0; i < t->n_series; i++) free(t->series_ids[i]);
  free(t->series_ids);
}

