/* model_file.h — the HDF5 model file (docs/formats.md, "Model file"):
 * group /model with one float32 dataset per PyTorch state_dict name, shape
 * attributes on /model, and root attributes format, format_version and
 * max_len (the piece length the model was trained with, used by eval),
 * and beside them what inference needs (model_meta.h).
 *
 * Writes are atomic: NAME.tmp is written, flushed, closed and renamed, so a
 * failure never leaves a half-written file under the final name. */
#ifndef RNND_MODEL_FILE_H
#define RNND_MODEL_FILE_H

#include <hdf5.h>

#include "rnnd/model.h"
#include "rnnd/model_meta.h"

#define RNND_MODEL_FORMAT "rnn_dist-model"
#define RNND_MODEL_FORMAT_VERSION 1

/* meta: the vocabulary, class names or normalisation that make the file
 * usable alone (model_meta.h); NULL writes none. */
void model_file_write(const char *path, const rnnd_layout *layout, const float *params, int max_len,
                      const rnnd_model_meta *meta);
/* Reads the shape attributes (and max_len) of a model file. */
void model_file_read_shape(const char *path, rnnd_model_shape *shape, int *max_len);
/* Fails with a line naming the attribute if the file's shape differs from `expected`. */
void model_file_check_shape(const char *path, const rnnd_model_shape *expected);
/* Loads every parameter; a missing dataset or one of another shape is an
 * error naming the file and the dataset. */
void model_file_load_params(const char *path, const rnnd_layout *layout, float *params);
/* The weights to evaluate and infer with: a checkpoint's averaged weights
 * (/optimizer/average, train.ema_decay) when it has them, else /model (a
 * model file's /model already holds the averaged weights). */
void model_file_load_inference_params(const char *path, const rnnd_layout *layout, float *params);

/* Building blocks shared with checkpoints (checkpoint.h): one float32
 * dataset per parameter name of `flat` in an open group (optionally
 * Fletcher32-checksummed), read back with shape checks naming
 * group_name/NAME, the shape attributes, and fsync of a closed file. */
void model_file_write_tensors(const char *path, hid_t group, const rnnd_layout *layout, const float *flat,
                              int checksum);
void model_file_read_tensors(const char *path, hid_t group, const char *group_name, const rnnd_layout *layout,
                             float *flat);
void model_file_write_shape(const char *path, hid_t group, const rnnd_model_shape *s);
/* One dataset of that kind (v->name in group; v->offset unused). */
void model_file_write_view(const char *path, hid_t group, const rnnd_param_view *v, const float *data, int checksum);
void model_file_read_view(const char *path, hid_t group, const char *group_name, const rnnd_param_view *v,
                          float *data);
void model_file_sync(const char *path);
/* Lists (into buf) every parameter of `layout` that the group lacks or
 * holds in another shape; returns how many. */
int model_file_list_mismatches(hid_t group, const rnnd_layout *layout, char *buf, size_t size);

#endif
