/* dataset.c — dataset_load()/dataset_free(): reads and validates a data set
 * written by rnn_prep (format in docs/formats.md). Every problem with the
 * file is reported as bad input naming the file and the dataset, attribute or
 * index, because the trainer trusts the arrays without further checks. */
#include "rnnd/dataset.h"

#include <errno.h>
#include <math.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rnnd/common.h"
#include "rnnd/h5util.h"
#include "rnnd/token_store.h"

#define FORMAT_NAME "rnn_dist-lm"
#define SERIES_FORMAT_NAME "rnn_dist-series"
#define FORMAT_VERSION 1


/* ---- opening ---------------------------------------------------------- */

static hid_t open_file(const char *path) {
  /* HDF5 does not say why an open failed, so ask the OS first. */
  FILE *probe = fopen(path, "rb");
  if (!probe) h5_fail_at(path, "cannot open (%s)", strerror(errno));
  fclose(probe);
  /* The user gets our one error line, not HDF5's error stack. */
  H5_CHECK_AT(H5Eset_auto2(H5E_DEFAULT, NULL, NULL), path, "cannot configure HDF5 error reporting");
#if H5_VERSION_GE(1, 12, 0)
  htri_t is_hdf5 = H5Fis_accessible(path, H5P_DEFAULT);
#else
  htri_t is_hdf5 = H5Fis_hdf5(path);
#endif
  if (is_hdf5 <= 0) h5_fail_at(path, "not an HDF5 file");
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) {
    /* HDF5's signature is there but the file does not open: most often it
     * ends before the end HDF5 recorded (a copy cut short, a full disk) */
    struct stat st;
    long long bytes = stat(path, &st) == 0 ? (long long)st.st_size : -1;
    h5_fail_at(path, "cannot open as HDF5 file (%lld bytes: truncated or damaged?)", bytes);
  }
  return file;
}

/* ---- attributes ------------------------------------------------------- */

static hid_t open_attribute(hid_t file, const char *path, const char *name) {
  htri_t exists = H5Aexists(file, name);
  H5_CHECK_AT(exists, path, "cannot look up attribute %s", name);
  if (!exists) h5_fail_at(path, "missing root attribute %s", name);
  hid_t attr = H5Aopen(file, name, H5P_DEFAULT);
  H5_CHECK_AT(attr, path, "cannot open attribute %s", name);
  hid_t space = H5Aget_space(attr);
  H5_CHECK_AT(space, path, "cannot read the shape of attribute %s", name);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  H5_CHECK_AT(n, path, "cannot read the shape of attribute %s", name);
  H5_CHECK_AT(H5Sclose(space), path, "cannot close the shape of attribute %s", name);
  if (n != 1) h5_fail_at(path, "attribute %s must be a single value", name);
  return attr;
}

static int32_t read_int_attribute(hid_t file, const char *path, const char *name) {
  hid_t attr = open_attribute(file, path, name);
  hid_t type = H5Aget_type(attr);
  H5_CHECK_AT(type, path, "cannot read the type of attribute %s", name);
  H5T_class_t cls = H5Tget_class(type);
  H5_CHECK_AT(cls, path, "cannot read the type of attribute %s", name);
  H5_CHECK_AT(H5Tclose(type), path, "cannot close the type of attribute %s", name);
  if (cls != H5T_INTEGER) h5_fail_at(path, "attribute %s must be an integer", name);
  /* Read wide so that an out-of-range value is reported, not clamped. */
  long long value = 0;
  H5_CHECK_AT(H5Aread(attr, H5T_NATIVE_LLONG, &value), path, "cannot read attribute %s", name);
  H5_CHECK_AT(H5Aclose(attr), path, "cannot close attribute %s", name);
  if (value < INT32_MIN || value > INT32_MAX)
    h5_fail_at(path, "attribute %s = %lld does not fit in 32 bits", name, value);
  return (int32_t)value;
}

/* Copies the string attribute NAME (fixed or variable length) into BUF. */
static void read_string_attribute(hid_t file, const char *path, const char *name, char *buf,
                                  size_t size) {
  char what[64];
  snprintf(what, sizeof what, "attribute %s", name);
  hid_t attr = open_attribute(file, path, name);
  hid_t type = H5Aget_type(attr);
  H5_CHECK_AT(type, path, "cannot read the type of %s", what);
  H5T_class_t cls = H5Tget_class(type);
  H5_CHECK_AT(cls, path, "cannot read the type of %s", what);
  if (cls != H5T_STRING) h5_fail_at(path, "%s must be a string", what);
  size_t width = 0;
  hid_t mem = h5_string_memory_type(type, path, what, &width);
  if (width == 0) {
    char *value = NULL;
    H5_CHECK_AT(H5Aread(attr, mem, &value), path, "cannot read %s", what);
    snprintf(buf, size, "%s", value ? value : "");
    H5_CHECK_AT(H5free_memory(value), path, "cannot release %s", what);
  } else {
    char *value = rnnd_calloc(width, 1, "string attribute");
    H5_CHECK_AT(H5Aread(attr, mem, value), path, "cannot read %s", what);
    snprintf(buf, size, "%s", value);
    free(value);
  }
  H5_CHECK_AT(H5Tclose(mem), path, "cannot close the type of %s", what);
  H5_CHECK_AT(H5Tclose(type), path, "cannot close the type of %s", what);
  H5_CHECK_AT(H5Aclose(attr), path, "cannot close %s", what);
}

/* Returns 1 for a time-series file, 0 for a token data set. */
static int check_format(hid_t file, const char *path) {
  char name[64];
  read_string_attribute(file, path, "format", name, sizeof name);
  int series = strcmp(name, SERIES_FORMAT_NAME) == 0;
  if (!series && strcmp(name, FORMAT_NAME) != 0)
    h5_fail_at(path, "attribute format is \"%s\", expected \"%s\" or \"%s\"", name, FORMAT_NAME,
            SERIES_FORMAT_NAME);
  int32_t version = read_int_attribute(file, path, "format_version");
  if (version > FORMAT_VERSION)
    h5_fail_at(path, "format_version %d is newer than this program supports (%d)", (int)version,
            FORMAT_VERSION);
  if (version < 1) h5_fail_at(path, "format_version %d is invalid (must be 1)", (int)version);
  return series;
}

static void read_header(rnnd_dataset *ds, hid_t file) {
  const char *path = ds->path;
  ds->vocab_size = read_int_attribute(file, path, "vocab_size");
  ds->eos_id = read_int_attribute(file, path, "eos_id");
  ds->unk_id = read_int_attribute(file, path, "unk_id");
  if (ds->vocab_size <= 0) h5_fail_at(path, "vocab_size %d must be positive", (int)ds->vocab_size);
  if (ds->eos_id < 0 || ds->eos_id >= ds->vocab_size)
    h5_fail_at(path, "eos_id %d is outside [0, vocab_size %d)", (int)ds->eos_id, (int)ds->vocab_size);
  if (ds->unk_id < 0 || ds->unk_id >= ds->vocab_size)
    h5_fail_at(path, "unk_id %d is outside [0, vocab_size %d)", (int)ds->unk_id, (int)ds->vocab_size);
}

/* ---- arrays ----------------------------------------------------------- */

static void read_offsets(rnnd_dataset *ds, hid_t file) {
  hsize_t n = 0;
  hid_t dset = h5_open_vector(file, ds->path, "offsets", H5T_INTEGER, "integers", &n);
  if (n == 0) h5_fail_at(ds->path, "/offsets is empty (it needs n_sequences + 1 entries)");
  ds->n_sequences = (int64_t)n - 1;
  ds->offsets = RNND_ALLOC(int64_t, n, "data-set offsets");
  H5_CHECK_AT(H5Dread(dset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->offsets), ds->path,
          "cannot read /offsets");
  H5_CHECK_AT(H5Dclose(dset), ds->path, "cannot close /offsets");
}

/* on_disk: leave them in the file when token_store reads its layout. */
static void read_tokens(rnnd_dataset *ds, hid_t file, int on_disk) {
  hsize_t n = 0;
  hid_t dset = h5_open_vector(file, ds->path, "tokens", H5T_INTEGER, "integers", &n);
  ds->n_tokens = (int64_t)n;
  if (on_disk && (ds->store = token_store_open(ds->path, dset, ds->n_tokens, ds->vocab_size))) {
    H5_CHECK_AT(H5Dclose(dset), ds->path, "cannot close /tokens");
    return;
  }
  ds->tokens = RNND_ALLOC(int32_t, n, "data-set tokens");
  /* NATIVE_INT32 as memory type: HDF5 converts whatever integer type is stored
   * (values beyond 32 bits clamp and then fail the range check below). */
  if (n > 0)
    H5_CHECK_AT(H5Dread(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->tokens), ds->path,
            "cannot read /tokens");
  H5_CHECK_AT(H5Dclose(dset), ds->path, "cannot close /tokens");
}

/* Classification sets: /labels (one per sequence) and the n_classes
 * attribute; /label_names must name every class. */
static void read_labels(rnnd_dataset *ds, hid_t file) {
  if (H5Lexists(file, "labels", H5P_DEFAULT) <= 0) return;
  hsize_t n = 0, names = 0;
  ds->n_classes = read_int_attribute(file, ds->path, "n_classes");
  if (ds->n_classes <= 0) h5_fail_at(ds->path, "n_classes %d must be positive", (int)ds->n_classes);
  hid_t dset = h5_open_vector(file, ds->path, "labels", H5T_INTEGER, "integers", &n);
  if ((int64_t)n != ds->n_sequences)
    h5_fail_at(ds->path, "/labels has %llu entries but there are %lld sequences", (unsigned long long)n,
            (long long)ds->n_sequences);
  ds->labels = RNND_ALLOC(int32_t, n, "data-set labels");
  if (n > 0)
    H5_CHECK_AT(H5Dread(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->labels), ds->path,
            "cannot read /labels");
  H5_CHECK_AT(H5Dclose(dset), ds->path, "cannot close /labels");
  for (hsize_t i = 0; i < n; i++)
    if (ds->labels[i] < 0 || ds->labels[i] >= ds->n_classes)
      h5_fail_at(ds->path, "/labels[%llu] = %d is outside [0, n_classes %d)", (unsigned long long)i, (int)ds->labels[i],
              (int)ds->n_classes);
  dset = h5_open_vector(file, ds->path, "label_names", H5T_STRING, "strings", &names);
  H5_CHECK_AT(H5Dclose(dset), ds->path, "cannot close /label_names");
  if ((int64_t)names != ds->n_classes)
    h5_fail_at(ds->path, "/label_names has %llu entries but n_classes is %d", (unsigned long long)names,
            (int)ds->n_classes);
}

static void validate_offsets(const rnnd_dataset *ds) {
  const int64_t *off = ds->offsets;
  if (ds->n_sequences == 0) h5_fail_at(ds->path, "data set is empty (no sequences)");
  if (off[0] != 0) h5_fail_at(ds->path, "/offsets[0] must be 0 (it is %lld)", (long long)off[0]);
  for (int64_t i = 1; i <= ds->n_sequences; i++) {
    if (off[i] <= off[i - 1])
      h5_fail_at(ds->path,
              "/offsets[%lld] = %lld is not greater than /offsets[%lld] = %lld "
              "(sequences must be non-empty and offsets increasing)",
              (long long)i, (long long)off[i], (long long)(i - 1), (long long)off[i - 1]);
  }
  if (off[ds->n_sequences] != ds->n_tokens)
    h5_fail_at(ds->path, "last offset %lld != number of tokens %lld",
            (long long)off[ds->n_sequences], (long long)ds->n_tokens);
}

static void validate_tokens(const rnnd_dataset *ds) {
  for (int64_t i = 0; i < ds->n_tokens; i++) {
    int32_t t = ds->tokens[i];
    if (t < 0)
      h5_fail_at(ds->path, "/tokens[%lld] = %d is a negative token id", (long long)i, (int)t);
    if (t >= ds->vocab_size)
      h5_fail_at(ds->path, "/tokens[%lld] = %d is outside the vocabulary (vocab_size %d)",
              (long long)i, (int)t, (int)ds->vocab_size);
  }
}

/* ---- time series ------------------------------------------------------ */

/* /values [n_steps, n_features] float: the shape and every value checked. */
static void read_values(rnnd_dataset *ds, hid_t file) {
  const char *path = ds->path;
  if (H5Lexists(file, "values", H5P_DEFAULT) <= 0) h5_fail_at(path, "missing dataset /values");
  hid_t dset = H5Dopen2(file, "values", H5P_DEFAULT);
  H5_CHECK_AT(dset, path, "/values is not a dataset");
  hid_t space = H5Dget_space(dset);
  H5_CHECK_AT(space, path, "cannot read the shape of /values");
  hsize_t dims[2] = {0, 0};
  if (H5Sget_simple_extent_ndims(space) != 2) h5_fail_at(path, "/values must be 2-D [steps, features]");
  H5_CHECK_AT(H5Sget_simple_extent_dims(space, dims, NULL), path, "cannot read the shape of /values");
  H5_CHECK_AT(H5Sclose(space), path, "cannot close the shape of /values");
  if ((int64_t)dims[1] != ds->n_features)
    h5_fail_at(path, "/values has %llu columns but n_features is %d", (unsigned long long)dims[1], (int)ds->n_features);
  h5_check_plausible_length(dset, path, "values", dims[0] * dims[1]);
  ds->n_steps = (int64_t)dims[0];
  ds->values = RNND_ALLOC(float, dims[0] * dims[1], "series values");
  if (dims[0] > 0)
    H5_CHECK_AT(H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds->values), path, "cannot read /values");
  H5_CHECK_AT(H5Dclose(dset), path, "cannot close /values");
  for (int64_t i = 0; i < ds->n_steps * ds->n_features; i++)
    if (!isfinite(ds->values[i]))
      h5_fail_at(path, "/values[%lld, %lld] is not a finite number", (long long)(i / ds->n_features),
              (long long)(i % ds->n_features));
}

/* Series offsets over rows, then the pair space the trainer works in. */
static void make_pairs(rnnd_dataset *ds) {
  const int64_t *so = ds->series_offsets;
  if (so[0] != 0 || so[ds->n_sequences] != ds->n_steps)
    h5_fail_at(ds->path, "/offsets must run from 0 to the %lld rows of /values", (long long)ds->n_steps);
  ds->offsets = RNND_ALLOC(int64_t, ds->n_sequences + 1, "pair offsets");
  for (int64_t i = 0; i < ds->n_sequences; i++) {
    if (so[i + 1] - so[i] < 2)
      h5_fail_at(ds->path, "series %lld has %lld rows; forecasting needs at least 2", (long long)i,
              (long long)(so[i + 1] - so[i]));
    ds->offsets[i + 1] = ds->offsets[i] + so[i + 1] - so[i] - 1;
  }
  ds->n_tokens = ds->offsets[ds->n_sequences];
  ds->input_row = RNND_ALLOC(int64_t, ds->n_tokens, "pair rows");
  for (int64_t i = 0; i < ds->n_sequences; i++)
    for (int64_t p = ds->offsets[i]; p < ds->offsets[i + 1]; p++) ds->input_row[p] = p + i;
}

static void load_series(rnnd_dataset *ds, hid_t file) {
  ds->n_features = read_int_attribute(file, ds->path, "n_features");
  if (ds->n_features <= 0 || ds->n_features > (1 << 20))
    h5_fail_at(ds->path, "n_features %d is out of range", (int)ds->n_features);
  read_values(ds, file);
  read_offsets(ds, file);
  ds->series_offsets = ds->offsets;
  for (int64_t i = 0; i < ds->n_sequences; i++)
    if (ds->series_offsets[i + 1] < ds->series_offsets[i])
      h5_fail_at(ds->path, "/offsets[%lld] is smaller than /offsets[%lld]", (long long)i + 1, (long long)i);
  make_pairs(ds);
  ds->mean = h5_read_floats(ds->path, file, "mean", ds->n_features, "n_features");
  ds->std = h5_read_floats(ds->path, file, "std", ds->n_features, "n_features");
  for (int32_t f = 0; f < ds->n_features; f++)
    if (!(ds->std[f] > 0.0f) || !isfinite(ds->mean[f]) || !isfinite(ds->std[f]))
      h5_fail_at(ds->path, "/std[%d] = %g must be positive and /mean[%d] finite", (int)f, ds->std[f], (int)f);
}

static void load(rnnd_dataset *ds, const char *path, int load_vocab, int on_disk) {
  memset(ds, 0, sizeof *ds);
  ds->path = rnnd_strdup(path);
  rnnd_reading_begin(path);
  hid_t file = open_file(path);
  if (check_format(file, path)) {
    load_series(ds, file);
    H5_CHECK_AT(H5Fclose(file), path, "cannot close file");
    rnnd_reading_end();
    return;
  }
  read_header(ds, file);
  read_offsets(ds, file);
  read_tokens(ds, file, on_disk);
  validate_offsets(ds);
  if (ds->tokens) validate_tokens(ds); /* on disk: as each chunk is read */
  read_labels(ds, file);
  if (load_vocab) ds->vocab = h5_read_strings(path, file, "vocab", ds->vocab_size, "vocab_size");
  H5_CHECK_AT(H5Fclose(file), path, "cannot close file");
  rnnd_reading_end();
}

void dataset_load(rnnd_dataset *ds, const char *path, int load_vocab) { load(ds, path, load_vocab, 0); }

void dataset_open(rnnd_dataset *ds, const char *path, int load_vocab) { load(ds, path, load_vocab, 1); }

void dataset_read_tokens(const rnnd_dataset *ds, int64_t begin, int64_t count, int32_t *out) {
  if (ds->store) token_store_read(ds->store, begin, count, out);
  else memcpy(out, ds->tokens + begin, (size_t)count * sizeof *out);
}

void dataset_prefetch(const rnnd_dataset *ds, int64_t begin, int64_t count) {
  if (ds->store) token_store_prefetch(ds->store, begin, count);
}

size_t dataset_bytes(const rnnd_dataset *ds) {
  size_t bytes = (size_t)(ds->n_sequences + 1) * sizeof *ds->offsets;
  if (ds->tokens) bytes += (size_t)ds->n_tokens * sizeof *ds->tokens;
  if (ds->store) bytes += token_store_bytes(ds->store);
  if (ds->labels) bytes += (size_t)ds->n_sequences * sizeof *ds->labels;
  if (ds->values) bytes += (size_t)ds->n_steps * (size_t)ds->n_features * sizeof *ds->values;
  if (ds->input_row) bytes += (size_t)ds->n_tokens * sizeof *ds->input_row;
  return bytes;
}

void dataset_count_tokens(const rnnd_dataset *ds, int64_t *counts) {
  memset(counts, 0, (size_t)ds->vocab_size * sizeof *counts);
  enum { BLOCK = 1 << 16 };
  int32_t *block = RNND_ALLOC(int32_t, BLOCK, "token count block");
  for (int64_t at = 0; at < ds->n_tokens; at += BLOCK) {
    int64_t n = ds->n_tokens - at < BLOCK ? ds->n_tokens - at : BLOCK;
    dataset_read_tokens(ds, at, n, block);
    for (int64_t i = 0; i < n; i++) counts[block[i]]++;
  }
  free(block);
}

void dataset_free(rnnd_dataset *ds) {
  if (ds->vocab) {
    for (int32_t i = 0; i < ds->vocab_size; i++) free(ds->vocab[i]);
    free(ds->vocab);
  }
  free(ds->tokens);
  token_store_close(ds->store);
  if (ds->series_offsets != ds->offsets) free(ds->series_offsets);
  free(ds->offsets);
  free(ds->labels);
  free(ds->values);
  free(ds->input_row);
  free(ds->mean);
  free(ds->std);
  free(ds->path);
  memset(ds, 0, sizeof *ds);
}
