/* h5util.h — small checked wrappers around the HDF5 C API shared by the
 * model file, data-set writer and later the checkpoint and metrics files.
 * Failures on a user's file are reported as one line naming the file and
 * the object (exit 2); HDF5's own error-stack printing is switched off. */
#ifndef RNND_H5UTIL_H
#define RNND_H5UTIL_H

#include <hdf5.h>
#include <stdint.h>

/* Silences HDF5's automatic error stack (call before any HDF5 use). */
void h5_quiet(void);
/* First thing in main, before any other HDF5 call (see h5util.c). */
void h5_process_init(void);
/* Opens an existing file read-only, or fails naming it. */
hid_t h5_open_read(const char *path);
int h5_has_attr(hid_t obj, const char *name);
int64_t h5_read_int_attr(const char *path, hid_t obj, const char *obj_name, const char *name);
/* Reads a string attribute into buf (fixed or variable length). */
void h5_read_string_attr(const char *path, hid_t obj, const char *obj_name, const char *name, char *buf,
                         size_t size);
void h5_write_int_attr(const char *path, hid_t obj, const char *name, int64_t value);
void h5_write_string_attr(const char *path, hid_t obj, const char *name, const char *value);
void h5_write_double_attr(const char *path, hid_t obj, const char *name, double value);
double h5_read_double_attr(const char *path, hid_t obj, const char *obj_name, const char *name);

/* Fails with "PATH: WHAT (HDF5: ...)" when status < 0; returns status otherwise. */
hid_t h5_check(hid_t status, const char *path, const char *what);

#endif
