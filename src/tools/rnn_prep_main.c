/* rnn_prep_main.c — entry point of rnn_prep (text -> HDF5 data sets); all the
 * work is in src/data/prep.c. */
#include "rnnd/common.h"
#include "rnnd/h5util.h"
#include "rnnd/prep.h"

int main(int argc, char **argv) {
  rnnd_set_program_name("rnn_prep");
  h5_process_init();
  rnnd_prep_options opt;
  if (prep_parse_args(&opt, argc, argv)) return RNND_EXIT_OK;
  prep_run(&opt);
  return RNND_EXIT_OK;
}
