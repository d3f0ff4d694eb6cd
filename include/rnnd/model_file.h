/* model_file.h — the HDF5 model file (docs/formats.md, "Model file"):
 * group /model with one float32 dataset per PyTorch state_dict name, shape
 * attributes on /model, and root attributes format, format_version and
 * max_len (the piece length the model was trained with, used by eval).
 *
 * Writes are atomic: NAME.tmp is written, flushed, closed and renamed, so a
 * failure never leaves a half-written file under the final name. */
#ifndef RNND_MODEL_FILE_H
#define RNND_MODEL_FILE_H

#include "rnnd/model.h"

#define RNND_MODEL_FORMAT "rnn_dist-model"
#define RNND_MODEL_FORMAT_VERSION 1

void model_file_write(const char *path, const rnnd_layout *layout, const float *params, int max_len);
/* Reads the shape attributes (and max_len) of a model file. */
void model_file_read_shape(const char *path, rnnd_model_shape *shape, int *max_len);
/* Fails with a line naming the attribute if the file's shape differs from `expected`. */
void model_file_check_shape(const char *path, const rnnd_model_shape *expected);
/* Loads every parameter; a missing dataset or one of another shape is an
 * error naming the file and the dataset. */
void model_file_load_params(const char *path, const rnnd_layout *layout, float *params);

#endif
