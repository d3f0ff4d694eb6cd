/* model_meta.h — what a model file carries besides its weights, so that it
 * can be used alone (`rnn_dist generate`, `rnn_dist predict`): the
 * vocabulary with its <eos> and <unk> ids, the text preprocessing (the
 * `lowercase` of rnn_prep --lowercase), a classifier's class names, a
 * forecaster's feature names and the per-feature mean and std its inputs
 * were normalised with. They are stored under the data set's names, at the
 * root of the file (docs/formats.md): /vocab with the attributes
 * vocab_size, eos_id, unk_id and lowercase; /label_names with n_classes;
 * /feature_names, /mean and /std with n_features. So one reader takes them
 * from a model file, a checkpoint, or (for model files written before they
 * were stored) the data set the model was trained on.
 *
 * Ownership: model_meta_read fills the struct with malloc'd copies;
 * model_meta_free releases them. */
#ifndef RNND_MODEL_META_H
#define RNND_MODEL_META_H

#include <hdf5.h>
#include <stdint.h>

typedef struct {
  int32_t vocab_size;   /* 0: no vocabulary in the file */
  char **vocab;         /* [vocab_size] words in id order */
  int32_t eos_id, unk_id;
  int lowercase;        /* 1: ASCII letters were lowercased before counting (0 when the file does not say) */
  int32_t n_classes;    /* 0: no class names */
  char **class_names;   /* [n_classes] */
  int32_t n_features;   /* 0: no feature normalisation */
  char **feature_names; /* [n_features] */
  float *mean, *std;    /* [n_features], original units */
} rnnd_model_meta;

/* Reads what PATH (a data set, model file or checkpoint) holds of the
 * above; what it lacks stays empty. Malformed entries fail with one line
 * naming the file and the entry (exit 2). */
void model_meta_read(rnnd_model_meta *m, const char *path);
/* Writes every non-empty part into an open file (root group). */
void model_meta_write(const char *path, hid_t file, const rnnd_model_meta *m);
void model_meta_free(rnnd_model_meta *m);

#endif
