/* fuzz_checkpoint.c — libFuzzer target: an HDF5 file through checkpoint_load
 * for the model the seed corpus was written with (GRU, 1 layer, embed =
 * hidden = 8, vocab 50, untied), as `rnn_dist --resume` reads it, and
 * through model_meta_read (its vocabulary, class names, normalisation), as
 * `rnn_dist generate` and `predict` read it. */
#include "fuzz_common.h"
#include "rnnd/amp.h"
#include "rnnd/checkpoint.h"
#include "rnnd/model.h"
#include "rnnd/model_meta.h"
#include "rnnd/optim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  const char *path = fuzz_write_input(data, size, ".h5");
  rnnd_model_shape shape = {.cell = RNND_CELL_GRU, .layers = 1, .embed = 8, .hidden = 8, .vocab_size = 50,
                            .directions = 1};
  rnnd_layout layout;
  model_layout_init(&layout, &shape);
  rnnd_config cfg;
  config_init_defaults(&cfg);
  rnnd_optimizer opt;
  optimizer_init(&opt, &cfg.train, layout.numel);
  rnnd_loss_scaler scaler;
  loss_scaler_init(&scaler, &cfg.amp, RNND_DTYPE_F32);
  float *params = calloc(layout.numel, sizeof *params);
  rnnd_train_state state;
  jmp_buf trap;
  if (setjmp(trap) == 0) {
    rnnd_set_input_error_trap(&trap);
    checkpoint_load(path, &layout, params, &opt, &scaler, &state);
  }
  rnnd_model_meta meta = {0};
  if (setjmp(trap) == 0) {
    rnnd_set_input_error_trap(&trap);
    model_meta_read(&meta, path);
  }
  rnnd_set_input_error_trap(NULL);
  model_meta_free(&meta); /* what was read before an error */
  free(params);
  optimizer_free(&opt);
  config_free(&cfg);
  fuzz_close_hdf5();
  return 0;
}
