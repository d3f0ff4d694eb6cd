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
#include "rnnd/csv_table.h"
#include "rnnd/prep.h"

#define SERIES_FORMAT "rnn_dist-series"

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
  for (int i = 0; i < n_files; i++) csv_table_read(&tables[i], paths[i]);
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
    csv_table_free(&tables[i]);
  }
  free(mean);
  free(std);
}
