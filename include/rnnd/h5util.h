/* h5util.h — small checked wrappers around the HDF5 C API shared by the
 * model file, data-set writer and later the checkpoint and metrics files.
 * Failures on a user's file are reported as one line naming the file and
 * the object (exit 2); HDF5's own error-stack printing is switched off. */
#ifndef RNND_H5UTIL_H
#define RNND_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "rnnd/common.h"

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

/* Bad input in a file: "PATH: WHAT" (rnnd_input_error, exit 2). */
RNND_NORETURN RNND_PRINTF(2, 3) void h5_fail_at(const char *path, const char *fmt, ...);
/* ... when an HDF5 call returned a negative status. */
#define H5_CHECK_AT(status, path, ...)                \
  do {                                                \
    if ((status) < 0) h5_fail_at((path), __VA_ARGS__); \
  } while (0)

/* 1-D datasets of a file (or group) `loc`, every problem one line naming
 * the file and /NAME (exit 2). h5_open_vector opens /NAME, checks that it
 * is 1-D of type class `want` (`want_words` says it in the message) and
 * that the length it claims fits what the file stores, and returns the
 * open dataset and its length. */
hid_t h5_open_vector(hid_t loc, const char *path, const char *name, H5T_class_t want, const char *want_words,
                     hsize_t *length);
/* A claimed length that the bytes stored cannot hold (a corrupt header) fails. */
void h5_check_plausible_length(hid_t dset, const char *path, const char *name, hsize_t length);
/* The memory type HDF5 reads a stored string type into: its character set
 * (HDF5 converts no ASCII <-> UTF-8), variable length (*width 0) or a fixed
 * width with room for a NUL (*width). The caller closes it. */
hid_t h5_string_memory_type(hid_t stored, const char *path, const char *what, size_t *width);
/* Exactly `count` strings (fixed or variable length) as malloc'd copies,
 * freed with h5_free_strings(strings, count); another length fails with
 * "/NAME has N entries but COUNT_NAME is count". */
char **h5_read_strings(const char *path, hid_t loc, const char *name, int64_t count, const char *count_name);
void h5_free_strings(char **strings, int64_t count);
/* A 1-D variable-length UTF-8 string dataset. */
void h5_write_strings(const char *path, hid_t loc, const char *name, char *const *strings, int64_t count);
/* Exactly `count` floats (any stored float type), malloc'd; the caller frees. */
float *h5_read_floats(const char *path, hid_t loc, const char *name, int64_t count, const char *count_name);
void h5_write_floats(const char *path, hid_t loc, const char *name, const float *values, int64_t count);

/* Fails with "PATH: WHAT (HDF5: ...)" when status < 0; returns status otherwise. */
hid_t h5_check(hid_t status, const char *path, const char *what);

#endif
