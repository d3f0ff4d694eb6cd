/* checkpoint.h — HDF5 training checkpoints (docs/formats.md, "Checkpoint"):
 * everything a run needs to continue as if never stopped.
 *
 *   /model      the model file's group: shape attributes, one float32
 *               dataset per PyTorch name (so a checkpoint is also a model
 *               file for eval, --init and PyTorch)
 *   /optimizer  attributes kind, steps and hyper-parameters; groups m and v
 *               (Adam's moments, SGD's momentum in m) with the same names,
 *               and with train.ema_decay the averaged weights (group
 *               average, attributes ema_decay and ema_start)
 *   /amp        loss scale, growth tracker, skipped-step count
 *   /state      step, epoch, next_batch (index of the next global batch in
 *               the epoch's plan), seed, tokens_seen, best_valid_loss,
 *               train_seconds (the training clock, which a resumed run
 *               continues; absent in older checkpoints: read as 0),
 *               world_size (informational: resuming at another is fine)
 *   /config     the fully resolved configuration (INI text), as attribute
 *   /vocab ...  what a model file carries for inference (model_meta.h)
 *   /state/stream_state  data.mode = stream only: float32 [n_streams,
 *               layers * 2 * hidden], every stream's carried state (per
 *               layer h then c), the state the next window starts from
 * Every dataset carries HDF5's Fletcher32 checksum; root attributes format
 * = "rnn_dist-checkpoint", format_version (this reader: 1), max_len.
 *
 * checkpoint_save writes NAME.tmp, closes and fsyncs it, renames it into
 * place, fsyncs the directory, removes all but the newest `keep`
 * checkpoints of the directory and then points DIR/latest at the new one
 * (written the same way), so a crash at any moment leaves the previous
 * checkpoint and pointer intact. */
#ifndef RNND_CHECKPOINT_H
#define RNND_CHECKPOINT_H

#include <stdint.h>

#include "rnnd/amp.h"
#include "rnnd/model.h"
#include "rnnd/model_meta.h"
#include "rnnd/optim.h"

#define RNND_CHECKPOINT_FORMAT "rnn_dist-checkpoint"
#define RNND_CHECKPOINT_FORMAT_VERSION 1

typedef struct {
  int64_t step, epoch, next_batch, tokens_seen;
  uint64_t seed;
  double best_valid_loss;
  double train_seconds; /* the run's training clock at `step`, over every start */
  int world_size;
} rnnd_train_state;

typedef struct {
  const rnnd_layout *layout;
  const float *params;        /* fp32 master weights */
  const rnnd_optimizer *optimizer;
  const rnnd_loss_scaler *scaler;
  const rnnd_train_state *state;
  const char *config_text;
  int max_len;
  double test_delay_s; /* test hook: pause this long with the .tmp written, before the rename */
  const float *stream_state; /* stream mode: [n_streams, stream_width]; NULL: none */
  int64_t n_streams;
  int stream_width;
  const rnnd_model_meta *meta; /* written as in a model file (model_meta.h); NULL: none */
} rnnd_checkpoint_view;

/* Writes DIR/ckpt_stepNNNNNNNN.h5 atomically and updates DIR/latest;
 * returns nothing, fails with a one-line error (exit 2) and no file under
 * the final name if the disk is full or the directory unwritable. */
void checkpoint_save(const char *dir, int keep, const rnnd_checkpoint_view *c);
/* Restores params, optimizer state (same kind and size), scaler and state.
 * A file of another format, a newer version, another model shape (the
 * tensors that differ are named) or a failing checksum is an input error. */
void checkpoint_load(const char *path, const rnnd_layout *layout, float *params, rnnd_optimizer *optimizer,
                     rnnd_loss_scaler *scaler, rnnd_train_state *state);
/* Stream mode: reads /state/stream_state into out[n_streams * width]; a
 * checkpoint without it, or of another shape, is an input error. */
void checkpoint_load_stream_state(const char *path, float *out, int64_t n_streams, int width);
/* DIR/latest's checkpoint path into buf; 0 if there is none. */
int checkpoint_latest(const char *dir, char *buf, size_t size);

#endif
