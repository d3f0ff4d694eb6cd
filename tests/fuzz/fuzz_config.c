/* fuzz_config.c — libFuzzer target: an INI file through config_load_file and
 * config_finalize, as `rnn_dist --config` reads it. */
#include "fuzz_common.h"
#include "rnnd/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  const char *path = fuzz_write_input(data, size, ".ini");
  rnnd_config cfg;
  config_init_defaults(&cfg);
  jmp_buf trap;
  if (setjmp(trap) == 0) {
    rnnd_set_input_error_trap(&trap);
    config_load_file(&cfg, path);
    config_finalize(&cfg);
  }
  rnnd_set_input_error_trap(NULL);
  config_free(&cfg);
  return 0;
}
