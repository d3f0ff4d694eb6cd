/* fuzz_common.h — what the three libFuzzer targets share: the input written
 * to a scratch file (the loaders read paths, as rnn_dist does), the input
 * error trap (rnnd_set_input_error_trap: an input error returns to the target
 * instead of exiting; an internal error aborts and is a finding), and HDF5
 * closed after every input so no object outlives it. */
#ifndef RNND_FUZZ_COMMON_H
#define RNND_FUZZ_COMMON_H

#include <hdf5.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rnnd/common.h"
#include "rnnd/h5util.h"

/* A per-process scratch path in /dev/shm (or /tmp) holding the input. */
static inline const char *fuzz_write_input(const uint8_t *data, size_t size, const char *suffix) {
  static char path[256];
  if (!path[0])
    snprintf(path, sizeof path, "%s/rnnd_fuzz_%d%s", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
             (int)getpid(), suffix);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  return path;
}

static inline void fuzz_init(void) {
  static int done = 0;
  if (done) return;
  done = 1;
  rnnd_set_program_name("fuzz");
  h5_process_init();
  h5_quiet();
}

/* Everything HDF5 still holds (after an input error in mid-read) goes. */
static inline void fuzz_close_hdf5(void) {
  H5close();
  h5_quiet(); /* the next call reopens the library with its default error printing */
}

#endif
