/* model_meta.c — the vocabulary, class names and feature normalisation of a
 * model file (model_meta.h). */
#include "rnnd/model_meta.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"
#include "rnnd/h5util.h"

static int has_dataset(hid_t file, const char *name) { return H5Lexists(file, name, H5P_DEFAULT) > 0; }

static int32_t read_count(const char *path, hid_t file, const char *name, int32_t lo) {
  int64_t v = h5_read_int_attr(path, file, "/", name);
  if (v < lo || v > (1 << 30)) rnnd_input_error("%s: attribute %s = %lld is out of range", path, name, (long long)v);
  return (int32_t)v;
}

static void read_vocab(rnnd_model_meta *m, const char *path, hid_t file) {
  m->vocab_size = read_count(path, file, "vocab_size", 1);
  m->eos_id = read_count(path, file, "eos_id", 0);
  m->unk_id = read_count(path, file, "unk_id", 0);
  if (m->eos_id >= m->vocab_size || m->unk_id >= m->vocab_size)
    rnnd_input_error("%s: eos_id %d or unk_id %d is outside [0, vocab_size %d)", path, (int)m->eos_id,
                     (int)m->unk_id, (int)m->vocab_size);
  m->vocab = h5_read_strings(path, file, "vocab", m->vocab_size, "vocab_size");
  m->lowercase = h5_has_attr(file, "lowercase") ? h5_read_int_attr(path, file, "/", "lowercase") != 0 : 0;
}

static void read_features(rnnd_model_meta *m, const char *path, hid_t file) {
  m->n_features = read_count(path, file, "n_features", 1);
  m->mean = h5_read_floats(path, file, "mean", m->n_features, "n_features");
  m->std = h5_read_floats(path, file, "std", m->n_features, "n_features");
  for (int32_t f = 0; f < m->n_features; f++)
    if (!(m->std[f] > 0.0f) || !isfinite(m->std[f]) || !isfinite(m->mean[f]))
      rnnd_input_error("%s: /std[%d] = %g must be positive and /mean[%d] finite", path, (int)f, m->std[f], (int)f);
  m->feature_names = has_dataset(file, "feature_names")
                         ? h5_read_strings(path, file, "feature_names", m->n_features, "n_features")
                         : NULL;
}

void model_meta_read(rnnd_model_meta *m, const char *path) {
  memset(m, 0, sizeof *m);
  rnnd_reading_begin(path);
  hid_t file = h5_open_read(path);
  if (has_dataset(file, "vocab")) read_vocab(m, path, file);
  if (has_dataset(file, "label_names")) {
    m->n_classes = read_count(path, file, "n_classes", 1);
    m->class_names = h5_read_strings(path, file, "label_names", m->n_classes, "n_classes");
  }
  if (has_dataset(file, "mean")) read_features(m, path, file);
  H5Fclose(file);
  rnnd_reading_end();
}

void model_meta_write(const char *path, hid_t file, const rnnd_model_meta *m) {
  if (m->vocab_size) {
    h5_write_int_attr(path, file, "vocab_size", m->vocab_size);
    h5_write_int_attr(path, file, "eos_id", m->eos_id);
    h5_write_int_attr(path, file, "unk_id", m->unk_id);
    h5_write_int_attr(path, file, "lowercase", m->lowercase);
    h5_write_strings(path, file, "vocab", m->vocab, m->vocab_size);
  }
  if (m->n_classes) {
    h5_write_int_attr(path, file, "n_classes", m->n_classes);
    h5_write_strings(path, file, "label_names", m->class_names, m->n_classes);
  }
  if (m->n_features) {
    h5_write_int_attr(path, file, "n_features", m->n_features);
    h5_write_floats(path, file, "mean", m->mean, m->n_features);
    h5_write_floats(path, file, "std", m->std, m->n_features);
    if (m->feature_names) h5_write_strings(path, file, "feature_names", m->feature_names, m->n_features);
  }
}

void model_meta_free(rnnd_model_meta *m) {
  h5_free_strings(m->vocab, m->vocab_size);
  h5_free_strings(m->class_names, m->n_classes);
  h5_free_strings(m->feature_names, m->n_features);
  free(m->mean);
  free(m->std);
  memset(m, 0, sizeof *m);
}
