/* fuzz_dataset.c — libFuzzer target: an HDF5 file through dataset_load (with
 * the vocabulary), as rnn_dist reads train/valid/test sets. */
#include "fuzz_common.h"
#include "rnnd/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  const char *path = fuzz_write_input(data, size, ".h5");
  rnnd_dataset ds;
  memset(&ds, 0, sizeof ds);
  jmp_buf trap;
  if (setjmp(trap) == 0) {
    rnnd_set_input_error_trap(&trap);
    dataset_load(&ds, path, 1);
  }
  rnnd_set_input_error_trap(NULL);
  dataset_free(&ds);
  fuzz_close_hdf5();
  return 0;
}
