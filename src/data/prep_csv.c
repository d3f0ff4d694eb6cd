/* prep_csv.c — rnn_prep --csv: CSV time series into rnn_dist-series data
 * sets (docs/formats.md) for model.task = regress.
 *
 * A file has a header line of column names, then one row per time step.
 * Every column is a real-valued feature, except an optional `series_id`
 * column: consecutive rows with the same id form one series (a new id
 * starts the next); without it the whole file is one series. Per-feature
 * mean and standard deviation come from the training file and are stored
 * in every split, which the trainer normalises with. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep_writer.h"
#include "rnnd/common.h"
#include "rnnd/prep.h"

#define SERIES_FORMAT "rnn_dist-series"
#define SERIES_COLUMN "series_id"

typedef struct {
  const char *path;
  char **names;       /* feature columns, in file order */
  int n_features;
  int n_columns;      /* features + the series_id column if present */
  int series_column;  /* -1: none */
  float *values;      /* [rows, n_features] */
  int64_t rows, cap_rows;
  int64_t *offsets;   /* [n_series + 1] */
  int64_t n_series, cap_series;
} csv_table;

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
    if (!strcmp(fields[i], SERIES_COLUMN)) {
      if (t->series_column >= 0) rnnd_input_error("%s:%ld: two %s columns", t->path, line_no, SERIES_COLUMN);
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

static void start_series(csv_table *t) {
  if (t->n_series + 2 > t->cap_series) t->offsets = grow(t->offsets, &t->cap_series, sizeof *t->offsets, "offsets");
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
  if (t->n_series == 0 || strcmp(id, previous_id) != 0) start_series(t);
  snprintf(previous_id, id_size, "%s", id);
  t->rows++;
}

static void read_csv(csv_table *t, const char *path) {
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

static void free_csv(csv_table *t) {
  for (int i = 0; i < t->n_features; i++) free(t->names[i]);
  free(t->names);
  free(t->values);
  free(t->offsets);
}

/* Valid and test must have the training file's features, in its order. */
static void check_same_columns(const csv_table *train, const csv_table *other) {
  if (other->n_features != train->n_features)
    rnnd_input_error("%s: %d feature columns, but %s has %d", other->path, other->n_features, train->path,
                     train->n_features);
  for (int i = 0; i < train->n_features; i++)
    if (strcmp(train->names[i], other->names[i]))
      rnnd_input_error("%s: feature column %d is '%s', but in %s it is '%s'", other->path, i + 1, other->names[i],
                       train->path, train->names[i]);
}

/* Per-feature mean and (population) standard deviation of the training rows. */
static void feature_moments(const csv_table *t, float *mean, float *std) {
  for (int f = 0; f < t->n_features; f++) {
    double sum = 0.0, sq = 0.0;
    for (int64_t r = 0; r < t->rows; r++) sum += t->values[r * t->n_features + f];
    double m = sum / (double)t->rows;
    for (int64_t r = 0; r < t->rows; r++) {
      double d = t->values[r * t->n_features + f] - m;
      sq += d * d;
    }
    mean[f] = (float)m;
    std[f] = (float)sqrt(sq / (double)t->rows);
    if (!(std[f] > 0.0f))
      rnnd_input_error("%s: column '%s' is constant in the training rows (nothing to normalise by)", t->path,
                       t->names[f]);
  }
}

static void write_values(h5_writer *w, const csv_table *t) {
  hsize_t dims[2] = {(hsize_t)t->rows, (hsize_t)t->n_features};
  hsize_t chunk[2] = {dims[0] < 4096 ? dims[0] : 4096, dims[1]};
  hid_t space = H5Screate_simple(2, dims, NULL);
  WCHECK(w, space, "cannot create the dataspace of /values");
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  WCHECK(w, dcpl, "cannot create the properties of /values");
  WCHECK(w, H5Pset_chunk(dcpl, 2, chunk), "cannot set chunking of /values");
  WCHECK(w, H5Pset_deflate(dcpl, 4), "cannot set compression of /values");
  hid_t dset = H5Dcreate2(w->file, "values", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  WCHECK(w, dset, "cannot create dataset /values");
  WCHECK(w, H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->values), "cannot write /values");
  WCHECK(w, H5Dclose(dset), "cannot close /values");
  WCHECK(w, H5Pclose(dcpl), "cannot close the properties of /values");
  WCHECK(w, H5Sclose(space), "cannot close the dataspace of /values");
}

static void write_series_file(const char *dir, const char *name, const csv_table *t, const float *mean,
                              const float *std) {
  h5_writer w;
  writer_open(&w, dir, name);
  const char *format = SERIES_FORMAT;
  hid_t type = utf8_string_type(&w);
  write_attribute(&w, "format", type, type, &format);
  WCHECK(&w, H5Tclose(type), "cannot close a string type");
  write_int_attribute(&w, "format_version", 1);
  write_int_attribute(&w, "n_features", t->n_features);
  write_values(&w, t);
  write_vector(&w, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, t->offsets, (hsize_t)t->n_series + 1);
  write_vector(&w, "mean", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, mean, (hsize_t)t->n_features);
  write_vector(&w, "std", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, std, (hsize_t)t->n_features);
  write_strings(&w, "feature_names", t->names, t->n_features);
  writer_commit(&w);
}

void prep_csv_run(const rnnd_prep_options *opt) {
  if (H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0) RNND_FAIL("cannot silence HDF5 errors");
  const char *paths[3] = {opt->train, opt->valid, opt->test};
  const char *names[3] = {"train.h5", "valid.h5", "test.h5"};
  int n_files = opt->test ? 3 : 2;
  csv_table tables[3];
  /* Read and check everything before writing anything. */
  for (int i = 0; i < n_files; i++) read_csv(&tables[i], paths[i]);
  for (int i = 1; i < n_files; i++) check_same_columns(&tables[0], &tables[i]);
  float *mean = RNND_ALLOC(float, tables[0].n_features, "means"), *std = RNND_ALLOC(float, tables[0].n_features, "std");
  feature_moments(&tables[0], mean, std);
  make_directories(opt->out_dir);
  for (int i = 0; i < n_files; i++) write_series_file(opt->out_dir, names[i], &tables[i], mean, std);
  printf("features: %d (", tables[0].n_features);
  for (int f = 0; f < tables[0].n_features; f++)
    printf("%s%s mean %.6g std %.6g", f ? ", " : "", tables[0].names[f], mean[f], std[f]);
  printf(") from %s\n", opt->train);
  for (int i = 0; i < n_files; i++) {
    printf("%s/%s: %lld series, %lld steps\n", opt->out_dir, names[i], (long long)tables[i].n_series,
           (long long)tables[i].rows);
    free_csv(&tables[i]);
  }
  free(mean);
  free(std);
}
