/* dataset_check.c — test driver for the data-set reader.
 *   dataset_check FILE            dataset_load(): the whole file, validated
 *   dataset_check --on-disk FILE  dataset_open(): tokens left on disk where
 *                                 the layout allows, then every token read
 *                                 through dataset_read_tokens
 * prints "ok N sequences N tokens" (plus " on disk" when the tokens stayed
 * there); a bad file ends the program through the reader's own one-line
 * error (exit 2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/dataset.h"

static void read_every_token(const rnnd_dataset *ds) {
  enum { BLOCK = 4096 };
  int32_t block[BLOCK];
  for (int64_t at = 0; at < ds->n_tokens; at += BLOCK)
    dataset_read_tokens(ds, at, ds->n_tokens - at < BLOCK ? ds->n_tokens - at : BLOCK, block);
}

int main(int argc, char **argv) {
  rnnd_set_program_name("dataset_check");
  int on_disk = argc == 3 && !strcmp(argv[1], "--on-disk");
  if (argc != 2 + on_disk) rnnd_input_error("usage: dataset_check [--on-disk] FILE");
  rnnd_dataset ds;
  if (on_disk) {
    dataset_open(&ds, argv[2], 1);
    read_every_token(&ds);
  } else {
    dataset_load(&ds, argv[1], 1);
  }
  printf("ok %lld sequences %lld tokens%s\n", (long long)ds.n_sequences, (long long)ds.n_tokens,
         ds.store ? " on disk" : "");
  dataset_free(&ds);
  return RNND_EXIT_OK;
}
