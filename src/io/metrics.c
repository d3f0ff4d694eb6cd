/* metrics.c — HDF5 metrics series (metrics.h). */
#include "rnnd/metrics.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/h5util.h"

typedef enum { COLUMN_INT64, COLUMN_INT32, COLUMN_DOUBLE } column_type;

typedef struct {
  const char *name;
  size_t offset;
  column_type type;
} column;

#define STEP_COLUMN(field, type) {#field, offsetof(rnnd_step_metrics, field), type}
static const column step_columns[] = {
    STEP_COLUMN(step, COLUMN_INT64),         STEP_COLUMN(epoch, COLUMN_INT64),
    STEP_COLUMN(loss, COLUMN_DOUBLE),        STEP_COLUMN(tokens, COLUMN_INT64),
    STEP_COLUMN(lr, COLUMN_DOUBLE),          STEP_COLUMN(grad_norm, COLUMN_DOUBLE),
    STEP_COLUMN(imbalance, COLUMN_DOUBLE),   STEP_COLUMN(compute_s, COLUMN_DOUBLE),
    STEP_COLUMN(comm_s, COLUMN_DOUBLE),      STEP_COLUMN(elapsed_s, COLUMN_DOUBLE),
    STEP_COLUMN(loss_scale, COLUMN_DOUBLE),  STEP_COLUMN(skipped, COLUMN_INT32),
    STEP_COLUMN(growth_tracker, COLUMN_INT64), STEP_COLUMN(underflow, COLUMN_DOUBLE),
    STEP_COLUMN(ppl, COLUMN_DOUBLE),         STEP_COLUMN(tokens_per_s, COLUMN_DOUBLE),
    STEP_COLUMN(param_norm, COLUMN_DOUBLE),  STEP_COLUMN(update_ratio, COLUMN_DOUBLE),
    STEP_COLUMN(memory_bytes, COLUMN_INT64), STEP_COLUMN(accuracy, COLUMN_DOUBLE),
    STEP_COLUMN(rmse, COLUMN_DOUBLE),
};
#define EVAL_COLUMN(field, type) {#field, offsetof(rnnd_eval_metrics, field), type}
static const column eval_columns[] = {EVAL_COLUMN(step, COLUMN_INT64), EVAL_COLUMN(loss, COLUMN_DOUBLE),
                                      EVAL_COLUMN(ppl, COLUMN_DOUBLE), EVAL_COLUMN(tokens, COLUMN_INT64),
                                      EVAL_COLUMN(accuracy, COLUMN_DOUBLE), EVAL_COLUMN(rmse, COLUMN_DOUBLE),
                                      EVAL_COLUMN(mae, COLUMN_DOUBLE)};
#define N_STEP_COLUMNS (sizeof step_columns / sizeof step_columns[0])
#define N_EVAL_COLUMNS (sizeof eval_columns / sizeof eval_columns[0])

static hid_t memory_type(column_type t) {
  return t == COLUMN_INT64 ? H5T_NATIVE_INT64 : t == COLUMN_INT32 ? H5T_NATIVE_INT32 : H5T_NATIVE_DOUBLE;
}

static size_t column_size(column_type t) { return t == COLUMN_INT32 ? 4 : 8; }

/* An empty series that grows without bound, in chunks of 1024 values. */
static void create_series(const char *path, hid_t group, const column *c) {
  hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = 1024;
  hid_t space = h5_check(H5Screate_simple(1, &zero, &unlimited), path, "cannot create a dataspace");
  hid_t plist = H5Pcreate(H5P_DATASET_CREATE);
  h5_check(H5Pset_chunk(plist, 1, &chunk), path, "cannot set chunking");
  hid_t d = h5_check(H5Dcreate2(group, c->name, memory_type(c->type), space, H5P_DEFAULT, plist, H5P_DEFAULT), path,
                     "cannot create a metrics series");
  H5Dclose(d);
  H5Pclose(plist);
  H5Sclose(space);
}

static hid_t create_group(rnnd_metrics *m, const char *name, const column *columns, size_t n) {
  hid_t g = h5_check(H5Gcreate2(m->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), m->path,
                     "cannot create a metrics group");
  for (size_t i = 0; i < n; i++) create_series(m->path, g, &columns[i]);
  return g;
}

/* Rows of a group whose step is <= last_step; every series is cut to that. */
static int64_t keep_rows_until(const rnnd_metrics *m, hid_t group, const column *columns, size_t n,
                               int64_t last_step) {
  hid_t d = h5_check(H5Dopen2(group, "step", H5P_DEFAULT), m->path, "cannot open a metrics series");
  hid_t space = H5Dget_space(d);
  hsize_t rows = 0;
  H5Sget_simple_extent_dims(space, &rows, NULL);
  H5Sclose(space);
  int64_t *steps = RNND_ALLOC(int64_t, rows ? rows : 1, "metrics steps");
  if (rows) h5_check(H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, steps), m->path, "cannot read steps");
  H5Dclose(d);
  hsize_t keep = 0;
  while (keep < rows && steps[keep] <= last_step) keep++;
  free(steps);
  for (size_t i = 0; i < n; i++) {
    hid_t s = h5_check(H5Dopen2(group, columns[i].name, H5P_DEFAULT), m->path, "cannot open a metrics series");
    h5_check(H5Dset_extent(s, &keep), m->path, "cannot cut a metrics series");
    H5Dclose(s);
  }
  return (int64_t)keep;
}

/* HDF5 1.12 renamed the link iteration API; Debian 12 ships 1.10. */
#if H5_VERSION_GE(1, 12, 0)
typedef H5L_info2_t link_info;
#define ITERATE_LINKS H5Literate2
#else
typedef H5L_info_t link_info;
#define ITERATE_LINKS H5Literate
#endif

/* Link iteration callback: cuts one /hist dataset (1-D step or 2-D rows x bins) to *keep rows. */
static herr_t cut_rows(hid_t group, const char *name, const link_info *info, void *keep) {
  (void)info;
  hid_t d = H5Dopen2(group, name, H5P_DEFAULT);
  if (d < 0) return -1;
  hid_t space = H5Dget_space(d);
  hsize_t dims[2] = {0, 0};
  int ndim = H5Sget_simple_extent_dims(space, dims, NULL);
  H5Sclose(space);
  dims[0] = *(const hsize_t *)keep;
  herr_t status = ndim >= 1 ? H5Dset_extent(d, dims) : -1;
  H5Dclose(d);
  return status < 0 ? -1 : 0;
}

/* Keeps the histogram rows of steps <= last_step; later ones are redrawn. */
static void cut_histograms(rnnd_metrics *m, int64_t last_step) {
  hsize_t keep = (hsize_t)keep_rows_until(m, m->hist, step_columns, 1, last_step);
  h5_check(ITERATE_LINKS(m->hist, H5_INDEX_NAME, H5_ITER_NATIVE, NULL, cut_rows, &keep), m->path,
           "cannot cut the histograms");
  m->hist_rows = (int64_t)keep;
  m->hist_bins = (int)h5_read_int_attr(m->path, m->hist, "/hist", "bins");
  hsize_t links = 0;
  H5G_info_t info;
  if (H5Gget_info(m->hist, &info) >= 0) links = info.nlinks;
  m->hist_series = (int)links - 1; /* all but /hist/step */
}

static void open_handles(rnnd_metrics *m);

static void reopen(rnnd_metrics *m, int64_t resume_step) {
  open_handles(m);
  m->train_rows = keep_rows_until(m, m->train, step_columns, N_STEP_COLUMNS, resume_step);
  m->valid_rows = keep_rows_until(m, m->valid, eval_columns, N_EVAL_COLUMNS, resume_step);
  m->test_rows = keep_rows_until(m, m->test, eval_columns, N_EVAL_COLUMNS, resume_step);
  if (m->hist != H5I_INVALID_HID) cut_histograms(m, resume_step);
}

/* The file is open only while something is written, so that readers (h5py,
 * h5dump: HDF5 locks a file open for writing) can open it between log lines. */
static void open_handles(rnnd_metrics *m) {
  if (m->file != H5I_INVALID_HID) return;
  m->file = h5_check(H5Fopen(m->path, H5F_ACC_RDWR, H5P_DEFAULT), m->path, "cannot reopen the metrics file");
  m->train = h5_check(H5Gopen2(m->file, "train", H5P_DEFAULT), m->path, "cannot open /train");
  m->valid = h5_check(H5Gopen2(m->file, "val", H5P_DEFAULT), m->path, "cannot open /val");
  m->test = h5_check(H5Gopen2(m->file, "test", H5P_DEFAULT), m->path, "cannot open /test");
  m->hist = H5Lexists(m->file, "hist", H5P_DEFAULT) > 0
                ? h5_check(H5Gopen2(m->file, "hist", H5P_DEFAULT), m->path, "cannot open /hist")
                : H5I_INVALID_HID;
}

static void close_handles(rnnd_metrics *m) {
  if (m->file == H5I_INVALID_HID) return;
  H5Gclose(m->train);
  H5Gclose(m->valid);
  H5Gclose(m->test);
  if (m->hist != H5I_INVALID_HID) H5Gclose(m->hist);
  h5_check(H5Fclose(m->file), m->path, "cannot write the metrics file (disk full?)");
  m->file = m->train = m->valid = m->test = m->hist = H5I_INVALID_HID;
}

void metrics_open(rnnd_metrics *m, const char *dir, int active, int64_t resume_step) {
  memset(m, 0, sizeof *m);
  m->file = m->train = m->valid = m->test = m->hist = H5I_INVALID_HID;
  if (!active) return;
  h5_quiet();
  snprintf(m->path, sizeof m->path, "%s/metrics.h5", dir);
  if (resume_step >= 0 && H5Fis_hdf5(m->path) > 0) {
    reopen(m, resume_step);
  } else {
    m->file = h5_check(H5Fcreate(m->path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), m->path, "cannot create");
    h5_write_string_attr(m->path, m->file, "format", "rnn_dist-metrics");
    h5_write_int_attr(m->path, m->file, "format_version", 1);
    m->train = create_group(m, "train", step_columns, N_STEP_COLUMNS);
    m->valid = create_group(m, "val", eval_columns, N_EVAL_COLUMNS);
    m->test = create_group(m, "test", eval_columns, N_EVAL_COLUMNS);
  }
  m->active = 1;
  close_handles(m);
  m->capacity = 256;
  m->pending = RNND_ALLOC(rnnd_step_metrics, (size_t)m->capacity, "metrics rows");
  m->column_buffer = rnnd_malloc((size_t)m->capacity * 8, "metrics column");
}

/* Appends one column of `n` rows (records of `stride` bytes) to its series. */
static void append_column(const rnnd_metrics *m, hid_t group, const column *c, const void *rows, size_t stride,
                          hsize_t start, hsize_t n, char *buffer) {
  size_t size = column_size(c->type);
  for (hsize_t i = 0; i < n; i++) memcpy(buffer + i * size, (const char *)rows + i * stride + c->offset, size);
  hid_t d = h5_check(H5Dopen2(group, c->name, H5P_DEFAULT), m->path, "cannot open a metrics series");
  hsize_t total = start + n;
  h5_check(H5Dset_extent(d, &total), m->path, "cannot extend a metrics series");
  hid_t file_space = H5Dget_space(d);
  H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, NULL, &n, NULL);
  hid_t mem_space = H5Screate_simple(1, &n, NULL);
  h5_check(H5Dwrite(d, memory_type(c->type), mem_space, file_space, H5P_DEFAULT, buffer), m->path,
           "cannot write metrics");
  H5Sclose(mem_space);
  H5Sclose(file_space);
  H5Dclose(d);
}

void metrics_add_step(rnnd_metrics *m, const rnnd_step_metrics *row) {
  if (!m->active) return;
  if (m->n_pending == m->capacity) metrics_flush(m);
  m->pending[m->n_pending++] = *row;
}

void metrics_add_eval(rnnd_metrics *m, int test, const rnnd_eval_metrics *row) {
  if (!m->active) return;
  open_handles(m);
  int64_t *rows = test ? &m->test_rows : &m->valid_rows;
  char buffer[8];
  for (size_t i = 0; i < N_EVAL_COLUMNS; i++)
    append_column(m, test ? m->test : m->valid, &eval_columns[i], row, sizeof *row, (hsize_t)*rows, 1, buffer);
  (*rows)++;
  close_handles(m);
}

void metrics_flush(rnnd_metrics *m) {
  if (!m->active) return;
  open_handles(m);
  for (size_t i = 0; i < N_STEP_COLUMNS && m->n_pending; i++)
    append_column(m, m->train, &step_columns[i], m->pending, sizeof *m->pending, (hsize_t)m->train_rows,
                  (hsize_t)m->n_pending, m->column_buffer);
  m->train_rows += m->n_pending;
  m->n_pending = 0;
  close_handles(m);
}

static void hist_name(char *buf, size_t size, int series, int gates, const char *const *gate_names) {
  snprintf(buf, size, "l%d_%s", series / gates, gate_names[series % gates]);
}

/* /hist/step and one [rows x bins] dataset per series, growing by rows. */
static void create_histograms(rnnd_metrics *m, int layers, int gates, const char *const *gate_names, int bins) {
  m->hist = h5_check(H5Gcreate2(m->file, "hist", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), m->path,
                     "cannot create /hist");
  create_series(m->path, m->hist, &step_columns[0]);
  h5_write_double_attr(m->path, m->hist, "range_min", -1.0);
  h5_write_double_attr(m->path, m->hist, "range_max", 1.0);
  h5_write_int_attr(m->path, m->hist, "bins", bins);
  for (int s = 0; s < layers * gates; s++) {
    char name[64];
    hist_name(name, sizeof name, s, gates, gate_names);
    hsize_t dims[2] = {0, (hsize_t)bins}, max[2] = {H5S_UNLIMITED, (hsize_t)bins}, chunk[2] = {64, (hsize_t)bins};
    hid_t space = H5Screate_simple(2, dims, max);
    hid_t plist = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(plist, 2, chunk);
    hid_t d = h5_check(H5Dcreate2(m->hist, name, H5T_NATIVE_INT64, space, H5P_DEFAULT, plist, H5P_DEFAULT), m->path,
                       "cannot create a histogram series");
    H5Dclose(d);
    H5Pclose(plist);
    H5Sclose(space);
  }
  m->hist_series = layers * gates;
  m->hist_bins = bins;
}

static void append_histogram_row(const rnnd_metrics *m, const char *name, const int64_t *counts) {
  hid_t d = h5_check(H5Dopen2(m->hist, name, H5P_DEFAULT), m->path, "cannot open a histogram series");
  hsize_t size[2] = {(hsize_t)m->hist_rows + 1, (hsize_t)m->hist_bins};
  h5_check(H5Dset_extent(d, size), m->path, "cannot extend a histogram series");
  hid_t file_space = H5Dget_space(d);
  hsize_t start[2] = {(hsize_t)m->hist_rows, 0}, count[2] = {1, (hsize_t)m->hist_bins};
  H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, count, NULL);
  hid_t mem_space = H5Screate_simple(2, count, NULL);
  h5_check(H5Dwrite(d, H5T_NATIVE_INT64, mem_space, file_space, H5P_DEFAULT, counts), m->path,
           "cannot write a histogram");
  H5Sclose(mem_space);
  H5Sclose(file_space);
  H5Dclose(d);
}

void metrics_add_histograms(rnnd_metrics *m, int64_t step, int layers, int gates, const char *const *gate_names,
                            int bins, const int64_t *counts) {
  if (!m->active) return;
  open_handles(m);
  if (m->hist == H5I_INVALID_HID) create_histograms(m, layers, gates, gate_names, bins);
  if (layers * gates != m->hist_series || bins != m->hist_bins)
    rnnd_input_error("%s: /hist holds %d series of %d bins, this run draws %d of %d (another model?)", m->path,
                     m->hist_series, m->hist_bins, layers * gates, bins);
  rnnd_step_metrics row = {.step = step};
  append_column(m, m->hist, &step_columns[0], &row, sizeof row, (hsize_t)m->hist_rows, 1, m->column_buffer);
  for (int s = 0; s < m->hist_series; s++) {
    char name[64];
    hist_name(name, sizeof name, s, gates, gate_names);
    append_histogram_row(m, name, counts + (size_t)s * bins);
  }
  m->hist_rows++;
  close_handles(m);
}

void metrics_close(rnnd_metrics *m) {
  if (m->active) metrics_flush(m);
  free(m->pending);
  free(m->column_buffer);
  memset(m, 0, sizeof *m);
}
