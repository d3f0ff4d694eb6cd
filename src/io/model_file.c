/* model_file.c — HDF5 model file read/write (model_file.h). */
#define _POSIX_C_SOURCE 200809L
#include "rnnd/model_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rnnd/common.h"
#include "rnnd/h5util.h"

/* checksum: one chunk of at most 16 Mi values a dataset, with HDF5's
 * Fletcher32 filter, so a flipped byte fails the read. */
void model_file_write_view(const char *path, hid_t group, const rnnd_param_view *v, const float *data, int checksum) {
  hsize_t dims[2] = {(hsize_t)v->rows, (hsize_t)v->cols};
  hid_t space = H5Screate_simple(v->ndim, dims, NULL);
  hid_t plist = H5Pcreate(H5P_DATASET_CREATE);
  if (checksum) {
    hsize_t chunk[2] = {dims[0], dims[1]};
    while (chunk[0] > 1 && chunk[0] * (v->ndim == 2 ? chunk[1] : 1) > (1u << 24)) chunk[0] = (chunk[0] + 1) / 2;
    h5_check(H5Pset_chunk(plist, v->ndim, chunk), path, "cannot set chunking");
    h5_check(H5Pset_fletcher32(plist), path, "cannot set the Fletcher32 checksum");
  }
  hid_t set = h5_check(H5Dcreate2(group, v->name, H5T_IEEE_F32LE, space, H5P_DEFAULT, plist, H5P_DEFAULT), path,
                       "cannot create model dataset");
  h5_check(H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path, "cannot write model dataset");
  H5Dclose(set);
  H5Pclose(plist);
  H5Sclose(space);
}

void model_file_write_tensors(const char *path, hid_t group, const rnnd_layout *layout, const float *flat,
                              int checksum) {
  for (int i = 0; i < layout->n_views; i++)
    model_file_write_view(path, group, &layout->views[i], flat + layout->views[i].offset, checksum);
}

static void write_shape_attrs(const char *path, hid_t group, const rnnd_model_shape *s) {
  h5_write_string_attr(path, group, "cell", model_cell_name(s->cell));
  h5_write_int_attr(path, group, "layers", s->layers);
  h5_write_int_attr(path, group, "embed", s->embed);
  h5_write_int_attr(path, group, "hidden", s->hidden);
  h5_write_int_attr(path, group, "vocab_size", s->vocab_size);
  h5_write_int_attr(path, group, "bidirectional", s->directions == 2);
  h5_write_int_attr(path, group, "tie_weights", s->tie_weights);
  h5_write_string_attr(path, group, "decoder", s->decoder == RNND_DECODER_ADAPTIVE ? "adaptive" : "softmax");
  h5_write_string_attr(path, group, "task", model_task_name(s->task));
  if (s->task == RNND_TASK_CLASSIFY) h5_write_int_attr(path, group, "n_classes", s->n_classes);
  if (s->task == RNND_TASK_REGRESS) h5_write_int_attr(path, group, "n_features", s->n_features);
  if (s->decoder == RNND_DECODER_ADAPTIVE) {
    char cutoffs[RNND_MAX_CLUSTERS * 12] = "", hidden[RNND_MAX_CLUSTERS * 12] = "";
    for (int i = 0; i < s->n_clusters; i++) {
      snprintf(cutoffs + strlen(cutoffs), sizeof cutoffs - strlen(cutoffs), "%s%d", i ? "," : "", s->cutoffs[i]);
      snprintf(hidden + strlen(hidden), sizeof hidden - strlen(hidden), "%s%d", i ? "," : "", s->tail_hidden[i]);
    }
    h5_write_string_attr(path, group, "cutoffs", cutoffs);
    h5_write_string_attr(path, group, "tail_hidden", hidden);
  }
}

/* task and n_classes (absent in files of language models written before them). */
static void read_task(const char *path, hid_t group, rnnd_model_shape *s) {
  s->task = RNND_TASK_LM;
  s->n_classes = 0;
  s->n_features = 0;
  if (!h5_has_attr(group, "task")) return;
  char task[32];
  h5_read_string_attr(path, group, "/model", "task", task, sizeof task);
  if (!strcmp(task, "lm")) return;
  if (!strcmp(task, "regress")) {
    s->task = RNND_TASK_REGRESS;
    s->n_features = (int)h5_read_int_attr(path, group, "/model", "n_features");
    if (s->n_features < 1 || s->n_features > (1 << 20))
      rnnd_input_error("%s: /model n_features = %d is out of range", path, s->n_features);
    return;
  }
  if (strcmp(task, "classify"))
    rnnd_input_error("%s: /model task = '%s' is not lm, classify or regress", path, task);
  s->task = RNND_TASK_CLASSIFY;
  s->n_classes = (int)h5_read_int_attr(path, group, "/model", "n_classes");
  if (s->n_classes < 1 || s->n_classes > (1 << 24))
    rnnd_input_error("%s: /model n_classes = %d is out of range", path, s->n_classes);
}

/* The adaptive decoder's attributes (absent in files of a full softmax). */
static void read_decoder(const char *path, hid_t group, rnnd_model_shape *s) {
  s->decoder = RNND_DECODER_SOFTMAX;
  s->n_clusters = 0;
  if (!h5_has_attr(group, "decoder")) return;
  char kind[32], cutoffs[256], hidden[256];
  h5_read_string_attr(path, group, "/model", "decoder", kind, sizeof kind);
  if (!strcmp(kind, "softmax")) return;
  if (strcmp(kind, "adaptive")) rnnd_input_error("%s: /model decoder = '%s' is not softmax or adaptive", path, kind);
  h5_read_string_attr(path, group, "/model", "cutoffs", cutoffs, sizeof cutoffs);
  h5_read_string_attr(path, group, "/model", "tail_hidden", hidden, sizeof hidden);
  const char *why = model_set_adaptive(s, cutoffs, 1.0);
  if (why) rnnd_input_error("%s: /model cutoffs = '%s': %s", path, cutoffs, why);
  const char *p = hidden;
  for (int i = 0; i < s->n_clusters; i++) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > (1 << 20) || (*end && *end != ','))
      rnnd_input_error("%s: /model tail_hidden = '%s' is not %d positive integers", path, hidden, s->n_clusters);
    s->tail_hidden[i] = (int)v;
    p = *end ? end + 1 : end;
  }
}

/* fsync so the rename below never publishes a file whose data is not on disk. */
void model_file_sync(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0 || fsync(fd) != 0) rnnd_input_error("%s: cannot sync (%s)", path, strerror(errno));
  close(fd);
}

void model_file_write(const char *path, const rnnd_layout *layout, const float *params, int max_len,
                      const rnnd_model_meta *meta) {
  h5_quiet();
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  rnnd_set_partial_output(tmp); /* an error exit (disk full) removes it */
  hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) rnnd_input_error("%s: cannot create model file (%s)", tmp, strerror(errno));
  h5_write_string_attr(tmp, file, "format", RNND_MODEL_FORMAT);
  h5_write_int_attr(tmp, file, "format_version", RNND_MODEL_FORMAT_VERSION);
  h5_write_int_attr(tmp, file, "max_len", max_len);
  if (meta) model_meta_write(tmp, file, meta);
  hid_t group = h5_check(H5Gcreate2(file, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), tmp,
                         "cannot create /model");
  write_shape_attrs(tmp, group, &layout->shape);
  model_file_write_tensors(tmp, group, layout, params, 0);
  H5Gclose(group);
  if (H5Fclose(file) < 0) {
    unlink(tmp);
    rnnd_input_error("%s: cannot write model file (disk full?)", tmp);
  }
  model_file_sync(tmp);
  if (rename(tmp, path) != 0) {
    unlink(tmp);
    rnnd_input_error("%s: cannot rename model file into place (%s)", path, strerror(errno));
  }
  rnnd_set_partial_output(NULL);
}

static int read_cell(const char *path, hid_t group) {
  char cell[32];
  h5_read_string_attr(path, group, "/model", "cell", cell, sizeof cell);
  if (!strcmp(cell, "gru")) return RNND_CELL_GRU;
  if (!strcmp(cell, "lstm")) return RNND_CELL_LSTM;
  rnnd_input_error("%s: /model attribute cell = '%s' (expected gru or lstm)", path, cell);
}

static int read_bounded(const char *path, hid_t group, const char *name, int64_t lo, int64_t hi) {
  int64_t v = h5_read_int_attr(path, group, "/model", name);
  if (v < lo || v > hi)
    rnnd_input_error("%s: /model attribute %s = %lld is out of range [%lld, %lld]", path, name, (long long)v,
                     (long long)lo, (long long)hi);
  return (int)v;
}

static hid_t open_model_group(const char *path, hid_t file) {
  if (h5_has_attr(file, "format_version")) {
    int64_t version = h5_read_int_attr(path, file, "/", "format_version");
    if (version > RNND_MODEL_FORMAT_VERSION)
      rnnd_input_error("%s: model file format_version %lld is newer than this rnn_dist reads (%d)", path,
                       (long long)version, RNND_MODEL_FORMAT_VERSION);
  }
  if (H5Lexists(file, "model", H5P_DEFAULT) <= 0) rnnd_input_error("%s: missing group /model (not a model file)", path);
  return h5_check(H5Gopen2(file, "model", H5P_DEFAULT), path, "cannot open /model");
}

void model_file_read_shape(const char *path, rnnd_model_shape *s, int *max_len) {
  hid_t file = h5_open_read(path);
  hid_t group = open_model_group(path, file);
  s->cell = read_cell(path, group);
  s->layers = read_bounded(path, group, "layers", 1, RNND_MAX_LAYERS);
  s->embed = read_bounded(path, group, "embed", 1, 1 << 20);
  s->hidden = read_bounded(path, group, "hidden", 1, 1 << 20);
  s->vocab_size = read_bounded(path, group, "vocab_size", 0, 1 << 30); /* 0: a forecaster (checked below) */
  s->directions = read_bounded(path, group, "bidirectional", 0, 1) + 1;
  s->tie_weights = read_bounded(path, group, "tie_weights", 0, 1);
  if (s->tie_weights && s->embed != s->hidden * s->directions)
    rnnd_input_error("%s: tied model needs embed = hidden x directions", path);
  read_decoder(path, group, s);
  read_task(path, group, s);
  if (s->vocab_size == 0 && s->task != RNND_TASK_REGRESS)
    rnnd_input_error("%s: /model vocab_size = 0 (only a regress model has no vocabulary)", path);
  *max_len = h5_has_attr(file, "max_len") ? (int)h5_read_int_attr(path, file, "/", "max_len") : 0;
  H5Gclose(group);
  H5Fclose(file);
}

void model_file_check_shape(const char *path, const rnnd_model_shape *want) {
  rnnd_model_shape got;
  int max_len;
  model_file_read_shape(path, &got, &max_len);
  const char *names[] = {"cell",          "layers",      "embed",
                         "hidden",        "vocab_size",  "bidirectional",
                         "tie_weights",   "task (0 lm, 1 classify, 2 regress)", "n_classes", "n_features"};
  int have[] = {got.cell,        got.layers,     got.embed,          got.hidden,    got.vocab_size,
                got.directions - 1, got.tie_weights, got.task,       got.n_classes, got.n_features};
  int need[] = {want->cell,           want->layers,      want->embed, want->hidden,    want->vocab_size,
                want->directions - 1, want->tie_weights, want->task,  want->n_classes, want->n_features};
  for (int i = 0; i < 10; i++)
    if (have[i] != need[i])
      rnnd_input_error("%s: model has %s = %d but %d is expected (config or data set of another shape)", path,
                       names[i], have[i], need[i]);
  int same = got.decoder == want->decoder && got.n_clusters == want->n_clusters;
  for (int i = 0; same && i < got.n_clusters; i++)
    same = got.cutoffs[i] == want->cutoffs[i] && got.tail_hidden[i] == want->tail_hidden[i];
  if (!same)
    rnnd_input_error("%s: model's decoder (%s, %d tail clusters) differs from the configured one (%s, %d; see "
                     "model.decoder, model.cutoffs, model.div_value)", path,
                     got.decoder == RNND_DECODER_ADAPTIVE ? "adaptive" : "softmax", got.n_clusters,
                     want->decoder == RNND_DECODER_ADAPTIVE ? "adaptive" : "softmax", want->n_clusters);
}

static void format_shape(char *buf, size_t size, int ndim, long long rows, long long cols) {
  if (ndim == 1) snprintf(buf, size, "[%lld]", rows);
  else if (ndim == 2) snprintf(buf, size, "[%lld, %lld]", rows, cols);
  else snprintf(buf, size, "(rank %d)", ndim);
}

/* The dataset's shape text, or "missing". */
static void stored_shape(hid_t group, const char *name, char *buf, size_t size) {
  if (H5Lexists(group, name, H5P_DEFAULT) <= 0) {
    snprintf(buf, size, "missing");
    return;
  }
  hid_t set = H5Dopen2(group, name, H5P_DEFAULT);
  hid_t space = H5Dget_space(set);
  hsize_t dims[2] = {0, 0};
  int ndim = H5Sget_simple_extent_ndims(space);
  if (ndim >= 1 && ndim <= 2) H5Sget_simple_extent_dims(space, dims, NULL);
  format_shape(buf, size, ndim, (long long)dims[0], (long long)dims[1]);
  H5Sclose(space);
  H5Dclose(set);
}

int model_file_list_mismatches(hid_t group, const rnnd_layout *layout, char *buf, size_t size) {
  int n = 0;
  buf[0] = '\0';
  for (int i = 0; i < layout->n_views; i++) {
    const rnnd_param_view *v = &layout->views[i];
    char got[64], want[64];
    stored_shape(group, v->name, got, sizeof got);
    format_shape(want, sizeof want, v->ndim, (long long)v->rows, (long long)v->cols);
    if (!strcmp(got, want)) continue;
    size_t used = strlen(buf);
    snprintf(buf + used, size - used, "%s%s %s (expected %s)", n ? ", " : "", v->name, got, want);
    n++;
  }
  return n;
}

void model_file_read_view(const char *path, hid_t group, const char *group_name, const rnnd_param_view *v,
                          float *data) {
  if (H5Lexists(group, v->name, H5P_DEFAULT) <= 0)
    rnnd_input_error("%s: missing dataset %s/%s", path, group_name, v->name);
  hid_t set = h5_check(H5Dopen2(group, v->name, H5P_DEFAULT), path, "cannot open model dataset");
  hid_t space = H5Dget_space(set);
  hsize_t dims[2] = {0, 1};
  int ndim = H5Sget_simple_extent_ndims(space);
  if (ndim >= 1 && ndim <= 2) H5Sget_simple_extent_dims(space, dims, NULL);
  if (ndim != v->ndim || dims[0] != (hsize_t)v->rows || (ndim == 2 && dims[1] != (hsize_t)v->cols)) {
    char got[64], want[64];
    format_shape(got, sizeof got, ndim, (long long)dims[0], (long long)dims[1]);
    format_shape(want, sizeof want, v->ndim, (long long)v->rows, (long long)v->cols);
    rnnd_input_error("%s: %s/%s has shape %s but %s is expected", path, group_name, v->name, got, want);
  }
  char what[256];
  snprintf(what, sizeof what, "cannot read %s/%s (corrupt or truncated?)", group_name, v->name);
  h5_check(H5Dread(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path, what);
  H5Sclose(space);
  H5Dclose(set);
}

void model_file_load_params(const char *path, const rnnd_layout *layout, float *params) {
  rnnd_reading_begin(path);
  model_file_check_shape(path, &layout->shape);
  hid_t file = h5_open_read(path);
  hid_t group = open_model_group(path, file);
  model_file_read_tensors(path, group, "/model", layout, params);
  H5Gclose(group);
  H5Fclose(file);
  rnnd_reading_end();
}

void model_file_load_inference_params(const char *path, const rnnd_layout *layout, float *params) {
  model_file_load_params(path, layout, params);
  rnnd_reading_begin(path);
  hid_t file = h5_open_read(path);
  if (H5Lexists(file, "optimizer", H5P_DEFAULT) > 0 && H5Lexists(file, "optimizer/average", H5P_DEFAULT) > 0) {
    hid_t group = h5_check(H5Gopen2(file, "optimizer/average", H5P_DEFAULT), path, "cannot open /optimizer/average");
    model_file_read_tensors(path, group, "/optimizer/average", layout, params);
    H5Gclose(group);
  }
  H5Fclose(file);
  rnnd_reading_end();
}

void model_file_read_tensors(const char *path, hid_t group, const char *group_name, const rnnd_layout *layout,
                             float *flat) {
  for (int i = 0; i < layout->n_views; i++)
    if (!layout->views[i].alias) model_file_read_view(path, group, group_name, &layout->views[i], flat + layout->views[i].offset);
}

void model_file_write_shape(const char *path, hid_t group, const rnnd_model_shape *s) {
  write_shape_attrs(path, group, s);
}
