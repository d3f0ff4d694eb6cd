#define _POSIX_C_SOURCE 200809L
/* h5util.c — checked HDF5 helpers (h5util.h). */
#include "rnnd/h5util.h"

#include <errno.h>
#include <stdarg.h>
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

/* ---- 1-D datasets, checked as dataset_load checks them ----------------- */

void h5_fail_at(const char *path, const char *fmt, ...) {
  char what[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(what, sizeof what, fmt, args);
  va_end(args);
  rnnd_input_error("%s: %s", path, what);
}

static const char *class_name(H5T_class_t cls) {
  switch (cls) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "floating point";
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length sequence";
    default: return "other";
  }
}

/* deflate never compresses by more than about 1032:1 */
#define MAX_COMPRESSION 2048.0
void h5_check_plausible_length(hid_t dset, const char *path, const char *name, hsize_t length) {
  hsize_t stored = H5Dget_storage_size(dset);
  if ((double)length > MAX_COMPRESSION * ((double)stored + 4096.0))
    h5_fail_at(path, "/%s claims %llu elements but the file stores %llu bytes of it (corrupt file?)", name,
            (unsigned long long)length, (unsigned long long)stored);
}

hid_t h5_open_vector(hid_t file, const char *path, const char *name, H5T_class_t want, const char *want_words,
                     hsize_t *length) {
  htri_t exists = H5Lexists(file, name, H5P_DEFAULT);
  H5_CHECK_AT(exists, path, "cannot look up dataset /%s", name);
  if (!exists) h5_fail_at(path, "missing dataset /%s", name);
  hid_t dset = H5Dopen2(file, name, H5P_DEFAULT);
  H5_CHECK_AT(dset, path, "/%s is not a dataset", name);
  hid_t type = H5Dget_type(dset);
  H5_CHECK_AT(type, path, "cannot read the type of /%s", name);
  H5T_class_t cls = H5Tget_class(type);
  H5_CHECK_AT(cls, path, "cannot read the type of /%s", name);
  H5_CHECK_AT(H5Tclose(type), path, "cannot close the type of /%s", name);
  if (cls != want) h5_fail_at(path, "/%s has %s type, expected %s", name, class_name(cls), want_words);
  hid_t space = H5Dget_space(dset);
  H5_CHECK_AT(space, path, "cannot read the shape of /%s", name);
  int rank = H5Sget_simple_extent_ndims(space);
  H5_CHECK_AT(rank, path, "cannot read the shape of /%s", name);
  if (rank != 1) h5_fail_at(path, "/%s has rank %d, expected a 1-D dataset", name, rank);
  H5_CHECK_AT(H5Sget_simple_extent_dims(space, length, NULL), path, "cannot read the shape of /%s", name);
  H5_CHECK_AT(H5Sclose(space), path, "cannot close the shape of /%s", name);
  h5_check_plausible_length(dset, path, name, *length);
  return dset;
}

hid_t h5_string_memory_type(hid_t stored, const char *path, const char *what, size_t *width) {
  htri_t variable = H5Tis_variable_str(stored);
  H5_CHECK_AT(variable, path, "cannot read the type of %s", what);
  H5T_cset_t cset = H5Tget_cset(stored);
  H5_CHECK_AT(cset, path, "cannot read the character set of %s", what);
  size_t stored_size = variable ? 0 : H5Tget_size(stored);
  if (!variable && stored_size == 0) h5_fail_at(path, "cannot read the type of %s", what);
  *width = variable ? 0 : stored_size + 1;
  hid_t mem = H5Tcopy(H5T_C_S1);
  H5_CHECK_AT(mem, path, "cannot read %s", what);
  H5_CHECK_AT(H5Tset_cset(mem, cset), path, "cannot read %s", what);
  H5_CHECK_AT(H5Tset_size(mem, variable ? H5T_VARIABLE : *width), path, "cannot read %s", what);
  H5_CHECK_AT(H5Tset_strpad(mem, H5T_STR_NULLTERM), path, "cannot read %s", what);
  return mem;
}

/* Frees what HDF5 allocated for the variable-length strings in words;
 * returns a negative status if it could not. */
static herr_t release_strings(hid_t mem, hid_t dset, char **words) {
  hid_t space = H5Dget_space(dset);
  if (space < 0) return -1;
#if H5_VERSION_GE(1, 12, 0)
  herr_t status = H5Treclaim(mem, space, H5P_DEFAULT, words);
#else
  herr_t status = H5Dvlen_reclaim(mem, space, H5P_DEFAULT, words);
#endif
  return H5Sclose(space) < 0 ? -1 : status;
}

/* The strings as malloc'd copies; allocated only once the read succeeded,
 * so an error exit leaves nothing behind. */
static char **copy_strings(hid_t dset, hid_t mem, size_t width, hsize_t n, const char *path, const char *name) {
  char **out = NULL;
  if (width == 0) {
    char **raw = RNND_ALLOC(char *, n, "strings");
    herr_t status = H5Dread(dset, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw);
    if (status < 0) free(raw); /* the error below leaves no buffer behind (found by fuzzing) */
    H5_CHECK_AT(status, path, "cannot read /%s", name);
    out = RNND_ALLOC(char *, n ? n : 1, "strings");
    for (hsize_t i = 0; i < n; i++) out[i] = rnnd_strdup(raw[i] ? raw[i] : "");
    status = release_strings(mem, dset, raw);
    free(raw);
    if (status < 0) h5_free_strings(out, (int64_t)n);
    H5_CHECK_AT(status, path, "cannot release /%s strings", name);
  } else {
    char *raw = rnnd_calloc(n, width, "strings");
    herr_t status = H5Dread(dset, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw);
    if (status < 0) free(raw);
    H5_CHECK_AT(status, path, "cannot read /%s", name);
    out = RNND_ALLOC(char *, n ? n : 1, "strings");
    for (hsize_t i = 0; i < n; i++) out[i] = rnnd_strdup(raw + i * width);
    free(raw);
  }
  return out;
}

char **h5_read_strings(const char *path, hid_t file, const char *name, int64_t count, const char *count_name) {
  hsize_t n = 0;
  hid_t dset = h5_open_vector(file, path, name, H5T_STRING, "strings", &n);
  if (n != (hsize_t)count)
    h5_fail_at(path, "/%s has %llu entries but %s is %lld", name, (unsigned long long)n, count_name, (long long)count);
  hid_t type = H5Dget_type(dset);
  H5_CHECK_AT(type, path, "cannot read the type of /%s", name);
  char what[128];
  snprintf(what, sizeof what, "/%s", name);
  size_t width = 0;
  hid_t mem = h5_string_memory_type(type, path, what, &width);
  char **strings = copy_strings(dset, mem, width, n, path, name);
  H5_CHECK_AT(H5Tclose(mem), path, "cannot close the type of /%s", name);
  H5_CHECK_AT(H5Tclose(type), path, "cannot close the type of /%s", name);
  H5_CHECK_AT(H5Dclose(dset), path, "cannot close /%s", name);
  return strings;
}

void h5_free_strings(char **strings, int64_t count) {
  if (!strings) return;
  for (int64_t i = 0; i < count; i++) free(strings[i]);
  free(strings);
}

void h5_write_strings(const char *path, hid_t loc, const char *name, char *const *strings, int64_t count) {
  hid_t type = h5_check(H5Tcopy(H5T_C_S1), path, "cannot make a string type");
  h5_check(H5Tset_size(type, H5T_VARIABLE), path, "cannot make a string type");
  h5_check(H5Tset_cset(type, H5T_CSET_UTF8), path, "cannot make a string type");
  hsize_t dims[1] = {(hsize_t)count};
  hid_t space = h5_check(H5Screate_simple(1, dims, NULL), path, "cannot make a dataspace");
  hid_t set = h5_check(H5Dcreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path,
                       "cannot create a string dataset");
  if (count > 0) h5_check(H5Dwrite(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, strings), path, "cannot write strings");
  H5Dclose(set);
  H5Sclose(space);
  H5Tclose(type);
}

float *h5_read_floats(const char *path, hid_t file, const char *name, int64_t count, const char *count_name) {
  hsize_t n = 0;
  hid_t dset = h5_open_vector(file, path, name, H5T_FLOAT, "floats", &n);
  if (n != (hsize_t)count)
    h5_fail_at(path, "/%s has %llu values but %s is %lld", name, (unsigned long long)n, count_name, (long long)count);
  float *values = RNND_ALLOC(float, n ? n : 1, "float vector");
  herr_t status = n ? H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) : 0;
  if (status < 0) free(values); /* an error exit leaves nothing behind */
  H5_CHECK_AT(status, path, "cannot read /%s", name);
  H5_CHECK_AT(H5Dclose(dset), path, "cannot close /%s", name);
  return values;
}

void h5_write_floats(const char *path, hid_t loc, const char *name, const float *values, int64_t count) {
  hsize_t dims[1] = {(hsize_t)count};
  hid_t space = h5_check(H5Screate_simple(1, dims, NULL), path, "cannot make a dataspace");
  hid_t set = h5_check(H5Dcreate2(loc, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), path,
                       "cannot create a float dataset");
  if (count > 0)
    h5_check(H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), path, "cannot write floats");
  H5Dclose(set);
  H5Sclose(space);
}
