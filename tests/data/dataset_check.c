/* dataset_check.c — test driver for dataset_load(): `dataset_check FILE`
 * loads FILE with its vocabulary and prints "ok N sequences N tokens"; a bad
 * file ends the program through the reader's own one-line error (exit 2). */
#include <stdio.h>

#include "rnnd/common.h"
#include "rnnd/dataset.h"

int main(int argc, char **argv) {
  rnnd_set_program_name("dataset_check");
  if (argc != 2) rnnd_input_error("usage: dataset_check FILE");
  rnnd_dataset ds;
  dataset_load(&ds, argv[1], 1);
  printf("ok %lld sequences %lld tokens\n", (long long)ds.n_sequences, (long long)ds.n_tokens);
  dataset_free(&ds);
  return RNND_EXIT_OK;
}
