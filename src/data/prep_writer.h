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

/* A file being written to TMP_PATH and renamed to FINAL_PATH when complete.
 * Writers of one output set share a group: a failure in any removes every
 * member's temporary file. */
typedef struct h5_writer {
  char *final_path;
  char *tmp_path;
  hid_t file;
  struct h5_writer *group; /* NULL: on its own */
  int group_size;
} h5_writer;

/* Abandons the temporary file (removed) and exits with an input error. */
RNND_NORETURN RNND_PRINTF(2, 3) void writer_fail(h5_writer *w, const char *fmt, ...);

#define WCHECK(w, status, ...)                         \
  do {                                                 \
    if ((status) < 0) writer_fail((w), __VA_ARGS__);   \
  } while (0)

char *join_path(const char *dir, const char *name);
void writer_open(h5_writer *w, const char *dir, const char *name);
/* writer_open for a member of group[0 .. size) (zeroed before the first). */
void writer_open_in_group(h5_writer *w, const char *dir, const char *name, h5_writer *group, int size);
/* Closes the temporary file (complete, not yet under its final name). */
void writer_finish(h5_writer *w);
/* Renames a finished file into place. */
void writer_rename(h5_writer *w);
/* writer_finish, then writer_rename. */
void writer_commit(h5_writer *w);

/* A 1-D dataset written a buffer at a time (extendible, chunked; with
 * deflate > 0 shuffled and deflated at that level). */
typedef struct {
  h5_writer *w;
  const char *name;
  hid_t dset, mem_type;
  hsize_t n;
} h5_appender;
void appender_open(h5_appender *a, h5_writer *w, const char *name, hid_t file_type, hid_t mem_type, hsize_t chunk,
                   int deflate);
void appender_add(h5_appender *a, const void *data, size_t n);
void appender_close(h5_appender *a);
/* A 1-D dataset, chunked, shuffled and deflated. */
void write_vector(h5_writer *w, const char *name, hid_t file_type, hid_t mem_type, const void *data, hsize_t n);
hid_t utf8_string_type(h5_writer *w);
void write_strings(h5_writer *w, const char *name, char *const *words, int32_t count);
void write_attribute(h5_writer *w, const char *name, hid_t type, hid_t mem, const void *value);
void write_int_attribute(h5_writer *w, const char *name, int32_t value);
void make_directories(const char *dir);

#endif
