/* metrics.c — HDF5 metrics tables (metrics.h). */
#include "rnnd/metrics.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/h5util.h"

static hid_t step_type(void) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(rnnd_step_metrics));
  H5Tinsert(t, "step", offsetof(rnnd_step_metrics, step), H5T_NATIVE_INT64);
  H5Tinsert(t, "epoch", offsetof(rnnd_step_metrics, epoch), H5T_NATIVE_INT64);
  H5Tinsert(t, "loss", offsetof(rnnd_step_metrics, loss), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "tokens", offsetof(rnnd_step_metrics, tokens), H5T_NATIVE_INT64);
  H5Tinsert(t, "lr", offsetof(rnnd_step_metrics, lr), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "grad_norm", offsetof(rnnd_step_metrics, grad_norm), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "imbalance", offsetof(rnnd_step_metrics, imbalance), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "compute_s", offsetof(rnnd_step_metrics, compute_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "comm_s", offsetof(rnnd_step_metrics, comm_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "elapsed_s", offsetof(rnnd_step_metrics, elapsed_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "loss_scale", offsetof(rnnd_step_metrics, loss_scale), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "skipped", offsetof(rnnd_step_metrics, skipped), H5T_NATIVE_INT32);
  H5Tinsert(t, "growth_tracker", offsetof(rnnd_step_metrics, growth_tracker), H5T_NATIVE_INT64);
  H5Tinsert(t, "underflow", offsetof(rnnd_step_metrics, underflow), H5T_NATIVE_DOUBLE);
  return t;
}

static hid_t eval_type(void) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(rnnd_eval_metrics));
  H5Tinsert(t, "step", offsetof(rnnd_eval_metrics, step), H5T_NATIVE_INT64);
  H5Tinsert(t, "split", offsetof(rnnd_eval_metrics, split), H5T_NATIVE_INT32);
  H5Tinsert(t, "loss", offsetof(rnnd_eval_metrics, loss), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "ppl", offsetof(rnnd_eval_metrics, ppl), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "tokens", offsetof(rnnd_eval_metrics, tokens), H5T_NATIVE_INT64);
  return t;
}

/* An empty 1-D table that grows without bound, in chunks of `chunk` rows. */
static hid_t create_table(const rnnd_metrics *m, const char *name, hid_t type, hsize_t chunk) {
  hsize_t zero = 0, unlimited = H5S_UNLIMITED;
  hid_t space = h5_check(H5Screate_simple(1, &zero, &unlimited), m->path, "cannot create a dataspace");
  hid_t plist = H5Pcreate(H5P_DATASET_CREATE);
  h5_check(H5Pset_chunk(plist, 1, &chunk), m->path, "cannot set chunking");
  hid_t d = h5_check(H5Dcreate2(m->file, name, type, space, H5P_DEFAULT, plist, H5P_DEFAULT), m->path,
                     "cannot create a metrics table");
  H5Pclose(plist);
  H5Sclose(space);
  return d;
}

void metrics_open(rnnd_metrics *m, const char *dir, int active) {
  memset(m, 0, sizeof *m);
  m->file = m->train = m->eval = m->train_type = m->eval_type = H5I_INVALID_HID;
  if (!active) return;
  h5_quiet();
  snprintf(m->path, sizeof m->path, "%s/metrics.h5", dir);
  m->file = h5_check(H5Fcreate(m->path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), m->path, "cannot create");
  m->train_type = step_type();
  m->eval_type = eval_type();
  m->train = create_table(m, "train", m->train_type, 256);
  m->eval = create_table(m, "eval", m->eval_type, 16);
  h5_write_string_attr(m->path, m->file, "format", "rnn_dist-metrics");
  h5_write_int_attr(m->path, m->file, "format_version", 1);
  m->capacity = 256;
  m->pending = RNND_ALLOC(rnnd_step_metrics, (size_t)m->capacity, "metrics rows");
}

static void append_rows(rnnd_metrics *m, hid_t table, hid_t type, int64_t *rows, const void *data, hsize_t n) {
  hsize_t start = (hsize_t)*rows, size = start + n;
  h5_check(H5Dset_extent(table, &size), m->path, "cannot extend a metrics table");
  hid_t file_space = H5Dget_space(table);
  H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, NULL, &n, NULL);
  hid_t mem_space = H5Screate_simple(1, &n, NULL);
  h5_check(H5Dwrite(table, type, mem_space, file_space, H5P_DEFAULT, data), m->path, "cannot write metrics");
  H5Sclose(mem_space);
  H5Sclose(file_space);
  *rows = (int64_t)size;
}

void metrics_add_step(rnnd_metrics *m, const rnnd_step_metrics *row) {
  if (m->file == H5I_INVALID_HID) return;
  if (m->n_pending == m->capacity) metrics_flush(m);
  m->pending[m->n_pending++] = *row;
}

void metrics_add_eval(rnnd_metrics *m, const rnnd_eval_metrics *row) {
  if (m->file == H5I_INVALID_HID) return;
  append_rows(m, m->eval, m->eval_type, &m->eval_rows, row, 1);
}

void metrics_flush(rnnd_metrics *m) {
  if (m->file == H5I_INVALID_HID) return;
  if (m->n_pending) append_rows(m, m->train, m->train_type, &m->train_rows, m->pending, (hsize_t)m->n_pending);
  m->n_pending = 0;
  h5_check(H5Fflush(m->file, H5F_SCOPE_GLOBAL), m->path, "cannot flush");
}

void metrics_close(rnnd_metrics *m) {
  if (m->file != H5I_INVALID_HID) {
    metrics_flush(m);
    H5Dclose(m->train);
    H5Dclose(m->eval);
    H5Tclose(m->train_type);
    H5Tclose(m->eval_type);
    h5_check(H5Fclose(m->file), m->path, "cannot close");
  }
  free(m->pending);
  memset(m, 0, sizeof *m);
}
