/* prep_writer.h — what rnn_prep's writers share (prep.c: token data sets,
 * prep_csv.c: time series): an HDF5 file written to NAME.tmp and renamed
 * into place when complete, so bad input or a full disk never leaves a
 * half-written file under the final name; checked dataset and attribute
 * writers; mkdir -p. Internal to rnn_prep. */
#ifndef RNND_PREP_WRITER_H
#define RNND_PREP_WRITER_H

#include <hdf5.h>
#include <stdint.h>

#include "rnnd/common.h"

/* A file being written to TMP_PATH and renamed to FINAL_PATH when complete. */
typedef struct {
  char *final_path;
  char *tmp_path;
  hid_t file;
} h5_writer;

/* Abandons the temporary file (removed) and exits with an input error. */
RNND_NORETURN RNND_PRINTF(2, 3) void writer_fail(h5_writer *w, const char *fmt, ...);

#define WCHECK(w, status, ...)                         \
  do {                                                 \
    if ((status) < 0) writer_fail((w), __VA_ARGS__);   \
  } while (0)

char *join_path(const char *dir, const char *name);
void writer_open(h5_writer *w, const char *dir, const char *name);
void writer_commit(h5_writer *w);
/* A 1-D dataset, chunked, shuffled and deflated. */
void write_vector(h5_writer *w, const char *name, hid_t file_type, hid_t mem_type, const void *data, hsize_t n);
hid_t utf8_string_type(h5_writer *w);
void write_strings(h5_writer *w, const char *name, char *const *words, int32_t count);
void write_attribute(h5_writer *w, const char *name, hid_t type, hid_t mem, const void *value);
void write_int_attribute(h5_writer *w, const char *name, int32_t value);
void make_directories(const char *dir);

#endif
