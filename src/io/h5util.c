#define _POSIX_C_SOURCE 200809L
/* h5util.c — checked HDF5 helpers (h5util.h). */
#include "rnnd/h5util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rnnd/common.h"

void h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* HDF5 otherwise closes every open file at exit; after a failed write (a
 * full disk) that close crashes inside the library, so an error exit would
 * end in a segfault instead of its one-line message. rnn_dist closes its
 * files itself on every normal path. */
void h5_process_init(void) { H5dont_atexit(); }

/* The innermost HDF5 error message, for the one-line report. */
static herr_t keep_last_message(unsigned n, const H5E_error2_t *err, void *data) {
  (void)n;
  snprintf((char *)data, 256, "%s", err->desc ? err->desc : "unknown error");
  return 0;
}

hid_t h5_check(hid_t status, const char *path, const char *what) {
  if (status >= 0) return status;
  int system_error = errno; /* what the failed write() said, if it was one */
  char detail[256] = "unknown error";
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_last_message, detail);
  if (system_error == ENOSPC || system_error == EDQUOT || system_error == EFBIG || system_error == EROFS ||
      system_error == EIO)
    rnnd_input_error("%s: %s (HDF5: %s; %s)", path, what, detail, strerror(system_error));
  rnnd_input_error("%s: %s (HDF5: %s)", path, what, detail);
}

hid_t h5_open_read(const char *path) {
  h5_quiet();
  if (access(path, R_OK) != 0) rnnd_input_error("%s: cannot open (%s)", path, strerror(errno));
  htri_t is_hdf5 = H5Fis_hdf5(path);
  if (is_hdf5 <= 0) rnnd_input_error("%s: not an HDF5 file", path);
  return h5_check(H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), path, "cannot open HDF5 file");
}

int h5_has_attr(hid_t obj, const char *name) { return H5Aexists(obj, name) > 0; }

int64_t h5_read_int_attr(const char *path, hid_t obj, const char *obj_name, const char *name) {
  if (!h5_has_attr(obj, name)) rnnd_input_error("%s: missing attribute %s on %s", path, name, obj_name);
  hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
  hid_t type = H5Aget_type(attr);
  H5T_class_t cls = H5Tget_class(type);
  hid_t space = H5Aget_space(attr);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  H5Sclose(space);
  H5Tclose(type);
  if (cls != H5T_INTEGER || n != 1) {
    H5Aclose(attr);
    rnnd_input_error("%s: attribute %s on %s must be a scalar integer", path, name, obj_name);
  }
  long long value = 0;
  h5_check(H5Aread(attr, H5T_NATIVE_LLONG, &value), path, "cannot read attribute");
  H5Aclose(attr);
  return value;
}

void h5_read_string_attr(const char *path, hid_t obj, const char *obj_name, const char *name, char *buf,
                         size_t size) {
  if (!h5_has_attr(obj, name)) rnnd_input_error("%s: missing attribute %s on %s", path, name, obj_name);
  hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
  hid_t type = H5Aget_type(attr);
  if (H5Tget_class(type) != H5T_STRING) {
    H5Tclose(type);
    H5Aclose(attr);
    rnnd_input_error("%s: attribute %s on %s must be a string", path, name, obj_name);
  }
  if (H5Tis_variable_str(type) > 0) {
    char *value = NULL;
    hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type)); /* HDF5 does not convert ASCII <-> UTF-8 */
    h5_check(H5Aread(attr, mem, &value), path, "cannot read attribute");
    snprintf(buf, size, "%s", value ? value : "");
    H5free_memory(value);
    H5Tclose(mem);
  } else {
    size_t n = H5Tget_size(type);
    char *value = rnnd_calloc(n + 1, 1, "attribute");
    h5_check(H5Aread(attr, type, value), path, "cannot read attribute");
    snprintf(buf, size, "%s", value);
    free(value);
  }
  H5Tclose(type);
  H5Aclose(attr);
}

void h5_write_int_attr(const char *path, hid_t obj, const char *name, int64_t value) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = h5_check(H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), path,
                        "cannot create attribute");
  long long v = value;
  h5_check(H5Awrite(attr, H5T_NATIVE_LLONG, &v), path, "cannot write attribute");
  H5Aclose(attr);
  H5Sclose(space);
}

void h5_write_string_attr(const char *path, hid_t obj, const char *name, const char *value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = h5_check(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), path,
                        "cannot create attribute");
  h5_check(H5Awrite(attr, type, &value), path, "cannot write attribute");
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

void h5_write_double_attr(const char *path, hid_t obj, const char *name, double value) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = h5_check(H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT), path,
                        "cannot create attribute");
  h5_check(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value), path, "cannot write attribute");
  H5Aclose(attr);
  H5Sclose(space);
}

double h5_read_double_attr(const char *path, hid_t obj, const char *obj_name, const char *name) {
  if (!h5_has_attr(obj, name)) rnnd_input_error("%s: missing attribute %s on %s", path, name, obj_name);
  hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
  hid_t type = H5Aget_type(attr);
  H5T_class_t cls = H5Tget_class(type);
  H5Tclose(type);
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) {
    H5Aclose(attr);
    rnnd_input_error("%s: attribute %s on %s must be a number", path, name, obj_name);
  }
  double value = 0;
  h5_check(H5Aread(attr, H5T_NATIVE_DOUBLE, &value), path, "cannot read attribute");
  H5Aclose(attr);
  return value;
}
